"""The permission matrix, generated from the URL conf: every route (pages and API) by every role — anonymous, a member
and a lead of tenant A, approver, security approver, platform admin, finance — and an API token holding each scope,
with the status each must get. A route nobody wrote an expectation for fails the test, so a new route cannot ship
without a decision. And for every page and read of the API, tenant A's member never sees a name of tenant B: its
namespace, pods, claims, requests (the B_SECRETS strings below) appear nowhere in the body.

How to read EXPECTED: each route name maps to a rule, a dict role → status with "*" for "every signed-in role not
listed". Token columns (`token:<scope>`) apply to API routes only; a token's user is a platform admin, so a token
row shows what the scope alone allows.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from apitokens.scopes import SCOPES
from audit.models import AuditEvent
from catalog.models import OfferingPrice
from inventory.models import ResourceClaim
from portal.access.services import access_request_create, break_glass_grant
from portal.models import Grant, QuotaNamespaceState, Tenant, Violation
from portal.quota.services import quota_request_create
from portal.tenancy.roles import Role
from tests.apitokens.conftest import make_token
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.inventory.factories import (
    ClusterFactory,
    DeviceClassFactory,
    DraDeviceFactory,
    FindingFactory,
    NodeFactory,
    PodFactory,
    ResourceSliceFactory,
)
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.django_db

B_NAMESPACE = "zz-secret-ns"
B_SECRETS = (B_NAMESPACE, "zz-secret-pod", "zz-secret-claim", "zz-secret-justification", "zz-secret-reason",
             "zz-secret-tenant")
ROLES = ("anonymous", "member", "lead", "approver", "security", "admin", "finance")
TOKEN_ROLES = tuple(f"token:{scope}" for scope in SCOPES)


@dataclass
class Route:
    name: str
    pattern: str
    api: bool


def routes() -> list[Route]:
    """Every named route of the URL conf, once (format-suffix twins and the Django admin left out: the admin is
    for platform admins only and is walked by tests/audit/test_admin_walk.py)."""
    found: dict[str, Route] = {}

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = namespace
                if pattern.namespace:
                    inner = f"{namespace}:{pattern.namespace}" if namespace else pattern.namespace
                walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
            elif isinstance(pattern, URLPattern) and pattern.name:
                route = re.sub(r"(?<!\[)\^|\$", "", prefix + str(pattern.pattern))
                if route.startswith("admin/") or "format" in route:
                    continue
                name = f"{namespace}:{pattern.name}" if namespace else pattern.name
                found.setdefault(name, Route(name, route, route.startswith("api/")))

    walk(get_resolver().url_patterns, "", "")
    return sorted(found.values(), key=lambda r: r.name)


def _fill(pattern: str, values: dict[str, Any]) -> str:
    """The route's URL with its parameters filled from `values` (by parameter name)."""
    def value(match: re.Match[str]) -> str:
        return str(values[match.group("name")])

    url = re.sub(r"\(\?P<(?P<name>\w+)>[^)]*\)", value, pattern)
    url = re.sub(r"<(?:\w+:)?(?P<name>\w+)>", value, url)
    return "/" + url


