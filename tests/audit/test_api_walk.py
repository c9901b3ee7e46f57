"""Every state-changing API route writes an audit row.

The routes are the POST/PUT/PATCH/DELETE operations of the OpenAPI schema (generated from the URL conf, as the fuzz
test reads it). Each has a recipe here: the rows it needs, made beforehand, and a valid request by a user allowed to
make it. The test sends it and asks PostgreSQL whether the request wrote anything: `pg_stat_xact_user_tables`
counts the rows inserted, updated and deleted so far in the test's transaction (every request runs inside it). A
request that wrote rows outside the audit tables must have written an audit event too, by its user; one that wrote
nothing (the validation and feasibility routes) needs none. A new write route without a recipe fails the test.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from audit.models import AuditCheckpoint, AuditEvent
from catalog.models import Offering
from integrations.services import webhook_subscription_create
from portal.access.services import access_request_create, break_glass_grant
from portal.models import QuotaRequest
from portal.quota.services import quota_request_create
from portal.tenancy.roles import Role
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.django_db

WRITE_METHODS = {"post", "put", "patch", "delete"}
AUDIT_TABLES = (AuditEvent._meta.db_table, AuditCheckpoint._meta.db_table)
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "ml-research"},
       "spec": {"containers": [{"name": "main", "image": "python:3.11",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
POD_YAML = ("apiVersion: v1\nkind: Pod\nmetadata: {name: train, namespace: ml-research}\nspec:\n  containers:\n"
            "  - name: main\n    image: python:3.11\n    resources: {limits: {nvidia.com/gpu: '1'}}\n")


def _write_operations() -> list[tuple[str, str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted((op["operationId"], method, path) for path, ops in schema["paths"].items()
                  for method, op in ops.items() if method in WRITE_METHODS)


OPERATIONS = _write_operations()


@dataclass
class Call:
    actor: User
    path: str
    body: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def world(db: None, platform_admin: User) -> dict[str, Any]:
    cluster = ClusterFactory(name="prod")
    lead = make_user("lead", Role.TENANT_LEAD, Role.TENANT_MEMBER)
    member = make_user("member", Role.TENANT_MEMBER)
    give_namespaces(lead, cluster, "ml-research", tenant_slug="ml-research", role="lead")
    give_namespaces(member, cluster, "ml-research", tenant_slug="ml-research")
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    return {"cluster": cluster, "admin": platform_admin, "lead": lead, "member": member, "offering": offering,
            "approver": make_user("approver", Role.APPROVER),
            "security": make_user("security", Role.SECURITY_APPROVER)}


def _quota_request(w: dict[str, Any], state: str | None = None) -> QuotaRequest:
    request = quota_request_create(actor=w["lead"], cluster_id=w["cluster"].pk, namespace="ml-research",
                                   offering_id=w["offering"].pk, units=4, justification="training")
    if state is not None:  # a state the API cannot reach without the cluster (active, failed apply)
        QuotaRequest.objects.filter(pk=request.pk).update(state=state)
    return request


def _access_request(w: dict[str, Any]) -> int:
    return access_request_create(actor=w["member"], kind="admin-access", cluster_id=w["cluster"].pk,
                                 namespace="ml-research", reason="check GPU health", ticket_ref="CHG-1",
                                 window=dt.timedelta(hours=2)).pk


def _webhook(w: dict[str, Any]) -> int:
    return webhook_subscription_create(actor=w["admin"], name="cmdb", url="https://cmdb.example.com/hook",
                                       secret="s" * 32, event_types=["node."]).pk


ACCESS = {"kind": "admin-access", "cluster": "prod", "namespace": "ml-research", "reason": "check GPU health",
          "ticket_ref": "CHG-1", "window_seconds": 3600}

RECIPES: dict[str, Callable[[dict[str, Any]], Call]] = {
    "v1_tenants_create": lambda w: Call(w["admin"], "/api/v1/tenants/",
                                        {"slug": "new-team", "name": "New team", "cost_center": "CC-9"}),
    "v1_tenants_members_create": lambda w: Call(w["admin"], "/api/v1/tenants/ml-research/members/",
                                                {"username": w["approver"].username, "role": "member"}),
    "v1_tenants_namespaces_create": lambda w: Call(w["admin"], "/api/v1/tenants/ml-research/namespaces/",
                                                   {"cluster": "prod", "namespace": "ml-extra"}),
    "v1_tenants_quota_target_create": lambda w: Call(w["admin"], "/api/v1/tenants/ml-research/quota-target/",
                                                     {"quota_target": "clusterqueue"}),
    "v1_quota_requests_create": lambda w: Call(w["lead"], "/api/v1/quota-requests/",
                                               {"cluster": "prod", "namespace": "ml-research", "offering": "h100",
                                                "units": 2, "justification": "fine-tuning"}),
    "v1_quota_requests_approve_create": lambda w: Call(
        w["approver"], f"/api/v1/quota-requests/{_quota_request(w).pk}/approve/", {"comment": "ok"}),
    "v1_quota_requests_deny_create": lambda w: Call(
        w["approver"], f"/api/v1/quota-requests/{_quota_request(w).pk}/deny/", {"comment": "no capacity"}),
    "v1_quota_requests_submit_create": lambda w: Call(
        w["lead"], f"/api/v1/quota-requests/{_quota_request(w, QuotaRequest.State.DRAFT).pk}/submit/"),
    "v1_quota_requests_withdraw_create": lambda w: Call(
        w["lead"], f"/api/v1/quota-requests/{_quota_request(w).pk}/withdraw/"),
    "v1_quota_requests_reduce_create": lambda w: Call(
        w["lead"], f"/api/v1/quota-requests/{_quota_request(w, QuotaRequest.State.ACTIVE).pk}/reduce/",
        {"units": 1, "reason": "done early"}),
    "v1_quota_requests_retry_create": lambda w: Call(
        w["approver"], f"/api/v1/quota-requests/{_quota_request(w, QuotaRequest.State.FAILED).pk}/retry/"),
    "v1_access_requests_create": lambda w: Call(w["member"], "/api/v1/access-requests/", ACCESS),
    "v1_access_requests_approve_create": lambda w: Call(
        w["security"], f"/api/v1/access-requests/{_access_request(w)}/approve/", {"comment": "ok"}),
    "v1_access_requests_deny_create": lambda w: Call(
        w["security"], f"/api/v1/access-requests/{_access_request(w)}/deny/", {"comment": "not now"}),
    "v1_access_requests_withdraw_create": lambda w: Call(
        w["member"], f"/api/v1/access-requests/{_access_request(w)}/withdraw/"),
    "v1_access_requests_break_glass_create": lambda w: Call(
        w["admin"], "/api/v1/access-requests/break-glass/", {**ACCESS, "reason": "outage", "ticket_ref": "INC-1"}),
    "v1_grants_revoke_create": lambda w: Call(w["security"], "/api/v1/grants/{}/revoke/".format(
        break_glass_grant(actor=w["admin"], kind="admin-access", cluster_id=w["cluster"].pk, namespace="ml-research",
                          reason="incident", ticket_ref="INC-1", window=dt.timedelta(hours=1)).pk),
        {"reason": "done"}),
    "v1_catalog_offerings_create": lambda w: Call(
        w["admin"], "/api/v1/catalog/offerings/",
        {"slug": "a100", "name": "A100", "unit_kind": "whole", "resource_name": "nvidia.com/gpu"}),
    "v1_catalog_offerings_partial_update": lambda w: Call(
        w["admin"], f"/api/v1/catalog/offerings/{w['offering'].pk}/", {"description": "Hopper, 80 GB"}),
    "v1_catalog_offerings_lifecycle_create": lambda w: Call(
        w["admin"], f"/api/v1/catalog/offerings/{w['offering'].pk}/lifecycle/",
        {"lifecycle": "deprecated", "replacement": OfferingFactory(slug="h200", resource_name="nvidia.com/gpu").pk}),
    "v1_catalog_offerings_prices_create": lambda w: Call(
        w["admin"], f"/api/v1/catalog/offerings/{w['offering'].pk}/prices/", {"unit_price": "2.5", "currency": "EUR"}),
    "v1_catalog_selector_check_create": lambda w: Call(
        w["admin"], "/api/v1/catalog/selector-check/", {"unit_kind": "whole", "resource_name": "nvidia.com/gpu"}),
    "v1_feasibility_create": lambda w: Call(w["lead"], "/api/v1/feasibility/", {"cluster": "prod", "pod": POD}),
    "v1_feasibility_gang_create": lambda w: Call(w["lead"], "/api/v1/feasibility/gang/",
                                                 {"cluster": "prod", "pod": POD, "replicas": 2}),
    "v1_manifests_generate_create": lambda w: Call(
        w["lead"], "/api/v1/manifests/generate/",
        {"offering": "h100", "namespace": "ml-research", "name": "train", "shape": "pod", "image": "python:3.11"}),
    "v1_manifests_validate_create": lambda w: Call(w["lead"], "/api/v1/manifests/validate/", {"manifest": POD_YAML}),
    "v1_webhooks_create": lambda w: Call(
        w["admin"], "/api/v1/webhooks/",
        {"name": "siem", "url": "https://siem.example.com/hook", "secret": "t" * 32, "event_types": ["grant."]}),
    "v1_webhooks_partial_update": lambda w: Call(w["admin"], f"/api/v1/webhooks/{_webhook(w)}/", {"active": False}),
    "v1_webhooks_destroy": lambda w: Call(w["admin"], f"/api/v1/webhooks/{_webhook(w)}/"),
    "v1_webhooks_ping_create": lambda w: Call(w["admin"], f"/api/v1/webhooks/{_webhook(w)}/ping/"),
}


def _rows_written() -> int:
    """Rows inserted, updated or deleted so far in this transaction, outside the audit tables."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_xact_user_tables "
                       "WHERE relname <> ALL(%s)", [list(AUDIT_TABLES)])
        return int(cursor.fetchone()[0])


