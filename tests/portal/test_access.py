"""Exception tickets: every allowed transition and every forbidden one (self-approval, same-tenant approval, expired
requests, too few approvals, double approval, extension without a new request), break-glass, revocation, expiry —
each with its audit event. Cluster writes are only enqueued here (tests/portal/test_access_cluster.py runs them)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from portal.access.services import (
    AccessError,
    AccessStateError,
    access_expire_due,
    access_request_create,
    access_request_review,
    access_request_withdraw,
    break_glass_grant,
    grant_revoke,
    reviewable_by,
)
from portal.models import AccessPolicy, AccessRequest, Grant, Notification, exception_key
from portal.tenancy.roles import Role
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory
from tests.portal.factories import give_namespaces

HOUR = dt.timedelta(hours=1)


@pytest.fixture
def world(db, member, security_approver, platform_admin):
    cluster = ClusterFactory(name="prod")
    give_namespaces(member, cluster, "ml-research", tenant_slug="ml-research")
    give_namespaces(make_user("outsider"), cluster, "vision", tenant_slug="vision")
    return {"cluster": cluster, "member": member, "sec1": security_approver,
            "sec2": make_user("security2", Role.SECURITY_APPROVER), "admin": platform_admin}


def _request(world, kind="admin-access", **kwargs) -> AccessRequest:
    values = {"actor": world["member"], "kind": kind, "cluster_id": world["cluster"].pk, "namespace": "ml-research",
              "reason": "check GPU health while jobs run", "ticket_ref": "CHG-1234", "window": 2 * HOUR}
    if kind == "privileged":
        values["service_account"] = "debug"
    return access_request_create(**{**values, **kwargs})


def _verbs(target) -> list[str]:
    return list(AuditEvent.objects.filter(target_type=target._meta.label_lower, target_id=str(target.pk))
                .order_by("id").values_list("verb", flat=True))


def _enforcements(callbacks) -> int:
    """On-commit callbacks that enqueue the enforcement task (others send mail)."""
    return sum(1 for c in callbacks if c.__qualname__.startswith("enqueue_enforcement"))


def _approve_twice(world, request: AccessRequest) -> Grant:
    access_request_review(actor=world["sec1"], request_id=request.pk, approve=True, comment="ok")
    access_request_review(actor=world["sec2"], request_id=request.pk, approve=True, comment="ok")
    return Grant.objects.get(request=request)


def test_two_distinct_approvals_issue_a_pending_grant(world, django_capture_on_commit_callbacks) -> None:
    request = _request(world)
    assert request.state == "submitted"
    assert request.approvals_required == 2
    with django_capture_on_commit_callbacks() as callbacks:
        access_request_review(actor=world["sec1"], request_id=request.pk, approve=True)
    request.refresh_from_db()
    assert request.state == "submitted"
    assert not Grant.objects.exists()
    assert not _enforcements(callbacks)
    with django_capture_on_commit_callbacks() as callbacks:
        access_request_review(actor=world["sec2"], request_id=request.pk, approve=True, comment="fine")
    request.refresh_from_db()
    grant = Grant.objects.get(request=request)
    assert request.state == "approved"
    assert (grant.state, grant.kind, grant.namespace) == ("pending", "admin-access", "ml-research")
    assert grant.ends_at - grant.starts_at == 2 * HOUR
    assert _enforcements(callbacks) == 1  # the enforcement task, after commit
    assert _verbs(request) == ["access_request.created", "access_request.approved", "access_request.approved"]
    assert _verbs(grant) == ["grant.issued"]
    assert Notification.objects.filter(user=world["member"], subject__contains="approved").exists()


def test_privileged_request_scope_and_exception_key(world) -> None:
    grant = _approve_twice(world, _request(world, "privileged", workload="nccl-tests"))
    assert (grant.service_account, grant.workload) == ("debug", "nccl-tests")
    assert grant.exception_key == "ml-research_debug_nccl-tests"


def test_exception_keys_are_unambiguous_config_map_keys() -> None:
    """sa=runner, workload=diag and sa=runner.diag were both "ns.runner.diag": one grant admitted the other's pods."""
    runner_diag = Grant(namespace="ml", service_account="runner", workload="diag")
    dotted = Grant(namespace="ml", service_account="runner.diag")
    assert runner_diag.legacy_exception_key == dotted.legacy_exception_key  # the old encoding collided
    assert runner_diag.exception_key == "ml_runner_diag" != dotted.exception_key == "ml_runner.diag"
    scopes = [("ml", "runner", "diag"), ("ml", "runner.diag", ""), ("ml", "runner", "diag_x"), ("ml", "runner", ""),
              ("ml", "", ""), ("ml-a", "b.c", "d.e_f-g"), ("ml", "runner", "diag.x"), ("ml", "runner.diag", "x")]
    keys = [exception_key(*scope) for scope in scopes]
    assert len(set(keys)) == len(set(scopes)) == len(scopes)
    for (namespace, account, workload), key in zip(scopes, keys, strict=True):
        assert re.fullmatch(r"[-._a-zA-Z0-9]+", key)
        parsed_namespace, parsed_account, *rest = key.split("_", 2)  # namespaces and accounts have no "_"
        assert (parsed_namespace, parsed_account, rest[0] if rest else "") == (namespace, account or "default",
                                                                               workload)


