"""The "sharing" scenario: renameByDefault, failRequestsGreaterThanOne (the kubelet rejects what the device plugin
refuses), MPS's one-share-per-container rule, and DRA-backed extended resources (the scheduler's generated claim)."""

from __future__ import annotations

import copy

import pytest
import yaml

from kubesim.scenario import SCENARIO_DIR, ScenarioError, load_scenario

PLUGIN_ERROR = ('Allocate failed due to rpc error: code = Unknown desc = invalid allocation request for "{resource}": '
                "invalid request: maximum request size for shared resources is 1; found {count}, which is unexpected")


@pytest.fixture(scope="module")
def sharing() -> list[dict]:
    return load_scenario("sharing")


def _named(objects: list[dict], kind: str, prefix: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(prefix)]


def _node(objects: list[dict], name: str) -> dict:
    return next(o for o in objects if o["kind"] == "Node" and o["metadata"]["name"] == name)


def test_rename_by_default_advertises_gpu_shared_and_keeps_the_product_label(sharing) -> None:
    node = _node(sharing, "t4-renamed-000")
    labels, allocatable = node["metadata"]["labels"], node["status"]["allocatable"]
    assert allocatable["nvidia.com/gpu.shared"] == "8"  # 2 cards x 4 replicas
    assert "nvidia.com/gpu" not in allocatable
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"  # renamed: the resource marks the sharing, not the label
    assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.count"]) == ("4", "2")
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert _node(sharing, "l4-mps-000")["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L4-SHARED"


@pytest.mark.parametrize(("prefix", "resource"), [("greedy-notebook", "nvidia.com/gpu.shared"),
                                                  ("greedy-mps", "nvidia.com/gpu")])
def test_more_than_one_shared_unit_is_bound_then_rejected_by_the_kubelet(sharing, prefix, resource) -> None:
    [pod] = _named(sharing, "Pod", prefix)
    status = pod["status"]
    assert pod["spec"]["nodeName"]  # the scheduler bound it: the node has room for 2 units
    assert (status["phase"], status["reason"]) == ("Failed", "UnexpectedAdmissionError")
    assert status["message"] == "Pod was rejected: " + PLUGIN_ERROR.format(resource=resource, count=2)
    assert "containerStatuses" not in status
    assert [c["type"] for c in status["conditions"]] == ["PodScheduled"]
    [event] = [e for e in sharing if e["kind"] == "Event" and e["involvedObject"]["name"] == pod["metadata"]["name"]]
    assert (event["type"], event["reason"], event["source"]["component"]) == (
        "Warning", "UnexpectedAdmissionError", "kubelet")
    assert event["message"] == PLUGIN_ERROR.format(resource=resource, count=2)


def test_one_shared_unit_runs(sharing) -> None:
    notebooks = _named(sharing, "Pod", "notebook")
    assert len(notebooks) == 3
    assert {p["status"]["phase"] for p in notebooks} == {"Running"}
    assert _named(sharing, "Pod", "mps-infer")[0]["status"]["phase"] == "Running"


def test_time_slicing_without_the_flag_admits_two_replicas() -> None:
    lax = copy.deepcopy(yaml.safe_load((SCENARIO_DIR / "sharing.yaml").read_text(encoding="utf-8")))
    lax["nodePools"][1]["timeSlicing"]["failRequestsGreaterThanOne"] = False
    [pod] = _named(load_scenario(lax), "Pod", "greedy-notebook")
    assert pod["status"]["phase"] == "Running"  # the device plugin's default: two replicas, possibly of one card


def test_dra_backed_extended_resource_gets_a_scheduler_generated_claim(sharing) -> None:
    [pod] = _named(sharing, "Pod", "dra-ext")
    [claim] = _named(sharing, "ResourceClaim", "dra-ext")
    name = claim["metadata"]["name"]
    assert name.startswith(f"{pod['metadata']['name']}-extended-resources-")
    assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    [request] = claim["spec"]["devices"]["requests"]
    assert request == {"name": "container-0-request-0",
                       "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("l40s-dra-000", "gpu-0"), ("l40s-dra-000", "gpu-1")]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": pod["metadata"]["name"],
                                               "uid": pod["metadata"]["uid"]}]
    assert pod["spec"]["nodeName"] == "l40s-dra-000"
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"  # the request stays
    assert pod["status"]["extendedResourceClaimStatus"] == {
        "resourceClaimName": name,
        "requestMappings": [{"containerName": "main", "requestName": "container-0-request-0",
                             "resourceName": "nvidia.com/gpu"}]}
    # A node whose device plugin advertises the name serves it itself: no claim for the H100 trainer.
    [trainer] = _named(sharing, "Pod", "trainer")
    assert "extendedResourceClaimStatus" not in trainer["status"]
    assert not _named(sharing, "ResourceClaim", "trainer")


def test_dra_backed_extended_resource_that_does_not_fit_is_pending_on_claims() -> None:
    scenario = {
        "nodePools": [{"name": "dra", "count": 1, "mode": "dra", "gpu": {"model": "NVIDIA-L40S", "perNode": 2}}],
        "deviceClasses": [{"name": "gpu.nvidia.com", "extendedResourceName": "nvidia.com/gpu"}],
        "namespaces": [{"name": "t"}],
        "workloads": [{"name": "big", "namespace": "t", "pool": "dra", "state": "pending",
                       "resources": {"nvidia.com/gpu": 3}}],
    }
    [pod] = [o for o in load_scenario(scenario) if o["kind"] == "Pod"]
    assert pod["status"]["conditions"][0]["message"].startswith("0/1 nodes are available: 1 cannot allocate all claims.")
    assert not [o for o in load_scenario(scenario) if o["kind"] == "ResourceClaim"]
    scenario["workloads"][0]["state"] = "running"
    with pytest.raises(ScenarioError, match="no node in pool 'dra' has room"):
        load_scenario(scenario)


@pytest.mark.parametrize(("change", "message"), [
    ({"mps": {"replicas": 2, "failRequestsGreaterThanOne": False}}, "unknown key\\(s\\) failRequestsGreaterThanOne"),
    ({"deviceClass": "gpu"}, "not an extended resource name"),
])
def test_sharing_options_are_checked(change: dict, message: str) -> None:
    scenario = {
        "nodePools": [{"name": "l4", "count": 1, "mode": "mps", "gpu": {"model": "NVIDIA-L4", "perNode": 1},
                       "mps": change.get("mps", {"replicas": 2})}],
        "deviceClasses": [{"name": "c", "extendedResourceName": change.get("deviceClass", "example.com/gpu")}],
    }
    with pytest.raises(ScenarioError, match=message):
        load_scenario(scenario)
