"""Quota requests end to end against the simulator over real HTTP: request → approve → server-side apply under the
portal's field manager → the sync confirms → active; oversubscription, expiry, conflicts, 5xx, lost workers."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import AuditEvent
from catalog.services.capacity import capacity_refresh
from inventory.errors import ClusterUnreachableError
from inventory.services.clients import client_for
from portal.models import Notification, QuotaNamespaceState, QuotaRequest
from portal.quota.services import (
    FIELD_MANAGER,
    QUOTA_NAME,
    QuotaRequestError,
    QuotaStateError,
    desired_hard,
    quota_apply,
    quota_apply_failed,
    quota_namespaces_reconcile,
    quota_request_create,
    quota_request_decide,
    quota_request_retry,
    quota_request_withdraw,
    quota_requests_confirm,
)
from portal.tenancy.roles import Role
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.conftest import sync_once as _sync
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow
State = QuotaRequest.State


@pytest.fixture
def world(live_demo, lead, approver):
    sim, cluster = live_demo
    # No quota of anyone else carries the GPU key here, so the portal's own object holds the grant: these tests
    # follow that object's life; test_quota_composition.py composes grants with other quotas.
    sim.store.delete("resourcequotas", "ml-research", "gpu-quota")
    _sync(cluster)
    give_namespaces(lead, cluster, "ml-research", tenant_slug="ml-research", role="lead")
    second = make_user("approver2", Role.APPROVER)
    h100 = OfferingFactory(slug="h100", unit_kind="whole", resource_name="nvidia.com/gpu",
                           node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    capacity_refresh(clusters=[cluster])
    return {"sim": sim, "cluster": cluster, "h100": h100, "approver2": second}


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
    big = _request(world, lead, 80)
    assert big.approvals_required == 2
    quota_request_decide(actor=approver, request_id=big.pk, approve=True)
    big.refresh_from_db()
    assert big.state == State.SUBMITTED
    quota_request_decide(actor=world["approver2"], request_id=big.pk, approve=True)
    big.refresh_from_db()
    assert big.state == State.APPLYING
    assert desired_hard(cluster.pk, "ml-research") == {"requests.nvidia.com/gpu": "84"}
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
    assert _quota(sim)["spec"]["hard"] == {"requests.nvidia.com/gpu": "80"}
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
    with pytest.raises(QuotaRequestError, match="Say why you deny it"):
        quota_request_decide(actor=approver, request_id=request.pk, approve=False, comment="  ")
    request.refresh_from_db()
    assert request.state == State.SUBMITTED
    quota_request_decide(actor=approver, request_id=request.pk, approve=False, comment="no budget")
    quota_request_decide(actor=approver, request_id=request.pk, approve=False)  # idempotent repeat
    request.refresh_from_db()
    assert request.state == State.DENIED
    told = Notification.objects.get(user=lead, subject__contains="denied")
    assert told.subject == f"Quota request #{request.pk} was denied: no budget"
    assert told.body.startswith("Reason: no budget")
    with pytest.raises(QuotaStateError):
        quota_request_withdraw(actor=lead, request_id=request.pk)


def _past(request: QuotaRequest, minutes: int = 1) -> None:
    QuotaRequest.objects.filter(pk=request.pk).update(ends_at=timezone.now() - dt.timedelta(minutes=minutes))


def test_a_failed_request_past_its_end_is_not_reapplied_by_a_later_approval(world, lead, approver) -> None:
    sim, cluster = world["sim"], world["cluster"]
    failed = _request(world, lead, 6)
    quota_request_decide(actor=approver, request_id=failed.pk, approve=True)
    quota_apply_failed(cluster_id=cluster.pk, namespace="ml-research", error="ClusterUnreachableError: 503")
    failed.refresh_from_db()
    assert failed.state == State.FAILED
    _past(failed)  # its period ends while it is failed; the beat has not run yet
    later = _request(world, lead, 2)
    quota_request_decide(actor=approver, request_id=later.pk, approve=True)
    assert desired_hard(cluster.pk, "ml-research") == {"requests.nvidia.com/gpu": "2"}
    assert quota_apply(cluster_id=cluster.pk, namespace="ml-research") == "applied"
    assert _quota(sim)["spec"]["hard"] == {"requests.nvidia.com/gpu": "2"}
    assert quota_requests_confirm()["expired"] == 1
    failed.refresh_from_db()
    assert failed.state == State.EXPIRED


def test_every_request_past_its_end_expires_and_an_ended_period_cannot_be_approved(world, lead, approver) -> None:
    cluster = world["cluster"]
    submitted = _request(world, lead, 1)
    draft = _request(world, lead, 1, submit=False)
    applying = _request(world, lead, 1)
    quota_request_decide(actor=approver, request_id=applying.pk, approve=True)
    denied = _request(world, lead, 1)
    quota_request_decide(actor=approver, request_id=denied.pk, approve=False, comment="no")
    for request in (submitted, draft, applying, denied):
        _past(request)
    with pytest.raises(QuotaStateError, match="ended"):
        quota_request_decide(actor=approver, request_id=submitted.pk, approve=True)
    assert quota_requests_confirm()["expired"] == 3
    states = dict(QuotaRequest.objects.values_list("pk", "state"))
    assert [states[r.pk] for r in (submitted, draft, applying, denied)] == [State.EXPIRED] * 3 + [State.DENIED]
    assert desired_hard(cluster.pk, "ml-research") == {}
    expired = AuditEvent.objects.filter(verb="quota_request.expired", target_id=str(applying.pk)).get()
    assert expired.data == {"was_granted": True}


def test_a_failed_lowering_stays_visible_and_is_retried_until_the_cluster_matches(world, lead, approver) -> None:
    sim, cluster = world["sim"], world["cluster"]
    request = _request(world, lead, 8)
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)
    quota_apply(cluster_id=cluster.pk, namespace="ml-research")
    _sync(cluster)
    quota_requests_confirm()
    state = QuotaNamespaceState.objects.get(cluster=cluster, namespace="ml-research")
    assert (state.status, state.desired, state.observed) == ("in_sync", {"requests.nvidia.com/gpu": "8"},
                                                             {"requests.nvidia.com/gpu": "8"})

    _past(request)
    assert quota_requests_confirm()["expired"] == 1
    # The lowering fails (retries exhausted): the cluster still grants 8, and the page says so.
    quota_apply_failed(cluster_id=cluster.pk, namespace="ml-research", error="ClusterUnreachableError: 503")
    _sync(cluster)
    quota_requests_confirm()
    state.refresh_from_db()
    assert state.status == "failed"
    assert "503" in state.last_error
    assert (state.desired, state.observed) == ({}, {"requests.nvidia.com/gpu": "8"})
    assert _quota(sim)["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    # Visible to the lead (page and API) and in the approvers' queue; not to another tenant.
    page = Client()
    page.force_login(lead)
    body = page.get(reverse("portal:quota")).content.decode()
    assert 'data-namespace="ml-research" data-status="failed"' in body
    assert "503" in body
    page.force_login(approver)
    assert 'data-status="failed"' in page.get(reverse("portal:quota_queue")).content.decode()
    api = APIClient()
    api.force_authenticate(lead)
    assert [(r["namespace"], r["status"]) for r in api.get("/api/v1/quota-states/").json()["results"]] == [
        ("ml-research", "failed")]
    outsider = make_user("outsider", Role.TENANT_LEAD)
    give_namespaces(outsider, cluster, "vision-team", tenant_slug="vision", role="lead")
    api.force_authenticate(outsider)
    assert api.get("/api/v1/quota-states/").json()["results"] == []

    # Within the backoff nothing is re-enqueued; after it, the reconcile re-applies the lower quota.
    assert quota_namespaces_reconcile() == set()
    QuotaNamespaceState.objects.filter(pk=state.pk).update(attempted_at=timezone.now() - dt.timedelta(minutes=5))
    assert quota_namespaces_reconcile() == {(cluster.pk, "ml-research")}
    assert quota_apply(cluster_id=cluster.pk, namespace="ml-research") == "applied"
    assert _quota(sim)["spec"]["hard"] == {}
    _sync(cluster)
    quota_requests_confirm()
    state.refresh_from_db()
    assert (state.status, state.last_error, state.failures) == ("in_sync", "", 0)
    statuses = list(AuditEvent.objects.filter(verb__startswith="quota_namespace.").values_list("verb", flat=True))
    assert "quota_namespace.failed" in statuses
    assert statuses[-1] == "quota_namespace.in_sync"


def test_a_deleted_quota_object_is_drift_and_is_reapplied(world, lead, approver) -> None:
    sim, cluster = world["sim"], world["cluster"]
    request = _request(world, lead, 4)
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)
    quota_apply(cluster_id=cluster.pk, namespace="ml-research")
    _sync(cluster)
    quota_requests_confirm()
    sim.store.delete("resourcequotas", "ml-research", QUOTA_NAME)
    _sync(cluster)
    QuotaNamespaceState.objects.update(attempted_at=timezone.now() - dt.timedelta(minutes=5))
    assert quota_requests_confirm()["drift_reapplied"] == 1
    state = QuotaNamespaceState.objects.get(cluster=cluster, namespace="ml-research")
    assert (state.status, state.observed) == ("drift", {})
    quota_apply(cluster_id=cluster.pk, namespace="ml-research")
    assert _quota(sim)["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}


def test_the_approval_threshold_applies_to_the_namespaces_recent_increase(world, lead, approver) -> None:
    # Default policy: 1 approval, 2 above 16 units. Splitting 160 units into ten requests of 16 must not dodge it.
    first = _request(world, lead, 16)
    split = [_request(world, lead, 16) for _ in range(9)]
    assert first.approvals_required == 1
    assert {r.approvals_required for r in split} == {2}
    created = AuditEvent.objects.filter(verb="quota_request.created", target_id=str(split[-1].pk)).get()
    assert created.data["window_increase"] == 160
    # Denied and withdrawn requests, and requests older than the window, do not count.
    for request in [first, *split]:
        quota_request_decide(actor=approver, request_id=request.pk, approve=False, comment="no")
    assert _request(world, lead, 16).approvals_required == 1
    QuotaRequest.objects.update(created_at=timezone.now() - dt.timedelta(days=31))
    QuotaRequest.objects.filter(state=State.SUBMITTED).update(state=State.ACTIVE)
    assert _request(world, lead, 16).approvals_required == 1