def test_self_approval_is_refused(world) -> None:
    security_member = make_user("sec-member", Role.SECURITY_APPROVER)
    give_namespaces(security_member, world["cluster"], "ml-research", tenant_slug="ml-research")
    request = access_request_create(actor=security_member, kind="admin-access", cluster_id=world["cluster"].pk,
                                    namespace="ml-research", reason="r", ticket_ref="T-1", window=HOUR)
    with pytest.raises(AccessError, match="own request"):
        access_request_review(actor=security_member, request_id=request.pk, approve=True)
    assert not request.reviews.exists()


def test_same_tenant_approval_is_refused(world) -> None:
    colleague = make_user("colleague", Role.SECURITY_APPROVER)
    give_namespaces(colleague, world["cluster"], tenant_slug="ml-research")
    request = _request(world)
    with pytest.raises(AccessError, match="Members of"):
        access_request_review(actor=colleague, request_id=request.pk, approve=True)
    assert not reviewable_by(colleague, request)


def test_only_security_approvers_review(world, approver) -> None:
    request = _request(world)
    for user in (approver, make_user("plain-admin", Role.PLATFORM_ADMIN), world["member"]):
        with pytest.raises(AccessError, match="security approvers"):
            access_request_review(actor=user, request_id=request.pk, approve=True)


def test_double_approval_by_one_person_counts_once(world) -> None:
    request = _request(world)
    access_request_review(actor=world["sec1"], request_id=request.pk, approve=True)
    access_request_review(actor=world["sec1"], request_id=request.pk, approve=True)  # the same click again
    request.refresh_from_db()
    assert request.state == "submitted"
    assert request.reviews.count() == 1
    assert not Grant.objects.exists()
    with pytest.raises(AccessStateError, match="already reviewed"):
        access_request_review(actor=world["sec1"], request_id=request.pk, approve=False, comment="changed my mind")


def test_activation_needs_the_configured_number_of_approvals(world) -> None:
    AccessPolicy.objects.create(kind="privileged", max_window=dt.timedelta(days=1), approvals=3,
                                review_timeout=HOUR)
    request = _request(world, "privileged")
    assert request.approvals_required == 3
    access_request_review(actor=world["sec1"], request_id=request.pk, approve=True)
    access_request_review(actor=world["sec2"], request_id=request.pk, approve=True)
    assert not Grant.objects.exists()
    access_request_review(actor=make_user("security3", Role.SECURITY_APPROVER), request_id=request.pk, approve=True)
    assert Grant.objects.filter(request=request, state="pending").exists()


def test_a_denial_ends_the_request_and_needs_a_reason(world) -> None:
    request = _request(world)
    with pytest.raises(AccessError, match="why"):
        access_request_review(actor=world["sec1"], request_id=request.pk, approve=False, comment=" ")
    access_request_review(actor=world["sec1"], request_id=request.pk, approve=False, comment="use a test node")
    request.refresh_from_db()
    assert request.state == "denied"
    assert not Grant.objects.exists()
    with pytest.raises(AccessStateError, match="denied"):
        access_request_review(actor=world["sec2"], request_id=request.pk, approve=True)


def test_approving_an_expired_request_is_refused(world) -> None:
    request = _request(world)
    AccessRequest.objects.filter(pk=request.pk).update(review_due_at=timezone.now() - dt.timedelta(seconds=1))
    with pytest.raises(AccessStateError, match="expired"):
        access_request_review(actor=world["sec1"], request_id=request.pk, approve=True)
    request.refresh_from_db()
    assert request.state == "expired"
    assert not Grant.objects.exists()
    assert not request.reviews.exists()
    assert _verbs(request)[-1] == "access_request.expired"


