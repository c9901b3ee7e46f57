"""The simulator's Kueue visibility API (visibility.kueue.x-k8s.io): served, with discovery, only by profiles that
install Kueue with it; pending workloads answered in the admission model's own order (priority, then age), the
order in which raising the quota admits them."""

from __future__ import annotations

import orjson
import pytest
import urllib3

from kubesim import Simulator

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
VISIBILITY = "visibility.kueue.x-k8s.io"


def _get(sim: Simulator, path: str, status: int = 200) -> dict:
    response = urllib3.request("GET", sim.url + path)
    assert response.status == status, response.data
    return orjson.loads(response.data)


def _send(sim: Simulator, method: str, path: str, body: dict, content_type: str = "application/json") -> None:
    response = urllib3.request(method, sim.url + KUEUE + path, body=orjson.dumps(body),
                               headers={"Content-Type": content_type})
    assert response.status in (200, 201), response.data


def _workload(name: str, queue: str, priority: int) -> dict:
    container = {"name": "c", "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}}}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"queueName": queue, "priority": priority,
                     "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [container]}}}]}}


def _positions(summary: dict) -> list[tuple[str, str, int, int, int]]:
    return [(i["metadata"]["name"], i["localQueueName"], i["priority"], i["positionInClusterQueue"],
             i["positionInLocalQueue"]) for i in summary["items"]]


@pytest.mark.parametrize(("api", "served"), [("kueue", ["v1beta2", "v1beta1"]), ("kueue-v1beta1", ["v1beta1"]),
                                             ("kueue-no-visibility", [])])
def test_discovery_shows_the_visibility_group_where_the_profile_serves_it(api, served):
    with Simulator(scenario="kueue", port=0, api=api) as sim:
        groups = {g["name"]: [v["version"] for v in g["versions"]] for g in _get(sim, "/apis")["groups"]}
        assert groups.get(VISIBILITY, []) == served
        assert "kueue.x-k8s.io" in groups
        path = f"/apis/{VISIBILITY}/v1beta1/clusterqueues/team-a/pendingworkloads"
        if not served:
            _get(sim, f"/apis/{VISIBILITY}/v1beta1", status=404)
            _get(sim, path, status=404)
            return
        resources = {r["name"]: r["verbs"] for r in _get(sim, f"/apis/{VISIBILITY}/{served[0]}")["resources"]}
        assert resources == {"clusterqueues": [], "clusterqueues/pendingworkloads": ["get"], "localqueues": [],
                             "localqueues/pendingworkloads": ["get"]}
        summary = _get(sim, path)
        assert (summary["kind"], summary["apiVersion"]) == ("PendingWorkloadsSummary", f"{VISIBILITY}/v1beta1")
        assert _positions(summary) == [("job-pretrain-d4e5f", "team-a-queue", 0, 0, 0)]


def test_pending_workloads_come_in_the_order_admission_tries_them():
    with Simulator(scenario="kueue", port=0) as sim:
        _send(sim, "POST", "/namespaces/team-a/localqueues", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "urgent", "namespace": "team-a"}, "spec": {"clusterQueue": "team-a"}})
        _send(sim, "POST", "/namespaces/team-a/workloads", _workload("wl-high", "urgent", 10))
        _send(sim, "POST", "/namespaces/team-a/workloads", _workload("wl-low", "team-a-queue", 0))
        base = f"/apis/{VISIBILITY}/v1beta2"
        assert _positions(_get(sim, f"{base}/clusterqueues/team-a/pendingworkloads")) == [
            ("wl-high", "urgent", 10, 0, 0),
            ("job-pretrain-d4e5f", "team-a-queue", 0, 1, 0),  # priority first, then age
            ("wl-low", "team-a-queue", 0, 2, 1),
        ]
        assert _positions(_get(sim, f"{base}/clusterqueues/team-a/pendingworkloads?offset=1&limit=1")) == [
            ("job-pretrain-d4e5f", "team-a-queue", 0, 1, 0)]
        assert _positions(_get(sim, f"{base}/namespaces/team-a/localqueues/team-a-queue/pendingworkloads")) == [
            ("job-pretrain-d4e5f", "team-a-queue", 0, 1, 0), ("wl-low", "team-a-queue", 0, 2, 1)]
        assert _get(sim, f"{base}/clusterqueues/team-b/pendingworkloads")["items"] == []
        missing = _get(sim, f"{base}/clusterqueues/nope/pendingworkloads", status=404)
        assert missing["message"] == f'clusterqueue.{VISIBILITY} "nope" not found'
        # 12 of 16 GPUs used: 20 admits exactly one more 8-GPU workload, the head of the queue.
        _send(sim, "PATCH", "/clusterqueues/team-a", {"spec": {"resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": "h100", "resources": [
                {"name": "cpu", "nominalQuota": "256"}, {"name": "memory", "nominalQuota": "2Ti"},
                {"name": "nvidia.com/gpu", "nominalQuota": "20", "borrowingLimit": "0"}]}]}]}},
              content_type="application/merge-patch+json")
        assert [p[:1] + p[3:] for p in _positions(_get(sim, f"{base}/clusterqueues/team-a/pendingworkloads"))] == [
            ("job-pretrain-d4e5f", 0, 0), ("wl-low", 1, 1)]


def test_a_malformed_answer_can_be_injected():
    with Simulator(scenario="kueue", port=0) as sim:
        sim.faults.malform_next_visibility_answers(1, b'{"items": "nope"}')
        path = f"/apis/{VISIBILITY}/v1beta2/clusterqueues/team-a/pendingworkloads"
        assert _get(sim, path) == {"items": "nope"}
        assert len(_get(sim, path)["items"]) == 1
