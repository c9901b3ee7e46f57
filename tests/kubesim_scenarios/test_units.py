"""kubesim scenario options for units that are not whole cards: the MIG single strategy and its mig.config.state,
DRA consumable capacity (allowMultipleAllocations + requestPolicy) with claim capacity requests, the `dra-sharing`
builtin scenario."""

from __future__ import annotations

import re

import pytest

from kubesim.scenario import ScenarioError, load_scenario


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def single_pool(**mig) -> dict:
    return {"nodePools": [{"name": "single", "count": 2, "mode": "mig",
                           "gpu": {"model": "NVIDIA-A100-SXM4-80GB", "perNode": 4},
                           "mig": {"strategy": "single", "config": "all-3g.40gb", **mig}}]}


def test_mig_single_strategy_labels_and_resources_as_gfd_sets_them() -> None:
    nodes = by_kind(load_scenario(single_pool()), "Node")
    labels, capacity = nodes[0]["metadata"]["labels"], nodes[0]["status"]["capacity"]
    assert capacity["nvidia.com/gpu"] == "8"  # 4 cards x 2 slices of 3g.40gb
    assert not any(k.startswith("nvidia.com/mig-") for k in capacity)
    assert {k: labels[k] for k in labels if k.startswith(("nvidia.com/mig.", "nvidia.com/gpu."))}.items() >= {
        "nvidia.com/mig.strategy": "single", "nvidia.com/mig.config": "all-3g.40gb",
        "nvidia.com/mig.config.state": "success", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
        "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": str(40 * 1024 - 256),
        "nvidia.com/gpu.multiprocessors": "42", "nvidia.com/gpu.slices.gi": "3", "nvidia.com/gpu.slices.ci": "3",
        "nvidia.com/gpu.engines.copy": "3",
    }.items()
    assert not any(k.startswith("nvidia.com/mig-3g") for k in labels)  # no mixed-strategy per-profile labels


def test_mig_config_state_on_the_first_nodes() -> None:
    nodes = by_kind(load_scenario(single_pool(configState="rebooting", configStateNodes=1)), "Node")
    assert [n["metadata"]["labels"]["nvidia.com/mig.config.state"] for n in nodes] == ["rebooting", "success"]
    every = by_kind(load_scenario(single_pool(configState="failed")), "Node")
    assert {n["metadata"]["labels"]["nvidia.com/mig.config.state"] for n in every} == {"failed"}


@pytest.mark.parametrize(("mig", "fragment"), [
    ({"config": "all-balanced"}, "the single strategy needs every card partitioned alike into one profile"),
    ({"configState": "done"}, "mig.configState: must be one of success, pending, rebooting, failed"),
    ({"strategy": "double"}, "mig.strategy: must be mixed or single"),
])
def test_mig_single_errors(mig, fragment) -> None:
    with pytest.raises(ScenarioError, match=re.escape(fragment)):
        load_scenario(single_pool(**mig))


def consumable(claims: list[dict], policy: dict | None = None) -> dict:
    return {
        "nodePools": [{"name": "shared", "count": 1, "mode": "dra",
                       "gpu": {"model": "NVIDIA-H100-80GB-HBM3", "perNode": 1, "memoryMiB": 81920},
                       "dra": {"consumableCapacity": {"memory": policy if policy is not None else {
                           "default": "10Gi", "validRange": {"min": "10Gi", "max": "80Gi", "step": "10Gi"}}}}}],
        "deviceClasses": [{"name": "gpu.nvidia.com", "match": {"attributes": {"type": "gpu"}}}],
        "namespaces": [{"name": "team"}],
        "claims": claims,
    }


def share(name: str, memory: str | None = None) -> dict:
    request = {"name": "gpu", "deviceClassName": "gpu.nvidia.com", **({"capacity": {"memory": memory}} if memory
                                                                      else {})}
    return {"name": name, "namespace": "team", "allocated": True, "requests": [request]}