def test_unanswered_requests_expire_from_beat(world) -> None:
    request = _request(world)
    later = timezone.now() + dt.timedelta(hours=25)  # the adminAccess default review timeout is 24 h
    assert access_expire_due(now=later) == {"requests": 1, "grants": 0}
    assert access_expire_due(now=later) == {"requests": 0, "grants": 0}  # idempotent
    request.refresh_from_db()
    assert request.state == "expired"


def test_withdraw_only_by_the_requester_and_only_while_submitted(world) -> None:
    request = _request(world)
    with pytest.raises(AccessError, match="requester"):
        access_request_withdraw(actor=world["sec1"], request_id=request.pk)
    access_request_withdraw(actor=world["member"], request_id=request.pk)
    access_request_withdraw(actor=world["member"], request_id=request.pk)  # idempotent
    request.refresh_from_db()
    assert request.state == "withdrawn"
    with pytest.raises(AccessStateError):
        access_request_review(actor=world["sec1"], request_id=request.pk, approve=True)


@pytest.mark.parametrize(("kind", "fields", "message"), [
    ("admin-access", {"window": dt.timedelta(hours=9)}, "at most"),
    ("admin-access", {"window": dt.timedelta(0)}, "positive"),
    ("admin-access", {"service_account": "debug"}, "whole namespace"),
    ("privileged", {"service_account": ""}, "service account"),
    ("privileged", {"service_account": "Debug_SA"}, "not a valid service account"),
    ("privileged", {"workload": "bad label!"}, "label value"),
    ("privileged", {"service_account": "a" * 250}, "may have at most 253 characters"),
    ("admin-access", {"namespace": "vision"}, "Only members"),
    ("admin-access", {"namespace": "kube-system"}, "belongs to no tenant"),
    ("admin-access", {"reason": "  "}, "reason"),
    ("admin-access", {"ticket_ref": ""}, "ticket"),
    ("admin-access", {"starts_at": timezone.now() + dt.timedelta(days=31)}, "30 days"),
    ("root-access", {}, "Unknown kind"),
])
def test_bad_requests_are_refused_and_change_nothing(world, kind, fields, message) -> None:
    with pytest.raises(AccessError, match=message):
        _request(world, kind, **fields)
    assert not AccessRequest.objects.exists()
    assert not AuditEvent.objects.exists()


def test_revoke_ends_a_grant_once(world, django_capture_on_commit_callbacks) -> None:
    grant = _approve_twice(world, _request(world))
    with pytest.raises(AccessError, match="reason"):
        grant_revoke(actor=world["sec1"], grant_id=grant.pk, reason="")
    with pytest.raises(AccessError, match="revoke"):
        grant_revoke(actor=world["member"], grant_id=grant.pk, reason="mine")
    with django_capture_on_commit_callbacks() as callbacks:
        grant_revoke(actor=world["sec1"], grant_id=grant.pk, reason="maintenance finished early")
    grant.refresh_from_db()
    assert (grant.state, grant.ended_by, grant.end_reason) == ("revoked", world["sec1"], "maintenance finished early")
    assert _enforcements(callbacks) == 1  # the cluster side is undone after commit
    with pytest.raises(AccessStateError, match="already revoked"):
        grant_revoke(actor=world["admin"], grant_id=grant.pk, reason="again")
    assert access_expire_due(now=grant.ends_at + HOUR)["grants"] == 0  # expiry leaves a revoked grant alone
    grant.refresh_from_db()
    assert grant.state == "revoked"


def test_grants_expire_at_their_end_and_only_once(world) -> None:
    grant = _approve_twice(world, _request(world))
    assert access_expire_due(now=grant.ends_at - dt.timedelta(seconds=1))["grants"] == 0
    assert access_expire_due(now=grant.ends_at)["grants"] == 1
    assert access_expire_due(now=grant.ends_at + HOUR)["grants"] == 0
    grant.refresh_from_db()
    assert grant.state == "expired"
    assert grant.ended_by is None
    with pytest.raises(AccessStateError, match="already expired"):
        grant_revoke(actor=world["sec1"], grant_id=grant.pk, reason="late")
    assert _verbs(grant) == ["grant.issued", "grant.expired"]