@pytest.fixture
def world() -> dict[str, Any]:
    """Tenant A (member, lead) owns ml-research; tenant B owns zz-secret-ns with pods, a claim holding a device, a
    quota request, an access request, a grant and a violation — everything a leak would show."""
    admin = make_user("admin", Role.PLATFORM_ADMIN, superuser=True)
    users = {
        "member": make_user("member", Role.TENANT_MEMBER),
        "lead": make_user("lead", Role.TENANT_LEAD, Role.TENANT_MEMBER),
        "approver": make_user("approver", Role.APPROVER),
        "security": make_user("security", Role.SECURITY_APPROVER),
        "admin": admin,
        "finance": make_user("finance", Role.FINANCE),
    }
    bob = make_user("bob", Role.TENANT_LEAD, Role.TENANT_MEMBER)
    cluster = ClusterFactory(name="lab")
    give_namespaces(users["member"], cluster, "ml-research", tenant_slug="team-a")
    give_namespaces(users["lead"], cluster, "ml-research", tenant_slug="team-a", role="lead")
    tenant_b = give_namespaces(bob, cluster, B_NAMESPACE, tenant_slug="zz-secret-tenant", role="lead")
    node = NodeFactory(cluster=cluster, name="gpu-node-1")
    pod = PodFactory(cluster=cluster, namespace=B_NAMESPACE, name="zz-secret-pod", node_name=node.name,
                     phase="Pending", scheduled=False, accelerator=True, stage="pending-unscheduled")
    claim = ResourceClaim.objects.create(cluster=cluster, uid="claim-b", name="zz-secret-claim", namespace=B_NAMESPACE,
                                         resource_version="1", raw={})
    device = DraDeviceFactory(cluster=cluster, node_name=node.name, claim_uid="claim-b", claim_namespace=B_NAMESPACE,
                              claim_name="zz-secret-claim", in_use=1, free=0,
                              reserved_for=[{"resource": "pods", "name": "zz-secret-pod", "uid": "p"}])
    finding = FindingFactory(cluster=cluster, node_name=node.name)
    resource_slice = ResourceSliceFactory(cluster=cluster, node_name=node.name)
    device_class = DeviceClassFactory(cluster=cluster)
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    price = OfferingPrice.objects.create(offering=offering, unit_price=2, currency="EUR",
                                         effective_from=timezone.now() - dt.timedelta(days=1))
    quota = quota_request_create(actor=bob, cluster_id=cluster.pk, namespace=B_NAMESPACE, offering_id=offering.pk,
                                 units=2, justification="zz-secret-justification")
    QuotaNamespaceState.objects.create(cluster=cluster, namespace=B_NAMESPACE)
    access = access_request_create(actor=bob, kind="privileged", cluster_id=cluster.pk, namespace=B_NAMESPACE,
                                   reason="zz-secret-reason", ticket_ref="CHG-9", window=dt.timedelta(hours=1),
                                   service_account="debug")
    grant: Grant = break_glass_grant(actor=admin, kind="admin-access", cluster_id=cluster.pk, namespace=B_NAMESPACE,
                                     reason="zz-secret-reason", ticket_ref="INC-9", window=dt.timedelta(hours=1))
    violation = Violation.objects.create(cluster=cluster, kind=Violation.Kind.LABEL_DRIFT, namespace=B_NAMESPACE,
                                         subject=f"namespace/{B_NAMESPACE}", message=f"{B_NAMESPACE} drifted",
                                         evidence={}, last_seen_at=timezone.now())
    token = make_token(bob, "inventory:read", name="bobs")
    webhook = _webhook(admin)
    values = {
        "pk": 0, "slug": offering.slug, "name": cluster.name,
    }
    objects = {
        "inventory:device_detail": device.pk, "inventory:cluster_detail": cluster.pk,
        "inventory:cluster_sync_state": cluster.pk, "inventory:node_detail": node.pk,
        "inventory:node_devices": node.pk, "portal:device_utilization": device.pk,
        "portal-api:utilization-device": device.pk, "catalog:pod_explain": pod.pk, "catalog:price_delete": price.pk,
        "catalog:proposal_decide": offering.pk, "portal:tenant_detail": tenant_b.slug,
        "portal:quota_request_detail": quota.pk, "portal:access_request_detail": access.pk,
        "portal:access_policy_manifest": cluster.name,
        "audit:event_detail": AuditEvent.objects.order_by("id").values_list("pk", flat=True).first(),
        "apitokens:token_revoke": token.token.pk,
        "portal-api:tenant-detail": tenant_b.slug, "portal-api:tenant-members": tenant_b.slug,
        "portal-api:tenant-namespaces": tenant_b.slug, "portal-api:tenant-quota-target": tenant_b.slug,
        "portal-api:quota-request": quota.pk, "portal-api:quota-state": QuotaNamespaceState.objects.get().pk,
        "portal-api:access-request": access.pk, "portal-api:grant": grant.pk, "portal-api:violation": violation.pk,
        "catalog-api:offering": offering.pk, "inventory-api:cluster": cluster.pk, "inventory-api:node": node.pk,
        "inventory-api:device": device.pk, "inventory-api:pod": pod.pk, "inventory-api:resource-claim": claim.pk,
        "inventory-api:finding": finding.pk, "inventory-api:resource-slice": resource_slice.pk,
        "inventory-api:device-class": device_class.pk, "audit-api:audit-event": AuditEvent.objects.order_by("id").first().pk,
        "integrations-api:webhook": webhook,
    }
    del tenant_b
    return {"users": users, "values": values, "objects": objects, "cluster": cluster, "tenant_b": Tenant}


