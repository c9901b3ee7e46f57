"""Quota requests on Kueue ClusterQueues, against the simulator over real HTTP (its minimal Kueue re-runs admission on
every write to a Kueue object): a tenant whose quota lives in Kueue asks through the API, an approver sees the
queue's nominal quota, borrowing and lending limits, and once applied and confirmed by the sync the Workload that
waited for the quota is admitted. The ClusterQueue's resourceGroups (an atomic list) are applied whole against the
live object: another manager's list is taken over only under the tenant's ownership policy, a concurrent edit is
never overwritten, and an ended grant gives the nominal quota back."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import urllib3
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from inventory.models import Workload
from inventory.selectors import queued_workloads
from inventory.services.clients import client_for
from portal.models import ClusterQueueQuotaState, QuotaOwnership, QuotaRequest, QuotaTarget, Tenant
from portal.quota.kueue import FIELD_MANAGER, queue_apply
from portal.quota.selectors import request_contexts
from portal.quota.services import (
    QuotaRequestError,
    desired_hard,
    quota_request_create,
    quota_request_decide,
    quota_requests_confirm,
)
from tests.catalog.factories import OfferingFactory
from tests.conftest import live_cluster, sync_once
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow
CQ = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/team-a"
PENDING = "job-pretrain-d4e5f"  # team-a's Workload waiting for 8 GPUs (12 of 16 in use)
CELL = "h100/nvidia.com/gpu"


@pytest.fixture
def kueue(transactional_db: None, lead: Any, approver: Any) -> Iterator[tuple[Any, Any, Any]]:
    """The `kueue` scenario served and synced; the lead leads team-a, whose quota lives in Kueue."""
    with live_cluster("kueue", name="kq") as (sim, cluster):
        tenant = give_namespaces(lead, cluster, "team-a", tenant_slug="team-a", role="lead")
        tenant.quota_target = QuotaTarget.CLUSTER_QUEUE
        tenant.save()
        h100 = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu",
                               node_selector={"kubesim.io/node-pool": "h100"})
        yield sim, cluster, h100


def _http(sim: Any, method: str, path: str, body: dict[str, Any] | None = None,
          content_type: str = "application/merge-patch+json", **query: str) -> dict[str, Any]:
    suffix = "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
    response = urllib3.request(method, sim.url + path + suffix, body=orjson.dumps(body) if body else None,
                               headers={"Content-Type": content_type})
    assert response.status in (200, 201), response.data
    return orjson.loads(response.data)


def _nominal(sim: Any) -> dict[str, str]:
    queue = _http(sim, "GET", CQ)
    return {f"{f['name']}/{r['name']}": r["nominalQuota"] for g in queue["spec"]["resourceGroups"]
            for f in g["flavors"] for r in f["resources"]}


def _admitted(sim: Any, name: str = PENDING) -> bool:
    workload = _http(sim, "GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/{name}")
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in workload["status"].get("conditions", []))


def _api(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _request(lead: Any, h100: Any, cluster: Any, units: int, **extra: Any) -> QuotaRequest:
    return quota_request_create(actor=lead, cluster_id=cluster.pk, namespace="team-a", offering_id=h100.pk,
                                units=units, justification="pretraining", **extra)


def test_an_approved_nominal_quota_increase_admits_the_waiting_workload(kueue, lead, approver) -> None:
    sim, cluster, _ = kueue
    waiting = queued_workloads(lead)
    assert [w.workload.name for w in waiting] == [PENDING]
    assert "ClusterQueue team-a lacks 4 nvidia.com/gpu in flavor h100" in waiting[0].reasons[0]

    # The lead asks through the API; the request is resolved to the one ClusterQueue cell that can take it.
    created = _api(lead).post("/api/v1/quota-requests/", {
        "cluster": "kq", "namespace": "team-a", "offering": "h100", "units": 4, "justification": "pretraining"},
        content_type="application/json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["target"], body["cluster_queue"], body["flavor"], body["resource"]) == (
        "clusterqueue", "team-a", "h100", "nvidia.com/gpu")
    # The approver's context: the queue's quota, limits and use, and the nominal quota after the grant.
    context = _api(approver).get(f"/api/v1/quota-requests/{body['id']}/").json()["context"]["cluster_queue"]
    assert context == {"cluster_queue": "team-a", "flavor": "h100", "resource": "nvidia.com/gpu",
                       "cohort": "research", "nominal": "16", "borrowing_limit": "0", "lending_limit": None,
                       "used": "12", "local_queues": ["team-a/team-a-queue"], "nominal_after": "20"}
    page = _api(approver).get(reverse("portal:quota_request_detail", kwargs={"pk": body["id"]})).content.decode()
    assert 'data-testid="nominal">16 (20)' in page
    assert 'data-testid="borrowing-limit">0<' in page
    assert 'data-testid="lending-limit">all of it<' in page

    approved = _api(approver).post(f"/api/v1/quota-requests/{body['id']}/approve/", {},
                                   content_type="application/json")
    assert approved.json()["state"] == "applying"
    assert desired_hard(cluster.pk, "team-a") == {}  # never a ResourceQuota as well

    before = _nominal(sim)
    assert queue_apply(cluster_id=cluster.pk, cluster_queue="team-a") == "applied"
    assert _nominal(sim) == {**before, CELL: "20"}  # only the granted cell changed (cpu, memory kept)
    owners = [e["manager"] for e in _http(sim, "GET", CQ)["metadata"]["managedFields"]
              if "resourceGroups" in str(e.get("fieldsV1"))]
    assert FIELD_MANAGER in owners
    assert _admitted(sim)  # Kueue admits the Workload that waited for the quota

    sync_once(cluster)
    assert quota_requests_confirm()["activated"] == 1
    request = QuotaRequest.objects.get(pk=body["id"])
    assert request.state == QuotaRequest.State.ACTIVE
    state = ClusterQueueQuotaState.objects.get(cluster=cluster, cluster_queue="team-a")
    assert (state.status, state.desired, state.observed, state.baselines) == (
        "in_sync", {CELL: "4"}, {CELL: "4"}, {CELL: "16"})
    assert Workload.objects.get(cluster=cluster, name=PENDING).state == Workload.State.ADMITTED
    assert queued_workloads(lead) == []
    event = AuditEvent.objects.get(verb="cluster_queue_quota.applied")
    assert (event.before["nominal"], event.after["nominal"], event.after["forced"]) == ({CELL: "16"}, {CELL: "20"},
                                                                                       False)

    # The lead's quota page shows the queue with the new nominal quota and the portal's grant in sync.
    quota_page = _api(lead).get(reverse("portal:quota")).content.decode()
    assert 'data-queue="team-a" data-flavor="h100"' in quota_page
    assert 'data-queue="team-a" data-status="in_sync"' in quota_page
    assert "{#" not in quota_page  # no template comment leaks into the page (Django's {# #} is one line only)
    assert f"&quot;{cluster.pk}/team-a|h100&quot;: 4" in quota_page  # the form's live total counts the queue grant

    # Applying again writes nothing (the live object already carries the plan; the baseline is kept).
    version = _http(sim, "GET", CQ)["metadata"]["resourceVersion"]
    assert queue_apply(cluster_id=cluster.pk, cluster_queue="team-a") == "applied"
    assert _http(sim, "GET", CQ)["metadata"]["resourceVersion"] == version


def test_an_ended_grant_gives_the_nominal_quota_back(kueue, lead, approver) -> None:
    sim, cluster, h100 = kueue
    request = _request(lead, h100, cluster, 6, ends_at=timezone.now() + dt.timedelta(hours=1))
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)
    assert queue_apply(cluster_id=cluster.pk, cluster_queue="team-a") == "applied"
    assert _nominal(sim)[CELL] == "22"
    counts = quota_requests_confirm(now=timezone.now() + dt.timedelta(hours=2))
    assert counts["expired"] == 1
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.EXPIRED
    assert queue_apply(cluster_id=cluster.pk, cluster_queue="team-a") == "applied"
    assert _nominal(sim)[CELL] == "16"  # the baseline, not 16 + anything


def test_another_managers_resource_groups_are_taken_over_only_under_the_tenants_policy(kueue, lead,
                                                                                      approver) -> None:
    sim, cluster, h100 = kueue
    spec = _http(sim, "GET", CQ)["spec"]
    _http(sim, "PATCH", CQ, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                             "metadata": {"name": "team-a"}, "spec": {"resourceGroups": spec["resourceGroups"]}},
          "application/apply-patch+yaml", fieldManager="batch-admin", force="true")
    request = _request(lead, h100, cluster, 4)
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)

    assert queue_apply(cluster_id=cluster.pk, cluster_queue="team-a") == "conflict"
    request.refresh_from_db()
    assert request.state == QuotaRequest.State.FAILED
    assert 'conflict with "batch-admin"' in request.apply_error
    assert "Fix: have that manager set h100/nvidia.com/gpu nominalQuota=20" in request.apply_error
    assert _nominal(sim)[CELL] == "16"
    assert not _admitted(sim)

    QuotaOwnership.objects.create(tenant=Tenant.objects.get(slug="team-a"), portal_owns_accelerator_keys=True)
    assert queue_apply(cluster_id=cluster.pk, cluster_queue="team-a") == "applied"
    assert _nominal(sim)[CELL] == "20"
    assert _admitted(sim)
    assert AuditEvent.objects.get(verb="cluster_queue_quota.applied").after["forced"] is True


class EditedBetweenReadAndApply:
    """The real client; someone changes the queue just after the portal read it (once, with `patch`)."""

    def __init__(self, cluster: Any, sim: Any, patch: dict[str, Any]) -> None:
        self.client, self.sim, self.patch, self.answers = client_for(cluster), sim, patch, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def apply(self, document: dict[str, Any], **kwargs: Any) -> Any:
        if not self.answers:
            _http(self.sim, "PATCH", CQ, self.patch)
        result = self.client.apply(document, **kwargs)
        self.answers.append(result.message)
        return result


def test_a_concurrent_edit_of_the_queue_is_never_overwritten(kueue, lead, approver) -> None:
    sim, cluster, h100 = kueue
    request = _request(lead, h100, cluster, 4)
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)

    # Someone labels the queue between the portal's read and its apply: the apply made against the old object is
    # refused by its resourceVersion, and the portal reads the queue again and applies against the new one.
    editing = EditedBetweenReadAndApply(cluster, sim, {"metadata": {"labels": {"team": "a"}}})
    assert queue_apply(cluster_id=cluster.pk, cluster_queue="team-a", client_factory=lambda c: editing) == "applied"
    assert len(editing.answers) == 2
    assert "the object has been modified" in editing.answers[0]
    queue = _http(sim, "GET", CQ)
    assert queue["metadata"]["labels"] == {"team": "a"}
    assert _nominal(sim)[CELL] == "20"

    # Someone changes the resourceGroups themselves: they now own the list, so the portal's next change is a
    # conflict (their edit stands) until the tenant's policy lets the portal take it over, on top of their edit.
    groups = queue["spec"]["resourceGroups"]
    groups[0]["flavors"][0]["resources"][0]["nominalQuota"] = "300"
    request = _request(lead, h100, cluster, 2)
    quota_request_decide(actor=approver, request_id=request.pk, approve=True)
    editing = EditedBetweenReadAndApply(cluster, sim, {"spec": {"resourceGroups": groups}})
    assert queue_apply(cluster_id=cluster.pk, cluster_queue="team-a", client_factory=lambda c: editing) == "conflict"
    assert _nominal(sim) == {"h100/cpu": "300", "h100/memory": "2Ti", CELL: "20"}
    QuotaOwnership.objects.create(tenant=Tenant.objects.get(slug="team-a"), portal_owns_accelerator_keys=True)
    assert queue_apply(cluster_id=cluster.pk, cluster_queue="team-a") == "applied"
    assert _nominal(sim) == {"h100/cpu": "300", "h100/memory": "2Ti", CELL: "22"}  # their edit and ours


def test_requests_that_cannot_name_one_queue_cell_are_refused_and_change_nothing(kueue, lead, approver) -> None:
    sim, cluster, h100 = kueue
    # Named cells must exist: the API says which ones do.
    response = _api(lead).post("/api/v1/quota-requests/", {
        "cluster": "kq", "namespace": "team-a", "offering": "h100", "units": 4, "justification": "x",
        "cluster_queue": "team-b", "flavor": "l40s"}, content_type="application/json")
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "team-b / l40s is not a ClusterQueue and flavor of team-a for" in detail
    assert "choose one of: team-a / h100." in detail
    # A ClusterQueue also fed from another tenant's namespace is not this tenant's to raise.
    _http(sim, "POST", "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-b/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "borrowed", "namespace": "team-b"}, "spec": {"clusterQueue": "team-a"}},
          "application/json")
    give_namespaces(approver, cluster, "team-b", tenant_slug="team-b")
    sync_once(cluster)
    with pytest.raises(QuotaRequestError, match="ClusterQueue team-a also admits work from namespace team-b"):
        _request(lead, h100, cluster, 4)
    # A tenant on ResourceQuotas cannot name a ClusterQueue.
    Tenant.objects.filter(slug="team-a").update(quota_target=QuotaTarget.RESOURCE_QUOTA)
    with pytest.raises(QuotaRequestError, match="granted in ResourceQuotas"):
        _request(lead, h100, cluster, 4, cluster_queue="team-a", flavor="h100")
    assert not QuotaRequest.objects.exists()
    assert _nominal(sim)[CELL] == "16"


def test_a_namespace_without_a_local_queue_gets_the_reason(kueue, lead) -> None:
    _, cluster, h100 = kueue
    give_namespaces(lead, cluster, "default", tenant_slug="team-a", role="lead")
    with pytest.raises(QuotaRequestError, match="Namespace default has no LocalQueue"):
        quota_request_create(actor=lead, cluster_id=cluster.pk, namespace="default", offering_id=h100.pk, units=2,
                             justification="x")


def test_the_platform_admin_sets_where_a_tenants_quota_goes(kueue, platform_admin, lead) -> None:
    api = _api(platform_admin)
    answer = api.post("/api/v1/tenants/team-a/quota-target/", {"quota_target": "resourcequota"},
                      content_type="application/json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["quota_target"] == "resourcequota"
    event = AuditEvent.objects.get(verb="tenant.quota_target_set")
    assert (event.before, event.after) == ({"quota_target": "clusterqueue"}, {"quota_target": "resourcequota"})
    assert api.post("/api/v1/tenants/team-a/quota-target/", {"quota_target": "kueue"},
                    content_type="application/json").status_code == 400
    assert _api(lead).post("/api/v1/tenants/team-a/quota-target/", {"quota_target": "clusterqueue"},
                           content_type="application/json").status_code == 403
    assert Tenant.objects.get(slug="team-a").quota_target == "resourcequota"


def test_the_approvers_context_of_many_queue_requests_costs_no_query_per_request(kueue, lead) -> None:
    _, cluster, h100 = kueue
    first = _request(lead, h100, cluster, 1)
    with CaptureQueriesContext(connection) as one:
        request_contexts([first])
    more = [first, _request(lead, h100, cluster, 2), _request(lead, h100, cluster, 3)]
    with CaptureQueriesContext(connection) as three:
        contexts = request_contexts(more)
    assert len(three) == len(one)
    assert [contexts[r.pk]["cluster_queue"]["nominal_after"] for r in more] == ["17", "18", "19"]