def test_extending_needs_a_new_request_that_starts_when_the_grant_ends(world) -> None:
    grant = _approve_twice(world, _request(world))
    assert not hasattr(grant, "extend")  # a grant's end never moves; there is no operation for it
    extension = _request(world, extends_grant_id=grant.pk)
    assert extension.starts_at == grant.ends_at
    assert extension.state == "submitted"
    grant.refresh_from_db()
    assert grant.ends_at - grant.starts_at == 2 * HOUR  # untouched until the extension is approved…
    second = _approve_twice(world, extension)
    grant.refresh_from_db()
    assert grant.ends_at - grant.starts_at == 2 * HOUR  # …and after: a second grant, from the first one's end
    assert (second.starts_at, second.ends_at) == (grant.ends_at, grant.ends_at + 2 * HOUR)
    with pytest.raises(AccessError, match="same kind and scope"):
        _request(world, "privileged", extends_grant_id=grant.pk)
    grant_revoke(actor=world["sec1"], grant_id=grant.pk, reason="done")
    with pytest.raises(AccessError, match="has ended"):
        _request(world, extends_grant_id=grant.pk)


def test_extension_through_the_api_is_refused(world) -> None:
    from rest_framework.test import APIClient

    grant = _approve_twice(world, _request(world))
    api = APIClient()
    api.force_authenticate(world["sec1"])
    later = (grant.ends_at + 5 * HOUR).isoformat()
    for method in ("patch", "put"):
        response = getattr(api, method)(f"/api/v1/grants/{grant.pk}/", {"ends_at": later}, format="json")
        assert response.status_code == 405
    grant.refresh_from_db()
    assert grant.ends_at - grant.starts_at == 2 * HOUR


def test_break_glass_grants_at_once_and_is_reviewed_afterwards(world, django_capture_on_commit_callbacks) -> None:
    with pytest.raises(AccessError, match="platform admins"):
        break_glass_grant(actor=world["sec1"], kind="admin-access", cluster_id=world["cluster"].pk,
                          namespace="ml-research", reason="outage", ticket_ref="INC-1", window=HOUR)
    with pytest.raises(AccessError, match="reason"):
        break_glass_grant(actor=world["admin"], kind="admin-access", cluster_id=world["cluster"].pk,
                          namespace="ml-research", reason="", ticket_ref="INC-1", window=HOUR)
    with django_capture_on_commit_callbacks() as callbacks:
        grant = break_glass_grant(actor=world["admin"], kind="admin-access", cluster_id=world["cluster"].pk,
                                  namespace="ml-research", reason="GPU outage, need DCGM on all cards",
                                  ticket_ref="INC-77", window=HOUR)
    assert (grant.state, grant.break_glass_review) == ("pending", "pending")
    assert _enforcements(callbacks) == 1
    assert grant.request.break_glass
    assert grant.request.state == "approved"
    with pytest.raises(AccessError, match="own request"):
        access_request_review(actor=world["admin"], request_id=grant.request_id, approve=True)
    access_request_review(actor=world["sec1"], request_id=grant.request_id, approve=True)
    grant.refresh_from_db()
    assert grant.break_glass_review == "pending"
    access_request_review(actor=world["sec2"], request_id=grant.request_id, approve=True)
    grant.refresh_from_db()
    assert grant.break_glass_review == "confirmed"
    assert grant.state == "pending"
    assert grant.request.reviews.filter(after_the_fact=True).count() == 2
    assert _verbs(grant) == ["grant.issued", "grant.break_glass_approved", "grant.break_glass_approved"]
    assert "access.break_glass" in _verbs(grant.request)


def test_a_denied_break_glass_review_revokes_the_grant(world) -> None:
    grant = break_glass_grant(actor=world["admin"], kind="privileged", cluster_id=world["cluster"].pk,
                              namespace="ml-research", service_account="debug", reason="incident",
                              ticket_ref="INC-2", window=HOUR)
    access_request_review(actor=world["sec1"], request_id=grant.request_id, approve=False, comment="not justified")
    grant.refresh_from_db()
    assert (grant.break_glass_review, grant.state) == ("rejected", "revoked")
    assert grant.ended_by == world["sec1"]
    with pytest.raises(AccessStateError, match="rejected"):
        access_request_review(actor=world["sec2"], request_id=grant.request_id, approve=True)


def test_tenants_see_only_their_own_requests_and_grants(world) -> None:
    _approve_twice(world, _request(world))
    outsider = make_user("vision-member")
    give_namespaces(outsider, world["cluster"], tenant_slug="vision")
    assert not AccessRequest.objects.visible_to(outsider).exists()
    assert not Grant.objects.visible_to(outsider).exists()
    assert Grant.objects.visible_to(world["member"]).count() == 1
    assert Grant.objects.visible_to(world["sec1"]).count() == 1