def _webhook(admin: Any) -> int:
    from integrations.models import WebhookSubscription

    return WebhookSubscription.objects.create(name="cmdb", url="https://cmdb.example.com/hook", secret="s" * 32,
                                              event_types=["node."], created_by=admin).pk


def _url(route: Route, world: dict[str, Any]) -> str:
    values = dict(world["values"])
    objects = world["objects"]
    key = route.name
    while key not in objects and "-" in key.partition(":")[2]:
        key = key.rsplit("-", 1)[0]
    if key in objects:
        for name in ("pk", "slug"):
            values[name] = objects[key]
    return _fill(route.pattern, values)


def _client(role: str, world: dict[str, Any]) -> Client:
    if role == "anonymous":
        return Client()
    if role.startswith("token:"):
        created = make_token(world["users"]["admin"], role.removeprefix("token:"), name=role,
                             rate_limit_per_minute=10**6)
        return Client(headers={"Authorization": f"Bearer {created.plaintext}"})
    client = Client()
    client.force_login(world["users"][role])
    return client


def actual(world: dict[str, Any], roles: tuple[str, ...]) -> dict[str, dict[str, tuple[int, str]]]:
    found: dict[str, dict[str, tuple[int, str]]] = {}
    for role in roles:
        client = _client(role, world)
        for route in routes():
            if role.startswith("token:") and not route.api:
                continue
            response = client.get(_url(route, world))
            body = response.content.decode(errors="replace") if not getattr(response, "streaming", False) else \
                b"".join(response.streaming_content).decode(errors="replace")
            found.setdefault(route.name, {})[role] = (response.status_code, body)
    return found


# ------------------------------------------------------------------------------------------------ the expectations

READ = "inventory:read"


def page(**cells: int) -> dict[str, int]:
    """A page: anonymous users are sent to the login page; every signed-in role gets 200 unless listed."""
    return {"anonymous": 302, "*": 200, **cells}


def staff_page(allowed: tuple[str, ...], status: int = 200) -> dict[str, int]:
    """A page for some roles only: the others get 403."""
    return page(**{"*": 403, **dict.fromkeys(allowed, status)})


def api(scope: str = READ, **cells: int) -> dict[str, int]:
    """An API route: anonymous 401; signed-in roles 200 unless listed; a token with the route's scope gets what its
    platform-admin user gets, any other token 403."""
    return {"anonymous": 401, "*": 200, "token:*": 403, f"token:{scope}": cells.get("admin", 200), **cells}


TENANT_B_OBJECT = {"member": 404, "lead": 404}  # another tenant's object: as if it did not exist
ADMIN = ("admin",)
APPROVERS = ("approver", "admin")
AUDITORS = ("admin", "finance")
POST_ONLY = 405

