"""The simulator's minimal Kueue: a write to a Kueue object re-runs admission (per-flavor nominal quota, queue order,
no borrowing or preemption), so raising a ClusterQueue's nominalQuota admits the Workload that waited for it."""

from __future__ import annotations

import orjson
import urllib3

from kubesim import Simulator

BASE = "/apis/kueue.x-k8s.io/v1beta2"


def _get(sim: Simulator, path: str) -> dict:
    response = urllib3.request("GET", sim.url + BASE + path)
    assert response.status == 200, response.data
    return orjson.loads(response.data)


def _send(sim: Simulator, method: str, path: str, body: dict, content_type: str = "application/merge-patch+json"):
    response = urllib3.request(method, sim.url + BASE + path, body=orjson.dumps(body),
                               headers={"Content-Type": content_type})
    assert response.status in (200, 201), response.data
    return orjson.loads(response.data)


def _conditions(workload: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("message", "")) for c in workload["status"].get("conditions", [])}


def _gpu_quota(nominal: str) -> dict:
    return {"spec": {"resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        "flavors": [{"name": "h100", "resources": [
            {"name": "cpu", "nominalQuota": "256"}, {"name": "memory", "nominalQuota": "2Ti"},
            {"name": "nvidia.com/gpu", "nominalQuota": nominal, "borrowingLimit": "0"}]}],
    }]}}


def test_raising_nominal_quota_admits_the_waiting_workload():
    with Simulator(scenario="kueue", port=0) as sim:
        pending = "/namespaces/team-a/workloads/job-pretrain-d4e5f"
        assert _conditions(_get(sim, pending))["QuotaReserved"][0] == "False"
        _send(sim, "PATCH", "/clusterqueues/team-a", _gpu_quota("18"))  # 12 used + 8 wanted > 18: still waits
        waiting = _conditions(_get(sim, pending))
        assert waiting == {"QuotaReserved": ("False", "couldn't assign flavors to pod set main: insufficient unused "
                                                      "quota for nvidia.com/gpu in flavor h100, 2 more needed")}
        _send(sim, "PATCH", "/clusterqueues/team-a", _gpu_quota("20"))
        admitted = _get(sim, pending)
        assert _conditions(admitted)["Admitted"][0] == "True"
        assert admitted["status"]["admission"] == {"clusterQueue": "team-a", "podSetAssignments": [{
            "name": "main", "count": 2, "flavors": {"cpu": "h100", "memory": "h100", "nvidia.com/gpu": "h100"},
            "resourceUsage": {"cpu": "16", "memory": str(128 * 2**30), "nvidia.com/gpu": "8"}}]}
        queue = _get(sim, "/clusterqueues/team-a")["status"]
        gpu = {r["name"]: r["total"] for f in queue["flavorsUsage"] for r in f["resources"]}["nvidia.com/gpu"]
        assert (gpu, queue["pendingWorkloads"], queue["admittedWorkloads"]) == ("20", 0, 2)
        assert _get(sim, "/namespaces/team-a/localqueues/team-a-queue")["status"]["admittedWorkloads"] == 2


def test_a_workload_asking_for_an_uncovered_resource_waits_for_ever():
    with Simulator(scenario="kueue", port=0) as sim:
        _send(sim, "POST", "/namespaces/team-b/workloads", {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "needs-cpu", "namespace": "team-b"},
            "spec": {"queueName": "team-b-queue", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "c", "image": "busybox", "resources": {
                    "requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}}}]}}, "application/json")
        got = _conditions(_get(sim, "/namespaces/team-b/workloads/needs-cpu"))
        assert got == {"QuotaReserved": ("False", "couldn't assign flavors to pod set main: resource cpu unavailable "
                                                  "in ClusterQueue")}


def test_a_dry_run_admits_nothing():
    with Simulator(scenario="kueue", port=0) as sim:
        response = urllib3.request("PATCH", sim.url + BASE + "/clusterqueues/team-a?dryRun=All",
                                   body=orjson.dumps(_gpu_quota("64")),
                                   headers={"Content-Type": "application/merge-patch+json"})
        assert response.status == 200
        pending = _get(sim, "/namespaces/team-a/workloads/job-pretrain-d4e5f")
        assert _conditions(pending)["QuotaReserved"][0] == "False"
