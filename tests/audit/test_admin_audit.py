"""What the admin's audit events say about users, groups and clusters, and that they commit with the change or not
at all (the walk over every admin is tests/audit/test_admin_walk.py)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from audit import admin as audit_admin
from audit.models import AuditEvent
from inventory.models import ChangeEvent, Cluster
from portal import admin as portal_admin
from portal.tenancy.roles import Role
from tests.audit.admin_forms import submit
from tests.audit.conftest import PASSWORD, TOKEN_A, kubeconfig
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory

pytestmark = pytest.mark.django_db


def _events(obj) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(target_type=obj._meta.label_lower, target_id=str(obj.pk)).order_by("id"))


@pytest.fixture
def admin_client(client: Client, platform_admin: User) -> Client:
    client.force_login(platform_admin)
    return client


def test_granting_and_removing_roles_and_superuser_is_audited(admin_client: Client, platform_admin: User) -> None:
    user = make_user("carol")
    # The admin's date widgets drop microseconds, and the log would rightly show that as a change too.
    User.objects.filter(pk=user.pk).update(date_joined=user.date_joined.replace(microsecond=0))
    security = Group.objects.get_or_create(name=Role.SECURITY_APPROVER.value)[0]
    finance = Group.objects.get_or_create(name=Role.FINANCE.value)[0]
    url = f"/admin/auth/user/{user.pk}/change/"
    response = submit(admin_client, url, {"groups": [str(security.pk), str(finance.pk)], "is_superuser": "on",
                                          "is_staff": "on"})
    assert response.status_code == 302
    response = submit(admin_client, url, {"groups": [str(finance.pk)], "is_superuser": None, "is_active": None})
    assert response.status_code == 302
    granted, removed = _events(user)
    assert granted.verb == removed.verb == "user.updated"
    assert granted.before == {"is_staff": False, "is_superuser": False, "groups": []}
    assert granted.after == {"is_staff": True, "is_superuser": True, "groups": ["finance", "security-approver"]}
    assert removed.before == {"is_active": True, "is_superuser": True, "groups": ["finance", "security-approver"]}
    assert removed.after == {"is_active": False, "is_superuser": False, "groups": ["finance"]}
    assert (removed.actor_id, removed.data["via"]) == (platform_admin.pk, "admin")


def test_user_creation_and_password_changes_never_record_the_hash(admin_client: Client) -> None:
    response = submit(admin_client, "/admin/auth/user/add/", {"username": "dave", "password1": PASSWORD,
                                                              "password2": PASSWORD, "usable_password": "true"})
    assert response.status_code == 302
    user = User.objects.get(username="dave")
    new_password = PASSWORD + "-2"
    url = f"/admin/auth/user/{user.pk}/password/"
    assert admin_client.post(url, {"password1": new_password, "password2": new_password,
                                   "usable_password": "true"}).status_code == 302
    assert admin_client.post(url, {"usable_password": "false", "unset-password": "1"}).status_code == 302
    user.refresh_from_db()
    assert not user.has_usable_password()
    created, changed, disabled = _events(user)
    assert (created.verb, created.after["password"], created.after["username"]) == ("user.created", "[set]", "dave")
    assert (changed.verb, changed.before, changed.after) == (
        "user.password_changed", {"password": "[set]"}, {"password": "[replaced]"})
    assert (disabled.verb, disabled.after) == ("user.password_changed", {"password": "[unusable]"})
    # A refused form (mismatch) changes nothing and records nothing.
    assert admin_client.post(url, {"password1": "a-Long-pass-1", "password2": "other"}).status_code == 200
    assert len(_events(user)) == 3


def test_deleting_a_group_records_who_held_the_role(admin_client: Client) -> None:
    holder = make_user("erin", Role.SECURITY_APPROVER)
    group = Group.objects.get(name=Role.SECURITY_APPROVER.value)
    assert admin_client.post(f"/admin/auth/group/{group.pk}/delete/", {"post": "yes"}).status_code == 302
    (deleted,) = AuditEvent.objects.filter(verb="group.deleted")
    assert deleted.before["members"] == [holder.username]
    assert deleted.before["name"] == "security-approver"


def test_deleting_a_cluster_in_the_admin_reaches_the_change_feed_and_the_log(admin_client: Client) -> None:
    cluster = ClusterFactory(name="mistake", kubeconfig=kubeconfig(TOKEN_A))
    assert admin_client.post(f"/admin/inventory/cluster/{cluster.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    (event,) = AuditEvent.objects.filter(verb="cluster.deleted", target_id=str(cluster.pk))
    assert TOKEN_A not in str(event.before)
    assert ChangeEvent.objects.filter(object_type="cluster", object_id="mistake", action="deleted").exists()


class RefusedError(Exception):
    pass


@pytest.fixture
def audit_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit write fails: the change it records must not be committed either."""
    def refuse(**kwargs):
        raise RefusedError

    monkeypatch.setattr(audit_admin, "audit_record", refuse)
    monkeypatch.setattr(portal_admin, "audit_record", refuse)


def test_a_change_whose_audit_fails_is_not_saved(admin_client: Client, audit_fails: None) -> None:
    user = make_user("frank")
    group = Group.objects.get_or_create(name=Role.PLATFORM_ADMIN.value)[0]
    with pytest.raises(RefusedError):
        submit(admin_client, f"/admin/auth/user/{user.pk}/change/", {"groups": [str(group.pk)], "is_superuser": "on"})
    user.refresh_from_db()
    assert (user.is_superuser, list(user.groups.all())) == (False, [])


def test_a_bulk_delete_whose_audit_fails_deletes_nothing(admin_client: Client, audit_fails: None) -> None:
    groups = [Group.objects.create(name=f"bulk-{n}") for n in range(2)]
    with pytest.raises(RefusedError):
        admin_client.post("/admin/auth/group/", {"action": "delete_selected", "post": "yes",
                                                 "_selected_action": [str(g.pk) for g in groups]})
    assert Group.objects.filter(name__startswith="bulk-").count() == 2


def test_a_password_change_whose_audit_fails_is_not_saved(admin_client: Client, audit_fails: None) -> None:
    user = make_user("grace")
    stored = user.password
    with pytest.raises(RefusedError):
        admin_client.post(f"/admin/auth/user/{user.pk}/password/",
                          {"password1": PASSWORD, "password2": PASSWORD, "usable_password": "true"})
    user.refresh_from_db()
    assert user.password == stored
