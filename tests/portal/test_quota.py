"""Quota requests end to end against the simulator over real HTTP: request → approve → server-side apply under the
portal's field manager → the sync confirms → active; oversubscription, expiry, conflicts, 5xx, lost workers."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import AuditEvent
from inventory.errors import ClusterUnreachableError
from inventory.leases import lease_backend
from inventory.services.clients import client_for
from inventory.services.sync import cluster_sync_once
from portal.models import QuotaRequest
from portal.quota import (
    FIELD_MANAGER,
    QUOTA_NAME,
    QuotaRequestError,
    QuotaStateError,
    desired_hard,
    quota_apply,
    quota_apply_failed,
    quota_request_create,
    quota_request_decide,
    quota_request_retry,
    quota_request_withdraw,
    quota_requests_confirm,
)
from portal.roles import Role
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow
State = QuotaRequest.State


@pytest.fixture
def world(live_demo, lead, approver):
    sim, cluster = live_demo
    give_namespaces(lead, cluster, "ml-research", tenant_slug="ml-research", role="lead")
    second = make_user("approver2", Role.APPROVER)
    h100 = OfferingFactory(slug="h100", unit_kind="whole", resource_name="nvidia.com/gpu",
                           node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    return {"sim": sim, "cluster": cluster, "h100": h100, "approver2": second}


def _sync(cluster) -> None:
    client = client_for(cluster)
    backend = lease_backend()
    try:
        cluster_sync_once(cluster_id=cluster.pk, client=client, lease_for=lambda s: backend.acquire(s, 30))
    finally:
        client.close()


def _quota(sim) -> dict:
    stored = sim.store.get_stored("resourcequotas", "ml-research", QUOTA_NAME)
    return stored.obj if stored else {}


def _request(world, lead, units: int, **kwargs) -> QuotaRequest:
    return quota_request_create(actor=lead, cluster_id=world["cluster"].pk, namespace="ml-research",
                                offering_id=world["h100"].pk, units=units, justification="fine-tuning", **kwargs)


def test_request_approve_apply_confirm_then_oversubscribe_and_expire(world, lead, approver) -> None:
    sim, cluster = world["sim"], world["cluster"]
    first = _request(world, lead, 8)
    assert (first.state, first.approvals_required) == (State.SUBMITTED, 1)
    quota_request_decide(actor=approver, request_id=first.pk, approve=True, comment="ok")
    first.refresh_from_db()
    assert first.state == State.APPLYING

    assert quota_apply(cluster_id=cluster.pk, namespace="ml-research") == "applied"  # what the worker runs
    applied = _quota(sim)
    assert applied["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    assert [m["manager"] for m in applied["metadata"]["managedFields"]] == [FIELD_MANAGER]
    first.refresh_from_db()
    assert first.state == State.APPLYING  # not active until the sync shows it
    assert quota_requests_confirm()["activated"] == 0
    _sync(cluster)
    assert quota_requests_confirm()["activated"] == 1
    first.refresh_from_db()
    assert first.state == State.ACTIVE

    # The lead gives half back: applied like any change, active again once the sync shows it.
    api_lead = APIClient()
    api_lead.force_authenticate(lead)
    reduced = api_lead.post(f"/api/v1/quota-requests/{first.pk}/reduce/", {"units": 4, "reason": "done early"},
                            format="json")
    assert reduced.status_code == 200, reduced.content
    assert reduced.json()["state"] == "applying"
    quota_apply(cluster_id=cluster.pk, namespace="ml-research")
    assert _quota(sim)["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}
    _sync(cluster)
    quota_requests_confirm()
    first.refresh_from_db()
    assert (first.state, first.units) == (State.ACTIVE, 4)
    assert api_lead.post(f"/api/v1/quota-requests/{first.pk}/reduce/", {"units": 9}, format="json"
                         ).status_code == 400

    # A big request needs two approvers (above 16 units) and pushes granted quota past capacity.
    big = _request(world, lead, 40)
    assert big.approvals_required == 2
    quota_request_decide(actor=approver, request_id=big.pk, approve=True)
    big.refresh_from_db()
    assert big.state == State.SUBMITTED
    quota_request_decide(actor=world["approver2"], request_id=big.pk, approve=True)
    big.refresh_from_db()
    assert big.state == State.APPLYING
    assert desired_hard(cluster.pk, "ml-research") == {"requests.nvidia.com/gpu": "44"}
    api = APIClient()
    api.force_authenticate(approver)
    context = api.get(f"/api/v1/quota-requests/{big.pk}/").json()["context"]
    assert context["granted_after"] > context["physical_capacity"]  # oversubscription, shown to the approver

    # Expiry lowers the quota in the cluster.
    quota_apply(cluster_id=cluster.pk, namespace="ml-research")
    _sync(cluster)
    quota_requests_confirm()
    QuotaRequest.objects.filter(pk=first.pk).update(ends_at=timezone.now() - dt.timedelta(minutes=1))
    assert quota_requests_confirm()["expired"] == 1
    quota_apply(cluster_id=cluster.pk, namespace="ml-research")
    assert _quota(sim)["spec"]["hard"] == {"requests.nvidia.com/gpu": "40"}
    verbs = set(AuditEvent.objects.filter(target_type="portal.quotarequest").values_list("verb", flat=True))
    assert {"quota_request.created", "quota_request.approved", "quota_request.apply_applied",
            "quota_request.active", "quota_request.expired", "quota_request.reduced"} <= verbs


def test_conflicting_field_manager_is_shown_and_retryable(world, lead, approver) -> None:
    sim, cluster = world["sim"], world["cluster"]
    # Someone else already manages requests.nvidia.com/gpu in our quota object.
    client = client_for(cluster)
    other = client.apply({"apiVersion": "v1", "kind": "ResourceQuota",
                                         "metadata": {"name": QUOTA_NAME, "namespace": "ml-research"},
                                         "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}, field_manager="kubectl")
    client.close()
    assert other.applied
    request = _request(world, lead, 4)
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)
    assert quota_apply(cluster_id=cluster.pk, namespace="ml-research") == "conflict"
    request.refresh_from_db()
    assert request.state == State.FAILED
    assert "Field manager conflict" in request.apply_error
    assert "kubectl" in request.apply_error
    assert _quota(sim)["spec"]["hard"] == {"requests.nvidia.com/gpu": "2"}  # nothing of ours was forced
    quota_request_retry(actor=approver, request_id=request.pk)
    request.refresh_from_db()
    assert request.state == State.APPLYING


def test_5xx_is_retryable_and_exhaustion_is_visible(world, lead, approver) -> None:
    sim, cluster = world["sim"], world["cluster"]
    request = _request(world, lead, 2)
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)
    sim.faults.fail_next_requests(1, status=503)
    with pytest.raises(ClusterUnreachableError):
        quota_apply(cluster_id=cluster.pk, namespace="ml-research")
    request.refresh_from_db()
    assert request.state == State.APPLYING  # Celery retries (allow-listed); nothing lost
    quota_apply_failed(cluster_id=cluster.pk, namespace="ml-research", error="ClusterUnreachableError: 503")
    request.refresh_from_db()
    assert request.state == State.FAILED
    assert "503" in request.apply_error


def test_lost_apply_is_reenqueued_and_applying_twice_is_harmless(world, lead, approver) -> None:
    sim, cluster = world["sim"], world["cluster"]
    request = _request(world, lead, 3)
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)
    # The worker died before applying: the confirm beat re-enqueues (no attempt recorded yet).
    assert quota_requests_confirm()["reenqueued"] == 1
    for _ in range(2):
        assert quota_apply(cluster_id=cluster.pk, namespace="ml-research") == "applied"
    assert _quota(sim)["spec"]["hard"] == {"requests.nvidia.com/gpu": "3"}
    request.refresh_from_db()
    assert request.apply_attempts == 2


def test_who_may_request_and_decide(world, lead, approver, member) -> None:
    cluster = world["cluster"]
    give_namespaces(member, cluster, "ml-research", tenant_slug="ml-research")
    with pytest.raises(QuotaRequestError, match="Only a lead"):
        quota_request_create(actor=member, cluster_id=cluster.pk, namespace="ml-research",
                             offering_id=world["h100"].pk, units=1, justification="x")
    with pytest.raises(QuotaRequestError, match="belongs to no tenant"):
        quota_request_create(actor=lead, cluster_id=cluster.pk, namespace="vision-team",
                             offering_id=world["h100"].pk, units=1, justification="x")
    retired = OfferingFactory(slug="old", resource_name="nvidia.com/gpu", lifecycle="retired")
    with pytest.raises(QuotaRequestError, match="retired"):
        quota_request_create(actor=lead, cluster_id=cluster.pk, namespace="ml-research", offering_id=retired.pk,
                             units=1, justification="x")
    request = _request(world, lead, 1)
    lead.groups.add(*approver.groups.all())  # even as an approver, a requester never decides their own request
    with pytest.raises(QuotaRequestError, match="own request"):
        quota_request_decide(actor=lead, request_id=request.pk, approve=True)
    with pytest.raises(QuotaRequestError, match="Only approvers"):
        quota_request_decide(actor=member, request_id=request.pk, approve=True)
    quota_request_decide(actor=approver, request_id=request.pk, approve=False, comment="no budget")
    quota_request_decide(actor=approver, request_id=request.pk, approve=False)  # idempotent repeat
    request.refresh_from_db()
    assert request.state == State.DENIED
    with pytest.raises(QuotaStateError):
        quota_request_withdraw(actor=lead, request_id=request.pk)