EXPECTED: dict[str, dict[str, int]] = {
    # Signing in and out, the schema and its docs (public, the schema holds no data).
    "login": {"anonymous": 200, "*": 200},
    "logout": {"anonymous": POST_ONLY, "*": POST_ONLY},
    "home": page(**{"*": 302}),
    "api-schema": {"anonymous": 200, "*": 200, "token:*": 200},
    "api-docs": {"anonymous": 200, "*": 200, "token:*": 200},
    # /metrics is closed until the operator sets PORTAL_METRICS_TOKEN (docs/observability.md).
    "metrics": {"anonymous": 403, "*": 403},
    # Inventory pages: every signed-in role; other tenants' pods and holders are counted, not named (checked below).
    **{f"inventory:{name}": page() for name in ("overview", "capacity", "device_detail", "pending_pods", "findings",
                                                 "cluster_list", "cluster_detail", "node_list", "node_detail",
                                                 "node_devices")},
    "inventory:cluster_sync_state": page(**{"*": 286}),  # htmx: nothing is listing, stop polling
    # Catalog and manifests: everyone browses and generates; curators (platform admins) edit.
    **{f"catalog:{name}": page() for name in ("offering_list", "offering_detail", "offering_gang", "generate",
                                              "validate")},
    "catalog:offering_compare": page(**{"*": 400}),  # nothing to compare without ?offerings=
    "catalog:pod_explain": page(**TENANT_B_OBJECT),
    **{f"catalog:{name}": staff_page(ADMIN) for name in ("offering_create", "offering_edit", "proposals",
                                                          "selector_check")},
    **{f"catalog:{name}": staff_page(ADMIN, POST_ONLY) for name in ("discovery_run", "offering_lifecycle",
                                                                     "offering_price", "price_delete",
                                                                     "proposal_decide")},
    # Tenancy, quota, exceptions, chargeback pages.
    **{f"portal:{name}": page() for name in ("tenant_list", "quota", "inbox", "inbox_unread", "violations",
                                              "chargeback")},
    "portal:tenant_detail": page(**TENANT_B_OBJECT),
    "portal:quota_request_detail": page(**TENANT_B_OBJECT),
    "portal:quota_queue": staff_page(APPROVERS),
    "portal:access": page(),
    "portal:access_request_detail": page(**TENANT_B_OBJECT),
    "portal:access_queue": staff_page(("security", "admin")),
    "portal:access_break_glass": staff_page(ADMIN),
    "portal:access_policy_manifest": staff_page(ADMIN),
    "portal:oversubscription": staff_page(APPROVERS),
    # Utilisation pages: everyone, scoped to their tenants' namespaces (a device's or offering's rows included).
    "portal:utilization": page(),
    "portal:device_utilization": page(),
    "portal:offering_utilization": page(),
    # Audit pages: auditors (platform admins and finance) only.
    "audit:event_list": staff_page(AUDITORS),
    "audit:event_detail": staff_page(AUDITORS),
    "audit:verify": staff_page(AUDITORS, POST_ONLY),
    "apitokens:token_list": page(),
    "apitokens:token_revoke": page(**{"*": POST_ONLY}),
    # The inventory API: every signed-in role reads; tokens need inventory:read.
    **{f"inventory-api:{name}": api() for name in (
        "api-root", "change-list", "cmdb-clusters", "cmdb-nodes", "cmdb-cards", "cmdb-slices", "cluster-list",
        "cluster-detail", "node-list", "node-detail", "device-list", "device-detail", "pod-list",
        "resource-slice-list", "resource-slice-detail", "device-class-list", "device-class-detail",
        "resource-claim-list", "finding-list", "finding-detail")},
    "inventory-api:api-root": {**api(), "token:*": 200},  # the list of endpoints, to any token
    "inventory-api:pod-detail": api(**TENANT_B_OBJECT),
    "inventory-api:resource-claim-detail": api(**TENANT_B_OBJECT),
    # Catalog and manifests API.
    **{f"catalog-api:{name}": api() for name in ("offering-list", "offering-detail", "offering-capacity-history")},
    "catalog-api:compatibility": api(**{"*": 400, "admin": 400}),  # ?requirement= is required
    **{f"catalog-api:{name}": api(**{"*": POST_ONLY, "admin": POST_ONLY}) for name in (
        "offering-lifecycle", "offering-prices", "selector-check")},
    **{f"manifests-api:{name}": api(**{"*": POST_ONLY, "admin": POST_ONLY}) for name in (
        "validate", "generate", "feasibility", "feasibility-gang")},
    # Tenancy, quota and exceptions API: lists are scoped, other tenants' objects are 404.
    **{f"portal-api:{name}": api() for name in ("tenant-list", "quota-request-list", "quota-list",
                                                 "quota-state-list", "access-request-list", "grant-list",
                                                 "violation-list")},
    **{f"portal-api:{name}": api(**TENANT_B_OBJECT) for name in (
        "tenant-detail", "quota-request-detail", "quota-state-detail", "access-request-detail", "grant-detail",
        "violation-detail")},
    **{f"portal-api:{name}": api(**{"*": POST_ONLY, "admin": POST_ONLY}) for name in (
        "tenant-members", "tenant-namespaces", "tenant-quota-target", "quota-request-approve", "quota-request-deny", "quota-request-reduce",
        "quota-request-retry", "quota-request-submit", "quota-request-withdraw", "access-request-approve", "access-request-deny",
        "access-request-withdraw", "access-request-break-glass", "grant-revoke")},
    # Chargeback: everyone (their own tenants'), tokens need chargeback:read; ?window= is required.
    "portal-api:chargeback": api("chargeback:read", **{"*": 400, "admin": 400}),
    "portal-api:chargeback-focus": api("chargeback:read", **{"*": 400, "admin": 400}),
    # Utilisation: everyone (their own tenants' rows), tokens need inventory:read; ?window= is required for the
    # report, a device's history defaults to the last day.
    "portal-api:utilization": api(**{"*": 400, "admin": 400}),
    "portal-api:utilization-device": api(),
    # Audit API: auditors; tokens need audit:read.
    **{f"audit-api:{name}": api("audit:read", **{"*": 403}) | {"admin": 200, "finance": 200}
       for name in ("audit-event-list", "audit-event-detail", "audit-event-export")},
    # Webhooks: platform admins (reads with inventory:read, writes with admin:write).
    **{f"integrations-api:{name}": api(**{"*": 403}) | {"admin": 200} for name in (
        "webhook-list", "webhook-detail", "webhook-deliveries")},
    "integrations-api:webhook-ping": api(**{"*": 403, "admin": POST_ONLY}),
}


