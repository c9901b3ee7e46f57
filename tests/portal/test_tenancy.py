"""Tenancy: services (audited, idempotent, explicit beats label), scoping in querysets, pages and API matrix."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from audit.models import AuditEvent
from inventory.models import Namespace
from portal.models import Tenant, TenantMembership, TenantNamespace
from portal.tenancy.selectors import user_namespaces
from portal.tenancy.services import (
    TenancyError,
    label_rule_set,
    membership_set,
    namespace_assign,
    tenant_create,
    tenant_namespaces_sync,
)
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory
from tests.portal.factories import TenantFactory, give_namespaces

pytestmark = pytest.mark.django_db
LABEL = "portal.example.com/tenant"


def _namespace(cluster, name: str, **labels: str) -> Namespace:
    return Namespace.objects.create(cluster=cluster, uid=f"{cluster.pk}-{name}", name=name, resource_version="1",
                                    labels={k.replace("__", "/"): v for k, v in labels.items()}, raw={})


def test_label_rule_maps_namespaces_and_explicit_assignment_wins(platform_admin) -> None:
    cluster = ClusterFactory(name="lab")
    research = tenant_create(actor=platform_admin, slug="ml-research", name="ML Research")
    tenant_create(actor=platform_admin, slug="vision", name="Vision")
    _namespace(cluster, "train", **{"portal.example.com__tenant": "ml-research"})
    _namespace(cluster, "cams", **{"portal.example.com__tenant": "vision"})
    _namespace(cluster, "stray", **{"portal.example.com__tenant": "no-such-team"})
    label_rule_set(actor=platform_admin, label_key=LABEL)
    assert tenant_namespaces_sync() == {"assigned": 2, "moved": 0, "removed": 0}
    assert tenant_namespaces_sync() == {"assigned": 0, "moved": 0, "removed": 0}  # idempotent
    owners = dict(TenantNamespace.objects.values_list("namespace", "tenant__slug"))
    assert owners == {"train": "ml-research", "cams": "vision"}
    # An explicit assignment moves "cams" to research; the label no longer decides it.
    namespace_assign(actor=platform_admin, tenant_id=research.pk, cluster_id=cluster.pk, namespace="cams")
    tenant_namespaces_sync()
    row = TenantNamespace.objects.get(namespace="cams")
    assert (row.tenant_id, row.source) == (research.pk, "explicit")
    # Relabelling moves a label-sourced namespace; removing the label removes it.
    Namespace.objects.filter(name="train").update(labels={LABEL: "vision"})
    assert tenant_namespaces_sync()["moved"] == 1
    Namespace.objects.filter(name="train").update(labels={})
    assert tenant_namespaces_sync()["removed"] == 1
    verbs = list(AuditEvent.objects.order_by("id").values_list("verb", flat=True))
    assert verbs.count("tenant.namespace_assigned") == 4
    assert "tenant.namespace_unassigned" in verbs
    assert verbs[:3] == ["tenant.created", "tenant.created", "tenant.label_rule_set"]


def test_memberships_are_audited_and_validated(platform_admin) -> None:
    tenant = tenant_create(actor=platform_admin, slug="team", name="Team")
    alice = User.objects.create_user("alice")
    membership_set(actor=platform_admin, tenant_id=tenant.pk, username="alice", role="member")
    membership_set(actor=platform_admin, tenant_id=tenant.pk, username="alice", role="member")  # no-op
    membership_set(actor=platform_admin, tenant_id=tenant.pk, username="alice", role="lead")
    assert TenantMembership.objects.get(user=alice).role == "lead"
    membership_set(actor=platform_admin, tenant_id=tenant.pk, username="alice", role=None)
    assert not TenantMembership.objects.exists()
    assert AuditEvent.objects.filter(verb__startswith="tenant.member").count() == 3
    for bad in ({"username": "nobody", "role": "member"}, {"username": "alice", "role": "owner"}):
        with pytest.raises(TenancyError):
            membership_set(actor=platform_admin, tenant_id=tenant.pk, **bad)
    with pytest.raises(TenancyError):
        tenant_create(actor=platform_admin, slug="Bad Slug", name="x")
    with pytest.raises(TenancyError):
        label_rule_set(actor=platform_admin, label_key="not a key!")


def test_querysets_scope_to_the_users_tenants(member, approver) -> None:
    cluster = ClusterFactory(name="lab")
    give_namespaces(member, cluster, "train", tenant_slug="mine")
    give_namespaces(User.objects.create_user("bob"), cluster, "other", tenant_slug="theirs")
    assert list(Tenant.objects.visible_to(member).values_list("slug", flat=True)) == ["mine"]
    assert user_namespaces(member, cluster) == ["train"]
    assert set(Tenant.objects.visible_to(approver).values_list("slug", flat=True)) == {"mine", "theirs"}
    assert user_namespaces(make_user("nobody"), cluster) == []


@pytest.fixture
def tenants(member, lead):
    cluster = ClusterFactory(name="lab")
    give_namespaces(member, cluster, "train", tenant_slug="mine")
    give_namespaces(lead, cluster, "train", tenant_slug="mine", role="lead")
    give_namespaces(User.objects.create_user("bob"), cluster, "other", tenant_slug="theirs")
    return cluster


PAGES = ["/tenants/", "/tenants/mine/", "/tenants/theirs/"]


@pytest.mark.parametrize(("who", "expected"), [
    ("anonymous", [302, 302, 302]),
    ("member", [200, 200, 404]),
    ("lead", [200, 200, 404]),
    ("other", [200, 404, 200]),
    ("approver", [200, 200, 200]),
    ("platform_admin", [200, 200, 200]),
    ("finance", [200, 200, 200]),
])
def test_page_permission_matrix(client, request, tenants, who, expected) -> None:
    if who == "other":
        client.force_login(User.objects.get(username="bob"))
    elif who != "anonymous":
        client.force_login(request.getfixturevalue(who))
    assert [client.get(path).status_code for path in PAGES] == expected


@pytest.mark.parametrize(("who", "read", "detail_other", "write"), [
    ("anonymous", 401, 401, 401),  # API tokens authenticate first: a Bearer challenge (docs/tokens.md)
    ("member", 200, 404, 403),
    ("lead", 200, 404, 403),
    ("approver", 200, 200, 403),
    ("finance", 200, 200, 403),
    ("platform_admin", 200, 200, 201),
])
def test_api_permission_matrix(request, tenants, who, read, detail_other, write) -> None:
    api = APIClient()
    if who != "anonymous":
        api.force_authenticate(request.getfixturevalue(who))
    assert api.get("/api/v1/tenants/").status_code == read
    assert api.get("/api/v1/tenants/theirs/").status_code == detail_other
    created = api.post("/api/v1/tenants/", {"slug": "new-team", "name": "New"}, format="json")
    assert created.status_code == write
    assert Tenant.objects.filter(slug="new-team").exists() == (write == 201)


def test_api_lists_only_own_tenants_and_admin_assigns(member, platform_admin, tenants) -> None:
    api = APIClient()
    api.force_authenticate(member)
    assert [t["slug"] for t in api.get("/api/v1/tenants/").json()["results"]] == ["mine"]
    admin = APIClient()
    admin.force_authenticate(platform_admin)
    body = admin.post("/api/v1/tenants/mine/namespaces/", {"cluster": "lab", "namespace": "serve"},
                      format="json").json()
    assert {"cluster": "lab", "namespace": "serve", "source": "explicit"} in body["namespaces"]
    body = admin.post("/api/v1/tenants/mine/members/", {"username": "bob", "role": "member"}, format="json").json()
    assert {"username": "bob", "role": "member"} in body["members"]
    bad = admin.post("/api/v1/tenants/mine/members/", {"username": "ghost", "role": "member"}, format="json")
    assert bad.status_code == 400
    assert TenantFactory._meta.model.objects.count() == 2
