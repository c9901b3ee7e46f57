"""Kueue's queue positions: read from its visibility API (visibility.kueue.x-k8s.io) only where discovery shows it,
stored on the mirrored Workloads, shown on the pending page as Kueue's while fresh and as the portal's labelled
estimate otherwise; a malformed answer changes nothing, an unreachable API keeps the last positions. Real kubesim over
HTTP, real PostgreSQL."""

from __future__ import annotations

import io
import logging
from datetime import timedelta

import orjson
import pytest
import urllib3
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from inventory.k8s.discovery import ApiDiscovery
from inventory.k8s.visibility import PendingWorkload, VisibilityAnswerError, pending_workloads_parse
from inventory.models import SyncState, Workload
from inventory.selectors import queued_workloads
from inventory.services.clients import client_for
from inventory.services.queue_positions import POSITIONS_KIND
from inventory.tasks import queue_positions_due_task, queue_positions_sync_task
from tests.conftest import live_cluster

pytestmark = pytest.mark.slow  # a live kubesim cluster synced for every test (about 3.5 s each)

VISIBILITY = "visibility.kueue.x-k8s.io"
KUEUE = "kueue.x-k8s.io"


def _sync(cluster) -> None:
    call_command("sync", "--cluster", cluster.name, "--once", stdout=io.StringIO())


def _post(sim, path: str, obj: dict) -> None:
    response = urllib3.request("POST", sim.url + path, body=orjson.dumps(obj), headers={"Content-Type": "application/json"})
    assert response.status == 201, response.data