def expected(route: str, role: str) -> int | None:
    rule = EXPECTED[route]
    if role in rule:
        return rule[role]
    if role.startswith("token:"):
        return rule.get("token:*")
    return rule.get("*")


def test_every_route_has_an_expectation() -> None:
    names = {route.name for route in routes()}
    assert len(names) > 90, "the URL walk found too few routes"
    assert sorted(names - set(EXPECTED)) == [], "routes nobody decided about: add them to EXPECTED"
    assert sorted(set(EXPECTED) - names) == [], "expectations for routes that no longer exist"


@pytest.mark.parametrize("role", ROLES + TOKEN_ROLES)
def test_every_route_answers_each_role_as_expected(world: dict[str, Any], role: str) -> None:
    table = actual(world, (role,))
    wrong = {name: (cells[role][0], expected(name, role)) for name, cells in table.items()
             if role in cells and cells[role][0] != expected(name, role)}
    assert wrong == {}, f"{role}: route → (got, expected)"


@pytest.mark.parametrize("role", ["member", "lead"])
def test_tenant_a_never_sees_a_name_of_tenant_b(world: dict[str, Any], role: str) -> None:
    table = actual(world, (role,))
    leaks = {name: [s for s in B_SECRETS if s in body] for name, cells in table.items()
             for status, body in [cells[role]] if status == 200 and any(s in body for s in B_SECRETS)}
    assert leaks == {}


def test_the_matrix_can_fail(world: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A guardrail must be able to fail: open another tenant's quota request to everyone and the matrix notices,
    and a leaked name is found."""
    from portal.models import QuotaRequest

    monkeypatch.setattr(type(QuotaRequest.objects.get_queryset()), "visible_to", lambda self, user: self)
    table = actual(world, ("member",))
    assert table["portal-api:quota-request-detail"]["member"][0] == 200 != expected(
        "portal-api:quota-request-detail", "member")
    assert "zz-secret-justification" in table["portal-api:quota-request-detail"]["member"][1]