def _head() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


def test_every_write_route_has_a_recipe() -> None:
    operations = {operation_id for operation_id, _, _ in OPERATIONS}
    assert operations - set(RECIPES) == set(), "write routes without a recipe in the walk"
    assert set(RECIPES) - operations == set(), "recipes for routes that no longer exist"


@pytest.mark.parametrize(("operation_id", "method", "template"), OPERATIONS, ids=[op for op, _, _ in OPERATIONS])
def test_every_state_changing_route_writes_an_audit_row(world: dict[str, Any], operation_id: str, method: str,
                                                        template: str) -> None:
    call = RECIPES[operation_id](world)
    head, written = _head(), _rows_written()
    api = APIClient()
    api.force_authenticate(call.actor)
    response = getattr(api, method)(call.path, call.body, format="json")
    assert 200 <= response.status_code < 300, f"{operation_id}: {response.status_code} {response.content[:2000]!r}"
    events = list(AuditEvent.objects.filter(id__gt=head))
    if _rows_written() > written:
        assert events, f"{operation_id} ({method.upper()} {template}) changed state but wrote no audit event"
        assert {e.actor_id for e in events} == {call.actor.pk}, f"{operation_id}: audit event not by the caller"
    else:
        assert not events, f"{operation_id} wrote nothing but recorded {[e.verb for e in events]}"


def test_the_detector_sees_writes_and_their_absence(world: dict[str, Any]) -> None:
    """The walk's premise: the counter moves with a write and stays put without one."""
    written = _rows_written()
    Offering.objects.filter(slug="nothing-here").update(description="x")
    assert _rows_written() == written
    Offering.objects.filter(slug="h100").update(description="x")
    assert _rows_written() == written + 1