def test_consumable_capacity_device_and_shares() -> None:
    objects = load_scenario(consumable([share("a", "15Gi"), share("b"), share("c", "40Gi")]))
    [device] = by_kind(objects, "ResourceSlice")[0]["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["memory"] == {"value": "80Gi", "requestPolicy": {
        "default": "10Gi", "validRange": {"min": "10Gi", "max": "80Gi", "step": "10Gi"}}}
    claims = {c["metadata"]["name"]: c for c in by_kind(objects, "ResourceClaim")}
    results = {name: c["status"]["allocation"]["devices"]["results"][0] for name, c in claims.items()}
    # 15Gi rounds up to 20Gi; no request takes the default 10Gi; all three share gpu-0, each with its shareID.
    assert {n: r["consumedCapacity"] for n, r in results.items()} == {
        "a": {"memory": "20Gi"}, "b": {"memory": "10Gi"}, "c": {"memory": "40Gi"}}
    assert {r["device"] for r in results.values()} == {"gpu-0"}
    assert len({r["shareID"] for r in results.values()}) == 3
    assert claims["a"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == {"requests": {"memory": "15Gi"}}


@pytest.mark.parametrize(("claims", "why"), [
    ([share("a", "50Gi"), share("b", "40Gi")], "b"),  # 50 + 40 > 80
    ([share("a", "90Gi")], "a"),                       # above validRange.max
])
def test_consumable_capacity_refuses_what_does_not_fit(claims, why) -> None:
    with pytest.raises(ScenarioError, match=f"claim team/{why}: allocated: true but no node has free matching"):
        load_scenario(consumable(claims))


def test_valid_values_policy_and_exclusive_devices_with_capacity_requests() -> None:
    objects = load_scenario(consumable([share("a", "25Gi")], policy={"default": "40Gi",
                                                                       "validValues": ["20Gi", "40Gi", "80Gi"]}))
    [claim] = by_kind(objects, "ResourceClaim")
    assert claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] == {"memory": "40Gi"}
    # An ordinary (exclusive) device: a capacity request must fit its value; no share is recorded.
    spec = consumable([share("a", "40Gi")])
    del spec["nodePools"][0]["dra"]
    [claim] = by_kind(load_scenario(spec), "ResourceClaim")
    assert "shareID" not in claim["status"]["allocation"]["devices"]["results"][0]
    spec["claims"] = [share("a", "90Gi")]
    with pytest.raises(ScenarioError, match="no node has free matching devices"):
        load_scenario(spec)


def test_sharing_scenario_builds_and_is_deterministic() -> None:
    first, second = load_scenario("dra-sharing"), load_scenario("dra-sharing")
    assert first == second
    counts = {k: len(by_kind(first, k)) for k in ("Node", "ResourceSlice", "DeviceClass", "ResourceClaim", "Pod")}
    assert counts == {"Node": 4, "ResourceSlice": 4, "DeviceClass": 5, "ResourceClaim": 10, "Pod": 9}
    classes = {c["metadata"]["name"]: c["spec"].get("config") for c in by_kind(first, "DeviceClass")}
    assert classes["timeslice.gpu.nvidia.com"][0]["opaque"]["parameters"]["sharing"]["strategy"] == "TimeSlicing"
    assert classes["mps.gpu.nvidia.com"][0]["opaque"]["parameters"]["sharing"]["strategy"] == "MPS"
    [finetune] = [p for p in by_kind(first, "Pod") if p["metadata"]["name"].startswith("finetune")]
    assert finetune["status"]["conditions"][0]["message"].startswith(
        "0/4 nodes are available: 2 cannot allocate all claims, 2 node(s) didn't match Pod's node affinity/selector.")


def _history(*workloads: dict) -> dict:
    return {"nodePools": [{"name": "a100", "count": 1, "mode": "whole",
                           "gpu": {"model": "NVIDIA-A100-SXM4-40GB", "perNode": 4}}],
            "namespaces": [{"name": "ml"}], "workloads": list(workloads)}


RUNNING = {"name": "serve", "namespace": "ml", "pool": "a100", "state": "running", "resources": {"nvidia.com/gpu": 4},
           "createdAt": -100000}
FAILED = {"name": "train", "namespace": "ml", "pool": "a100", "state": "failed", "resources": {"nvidia.com/gpu": 2},
          "controller": "Job"}


def test_a_finished_pod_ran_only_where_it_fitted_at_the_time() -> None:
    # While `serve` held the node's four GPUs, no 2-GPU pod can have run there: in either order of the file.
    for workloads in ((RUNNING, {**FAILED, "createdAt": -90000}), ({**FAILED, "createdAt": -90000}, RUNNING)):
        with pytest.raises(ScenarioError, match="no node in pool 'a100' has room"):
            load_scenario(_history(*workloads))
    # Before `serve` was created it could, and two such pods overlapping in time fill the node exactly.
    objects = load_scenario(_history(RUNNING, {**FAILED, "count": 2, "createdAt": -110000}))
    phases = sorted((p["metadata"]["name"].split("-")[0], p["status"]["phase"]) for p in by_kind(objects, "Pod"))
    assert phases == [("serve", "Running"), ("train", "Failed"), ("train", "Failed")]
    with pytest.raises(ScenarioError, match="no node in pool 'a100' has room"):
        load_scenario(_history(RUNNING, {**FAILED, "count": 3, "createdAt": -110000}))


@pytest.mark.parametrize("value", [0, 5, -30 * 86400, "yesterday", True, 1.5])
def test_created_at_must_be_seconds_before_the_epoch(value) -> None:
    with pytest.raises(ScenarioError, match=r"workloads\[0\]\.createdAt"):
        load_scenario(_history({**RUNNING, "createdAt": value}))