def test_api_flow_request_reviews_revoke_with_errors_and_scoping(world) -> None:
    from rest_framework.test import APIClient

    def api(user) -> APIClient:
        client = APIClient()
        client.force_authenticate(user)
        return client

    payload = {"kind": "privileged", "cluster": "prod", "namespace": "ml-research", "service_account": "debug",
               "reason": "nccl all-reduce debugging", "ticket_ref": "INC-5", "window_seconds": 3600}
    assert api(world["member"]).post("/api/v1/access-requests/", {**payload, "window_seconds": 30 * 86400},
                                     format="json").status_code == 400  # longer than the kind allows
    assert api(world["member"]).post("/api/v1/access-requests/", {**payload, "kind": "root"},
                                     format="json").status_code == 400
    created = api(world["member"]).post("/api/v1/access-requests/", payload, format="json")
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    assert created.json()["state"] == "submitted"
    assert api(world["member"]).post(f"/api/v1/access-requests/{pk}/approve/", {}, format="json").status_code == 400
    unread = Notification.objects.filter(url=f"/access/requests/{pk}/", read_at__isnull=True)
    assert set(unread.values_list("user__username", flat=True)) == {"security", "security2"}
    first = api(world["sec1"]).post(f"/api/v1/access-requests/{pk}/approve/", {"comment": "ok"}, format="json")
    assert first.status_code == 200
    assert set(unread.values_list("user__username", flat=True)) == {"security2"}  # acted on: read
    assert api(world["sec1"]).post(f"/api/v1/access-requests/{pk}/deny/", {"comment": "no"},
                                   format="json").status_code == 409  # already reviewed
    second = api(world["sec2"]).post(f"/api/v1/access-requests/{pk}/approve/", {}, format="json").json()
    assert second["state"] == "approved"
    assert [r["reviewer"] for r in second["reviews"]] == ["security", "security2"]
    grant_id = second["grant"]
    outsider = make_user("vision-lead")
    give_namespaces(outsider, world["cluster"], tenant_slug="vision")
    assert api(outsider).get(f"/api/v1/access-requests/{pk}/").status_code == 404
    assert api(outsider).get(f"/api/v1/grants/{grant_id}/").status_code == 404
    grant = api(world["member"]).get(f"/api/v1/grants/{grant_id}/").json()
    assert (grant["state"], grant["exception_key"]) == ("pending", "ml-research_debug")
    assert api(world["member"]).post(f"/api/v1/grants/{grant_id}/revoke/", {"reason": "x"},
                                     format="json").status_code == 400
    assert api(world["sec1"]).post(f"/api/v1/grants/{grant_id}/revoke/", {}, format="json").status_code == 400
    revoked = api(world["sec1"]).post(f"/api/v1/grants/{grant_id}/revoke/", {"reason": "done"}, format="json")
    assert revoked.json()["state"] == "revoked"
    assert api(world["sec1"]).post(f"/api/v1/grants/{grant_id}/revoke/", {"reason": "again"},
                                   format="json").status_code == 409
    assert api(world["sec1"]).get("/api/v1/grants/", {"state": "revoked"}).json()["count"] == 1
    glass = api(world["admin"]).post("/api/v1/access-requests/break-glass/", {**payload, "reason": "outage"},
                                     format="json")
    assert glass.status_code == 201
    assert glass.json()["break_glass_review"] == "pending"
    assert api(world["member"]).post("/api/v1/access-requests/break-glass/", payload,
                                     format="json").status_code == 400


def test_pages_per_role(world, client) -> None:
    grant = _approve_twice(world, _request(world))
    client.force_login(world["member"])
    page = client.get("/access/")
    assert page.status_code == 200
    assert f'data-grant="{grant.pk}"' in page.content.decode()
    detail = client.get(f"/access/requests/{grant.request_id}/").content.decode()
    assert 'value="revoke"' not in detail
    assert 'value="extend"' in detail
    assert client.get("/access/queue/").status_code == 403
    assert client.get("/access/break-glass/").status_code == 403
    assert client.post(f"/access/requests/{grant.request_id}/", {"action": "extend", "comment": "one more hour"}
                       ).status_code == 302
    assert AccessRequest.objects.filter(extends=grant).count() == 1
    client.force_login(world["sec1"])
    assert client.get("/access/queue/").status_code == 200
    detail = client.get(f"/access/requests/{grant.request_id}/").content.decode()
    assert 'value="revoke"' in detail
    client.post(f"/access/requests/{grant.request_id}/", {"action": "revoke", "comment": "finished"})
    grant.refresh_from_db()
    assert grant.state == "revoked"
    client.force_login(world["admin"])
    assert client.get("/access/break-glass/").status_code == 200
    assert client.get("/access/violations/?all=1").status_code == 200