def _workload(namespace: str, name: str, queue: str, priority: int) -> dict:
    container = {"name": "c", "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}}}
    return {"apiVersion": f"{KUEUE}/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": namespace},
            "spec": {"queueName": queue, "priority": priority,
                     "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [container]}}}]}}


@pytest.fixture
def kueue(request, transactional_db, member_owns):
    """The `kueue` scenario (team-a's ClusterQueue holds one pending Workload) plus another tenant's urgent Workload
    queued in the same ClusterQueue through its own LocalQueue, and a later one of team-a's; synced. The signed-in
    user sees team-a only."""
    api = getattr(request, "param", None)
    with live_cluster("kueue", name="kueue", api=api) as (sim, cluster):
        _post(sim, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": "team-c", "labels": {"portal.example.com/tenant": "team-c"}}})
        _post(sim, "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-c/localqueues", {
            "apiVersion": f"{KUEUE}/v1beta2", "kind": "LocalQueue", "metadata": {"name": "shared", "namespace": "team-c"},
            "spec": {"clusterQueue": "team-a"}})
        _post(sim, "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-c/workloads",
              _workload("team-c", "wl-urgent", "shared", 10))
        _post(sim, "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads",
              _workload("team-a", "wl-late", "team-a-queue", 0))
        _sync(cluster)
        member_owns(cluster, "team-a")
        yield sim, cluster


@pytest.fixture
def alice(client):
    user = User.objects.create_user("alice")
    client.force_login(user)
    return user


def _row(cluster, name: str) -> Workload:
    return Workload.objects.get(cluster=cluster, name=name)


def _positions(cluster) -> dict[str, tuple]:
    return {w.name: (w.queue_position, w.queue_waiting, w.local_queue_position, w.position_cluster_queue,
                     w.position_observed_at)
            for w in Workload.objects.filter(cluster=cluster, state=Workload.State.PENDING)}


def _queue_cell(client) -> str:
    page = client.get(reverse("inventory:pending_pods")).content.decode()
    assert 'id="queued-workloads"' in page
    return page


# ----------------------------------------------------------------------------------------------- discovery
def test_discovery_says_where_the_visibility_api_is_served():
    served = ApiDiscovery(groups={KUEUE: ["v1beta2"], VISIBILITY: ["v1beta2", "v1beta1"]},
                          resources={f"{VISIBILITY}/v1beta2": ["clusterqueues", "clusterqueues/pendingworkloads"],
                                     f"{VISIBILITY}/v1beta1": ["clusterqueues", "clusterqueues/pendingworkloads"]})
    assert (served.pending_workloads_version(), served.pending_workloads_reason()) == ("v1beta2", "")
    older = ApiDiscovery(groups={KUEUE: ["v1beta1"], VISIBILITY: ["v1beta1"]},
                         resources={f"{VISIBILITY}/v1beta1": ["clusterqueues", "clusterqueues/pendingworkloads"]})
    assert older.pending_workloads_version() == "v1beta1"
    without = ApiDiscovery(groups={KUEUE: ["v1beta2"]}, resources={})
    assert without.pending_workloads_version() == ""
    assert without.pending_workloads_reason().startswith(f"Kueue's visibility API ({VISIBILITY}) is not served")
    down = ApiDiscovery(groups={KUEUE: ["v1beta2"], VISIBILITY: ["v1beta1"]}, resources={})  # APIService answers 503
    assert "registered but did not answer discovery" in down.pending_workloads_reason()
    alpha = ApiDiscovery(groups={KUEUE: ["v1beta1"], VISIBILITY: ["v1alpha1"]},
                         resources={f"{VISIBILITY}/v1alpha1": ["clusterqueues", "clusterqueues/pendingworkloads"]})
    assert alpha.pending_workloads_reason() == (f"{VISIBILITY} served only as v1alpha1; the portal reads v1beta2, "
                                                "v1beta1 (clusterqueues/pendingworkloads)")
    assert ApiDiscovery().pending_workloads_reason() == f"Kueue is not installed on this cluster (no {KUEUE} API)"


@pytest.mark.parametrize(("api", "version"), [("kueue", "v1beta2"), ("kueue-v1beta1", "v1beta1"),
                                              ("kueue-no-visibility", "")])
def test_the_client_discovers_the_visibility_api_of_a_real_server(api, version, transactional_db):
    with live_cluster("kueue", name="kueue", api=api) as (_sim, cluster):
        client = client_for(cluster)
        try:
            found = client.discover()
        finally:
            client.close()
    assert found.pending_workloads_version() == version
    assert (VISIBILITY in found.groups) == bool(version)


# ----------------------------------------------------------------------------------------------- the answer
def test_a_summary_is_read_and_anything_else_refused():
    item = {"metadata": {"name": "w", "namespace": "team-a"}, "priority": 3, "localQueueName": "q",
            "positionInClusterQueue": 5, "positionInLocalQueue": 0}
    assert pending_workloads_parse({"kind": "PendingWorkloadsSummary", "items": [item]}, offset=5) == [
        PendingWorkload("team-a", "w", "q", 3, 5, 0)]
    assert pending_workloads_parse({"kind": "PendingWorkloadsSummary", "metadata": {}}) == []  # Go's omitted list
    second = {**item, "metadata": {"name": "v", "namespace": "team-a"}, "positionInClusterQueue": 6}
    assert [w.name for w in pending_workloads_parse({"items": [item, second]}, offset=5)] == ["w", "v"]
    for bad in ([item], {"kind": "Status", "items": []}, {"items": "nope"}, {"items": [{**item, "metadata": {}}]},
                {"items": [{**item, "positionInClusterQueue": -1}]}, {"items": [{**item, "priority": "high"}]},
                {"items": [{**item, "localQueueName": ""}]}, {"items": [item, {**item, "positionInClusterQueue": 6}]},
                {"items": [second, item]}, {"items": [{**item, "positionInClusterQueue": 4}]}):
        with pytest.raises(VisibilityAnswerError):
            pending_workloads_parse(bad, offset=5)


# ----------------------------------------------------------------------------------------------- end to end
def test_kueues_positions_are_stored_and_shown_to_their_tenant_only(kueue, client, alice):
    sim, cluster = kueue
    assert queue_positions_sync_task(cluster.pk) == "2 queues, 3 positioned, 0 cleared"
    state = SyncState.objects.get(cluster=cluster, kind=POSITIONS_KIND)
    assert (state.phase, state.served_version, state.last_error) == ("idle", f"{VISIBILITY}/v1beta2", "")
    got = {name: p[:4] for name, p in _positions(cluster).items()}
    assert got == {"wl-urgent": (1, 3, 1, "team-a"), "job-pretrain-d4e5f": (2, 3, 1, "team-a"),
                   "wl-late": (3, 3, 2, "team-a")}
    # What Kueue says, not what the portal would estimate: the estimate counts the mirror, Kueue its own queue.
    Workload.objects.filter(cluster=cluster, name="wl-urgent").update(raw={"spec": {"priority": -5}})
    mine = {q.workload.name: q for q in queued_workloads(alice)}
    assert set(mine) == {"job-pretrain-d4e5f", "wl-late"}  # team-c's workload is counted, never shown
    assert mine["job-pretrain-d4e5f"].position_text == "2nd of 3 in ClusterQueue team-a (Kueue)"
    assert mine["job-pretrain-d4e5f"].local_position_text == "1st in LocalQueue team-a-queue"
    assert mine["wl-late"].position_text == "3rd of 3 in ClusterQueue team-a (Kueue)"
    page = _queue_cell(client)
    assert "2nd of 3 in ClusterQueue team-a (Kueue); 1st in LocalQueue team-a-queue" in page
    assert "3rd of 3 in ClusterQueue team-a (Kueue); 2nd in LocalQueue team-a-queue" in page
    assert "wl-urgent" not in page
    assert "team-c" not in page
    assert "estimated" not in page
    # The sync's upsert leaves the positions alone; a second read is idempotent.
    before = _positions(cluster)
    _sync(cluster)
    assert _positions(cluster) == before
    queue_positions_sync_task(cluster.pk)
    assert {n: p[:4] for n, p in _positions(cluster).items()} == got
    # Admission moves the queue: the admitted Workload loses its position, the others move up.
    urllib3.request("DELETE", sim.url + "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-c/workloads/wl-urgent")
    queue_positions_sync_task(cluster.pk)
    assert {n: p[:4] for n, p in _positions(cluster).items()} == {
        "wl-urgent": (None, None, None, ""), "job-pretrain-d4e5f": (1, 2, 1, "team-a"),
        "wl-late": (2, 2, 2, "team-a")}


@pytest.mark.parametrize("body", [b"<html>gateway</html>", b'{"items": "nope"}',
                                  orjson.dumps({"items": [{"metadata": {"name": "job-pretrain-d4e5f",
                                                                        "namespace": "team-a"},
                                                           "localQueueName": "team-a-queue",
                                                           "positionInClusterQueue": -1,
                                                           "positionInLocalQueue": 0}]})])
def test_a_malformed_answer_is_refused_and_changes_nothing(kueue, client, alice, caplog, body):
    sim, cluster = kueue
    queue_positions_sync_task(cluster.pk)
    before = _positions(cluster)
    sim.faults.malform_next_visibility_answers(1, body)
    with caplog.at_level(logging.WARNING, logger="inventory.services.queue_positions"):
        outcome = queue_positions_sync_task(cluster.pk)
    assert "refused: team-a" in outcome
    assert _positions(cluster) == before
    (warning,) = [r for r in caplog.records if r.name == "inventory.services.queue_positions"]
    assert warning.levelno == logging.WARNING
    assert "pending workloads of ClusterQueue team-a" in warning.getMessage()
    assert "answer refused, positions unchanged" in warning.getMessage()
    state = SyncState.objects.get(cluster=cluster, kind=POSITIONS_KIND)
    assert "answers refused for ClusterQueue team-a" in state.last_error
    assert "2nd of 3 in ClusterQueue team-a (Kueue)" in _queue_cell(client)


def test_an_unreachable_api_keeps_the_last_positions_until_they_go_stale(kueue, client, alice, settings):
    sim, cluster = kueue
    queue_positions_sync_task(cluster.pk)
    before = _positions(cluster)
    sim.faults.fail_next_requests(5, status=503)
    assert queue_positions_sync_task(cluster.pk).startswith("cluster error: ")
    assert _positions(cluster) == before
    state = SyncState.objects.get(cluster=cluster, kind=POSITIONS_KIND)
    assert "HTTP 503" in state.last_error
    assert "2nd of 3 in ClusterQueue team-a (Kueue)" in _queue_cell(client)
    # Older than PORTAL_QUEUE_POSITION_FRESH_SECONDS: the page falls back to the estimate, and says so.
    stale = before["job-pretrain-d4e5f"][4] - timedelta(seconds=settings.PORTAL_QUEUE_POSITION_FRESH_SECONDS + 1)
    Workload.objects.filter(cluster=cluster).update(position_observed_at=stale)
    page = _queue_cell(client)
    assert "about 2nd of 3 (estimated: priority, then age)" in page
    assert "(Kueue)" not in page


@pytest.mark.parametrize("kueue", ["kueue-no-visibility"], indirect=True)
def test_without_the_visibility_api_the_estimate_is_shown_and_labelled(kueue, client, alice):
    _sim, cluster = kueue
    outcome = queue_positions_sync_task(cluster.pk)
    assert outcome.startswith(f"not served: Kueue's visibility API ({VISIBILITY}) is not served")
    state = SyncState.objects.get(cluster=cluster, kind=POSITIONS_KIND)
    assert state.phase == SyncState.Phase.UNSERVED
    assert "is not served" in state.unavailable_reason
    assert all(p == (None, None, None, "", None) for p in _positions(cluster).values())
    mine = {q.workload.name: q for q in queued_workloads(alice)}
    assert mine["job-pretrain-d4e5f"].position_source == "estimate"
    page = _queue_cell(client)
    assert "about 2nd of 3 (estimated: priority, then age)" in page
    assert "about 3rd of 3 (estimated: priority, then age)" in page
    assert "(Kueue)" not in page


def test_the_beat_reads_positions_only_for_clusters_with_kueue(kueue, monkeypatch):
    _sim, cluster = kueue
    with live_cluster("sharing", name="plain") as (_other_sim, plain):
        sent: list[int] = []
        monkeypatch.setattr(queue_positions_sync_task, "delay", sent.append)
        assert queue_positions_due_task() == 1
        assert sent == [cluster.pk]
        assert queue_positions_due_task() == 0  # enqueued once until the read starts
        assert plain.pk not in sent
