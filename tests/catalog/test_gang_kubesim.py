"""The gang explainer against kubesim's own placement: on generated clusters (fragmented by background pods), a gang
is explained from the cluster read over HTTP, then the same gang is created in the simulator (`state: scheduled`:
kubesim's scheduler binds each pod where it fits now, in order) and the pods it bound are counted. Both must agree:
whether all N start, and how many of them can."""

from __future__ import annotations

import json
import random
import urllib.request
from typing import Any

import pytest

from catalog.feasibility import snapshot_from_objects
from catalog.feasibility.gang import explain_gang, gang_pods
from kubesim.server import Simulator

GANGS = 24
_LISTS = {
    "nodes": "/api/v1/nodes",
    "pods": "/api/v1/pods",
    "resource_slices": "/apis/resource.k8s.io/v1/resourceslices",
    "device_classes": "/apis/resource.k8s.io/v1/deviceclasses",
    "resource_claims": "/apis/resource.k8s.io/v1/resourceclaims",
    "resource_claim_templates": "/apis/resource.k8s.io/v1/resourceclaimtemplates",
}


def _get(sim: Simulator, path: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(sim.url + path, timeout=10) as response:  # noqa: S310 - the local simulator
        return json.load(response)["items"]


def _scenario(seed: int, *, with_gang: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """A small GPU cluster fragmented by background pods, and (with_gang) the gang as a `scheduled` Job."""
    rng = random.Random(seed)
    dra = seed % 3 == 2
    per_node = rng.choice([4, 8])
    gpu = {"model": "NVIDIA-H100-80GB-HBM3", "perNode": per_node, "driverVersion": "570.124.06", "cudaDriver": "12.8"}
    pool: dict[str, Any] = {"name": "h100", "count": rng.randint(2, 5), "instanceType": "p5.48xlarge", "cpu": 192,
                            "memory": "2Ti", "gpu": gpu}
    spec: dict[str, Any] = {"name": f"gangs-{seed}", "kubernetesVersion": "v1.35.0", "nodePools": [pool],
                            "namespaces": [{"name": "ml"}], "workloads": []}
    size = rng.randint(1, per_node)
    topology = seed % 6 == 5  # DRA gangs whose GPUs must share a PCIe root (two roots per node)
    if dra:
        pool["mode"] = "dra"
        if topology:
            gpu["pcieRoots"] = 2
        spec["deviceClasses"] = [{"name": "gpu.nvidia.com", "match": {"driver": "gpu.nvidia.com",
                                                                      "attributes": {"type": "gpu"}}}]
        spec["claimTemplates"] = [
            {"name": f"gpus-{n}", "namespace": "ml", "requests": [{"name": "gpus", "deviceClassName": "gpu.nvidia.com",
                                                                   "count": n}]}
            for n in sorted({*range(1, per_node + 1)})]
        spec["claimTemplates"].append({
            "name": "one-root", "namespace": "ml",
            "requests": [{"name": "gpus", "deviceClassName": "gpu.nvidia.com", "count": size}],
            "constraints": [{"matchAttribute": "resource.kubernetes.io/pcieRoot", "requests": ["gpus"]}]})
    for index in range(rng.randint(1, 2 * pool["count"])):  # background: whatever fits stays, the rest waits
        want = rng.randint(1, per_node)
        workload = {"name": f"bg-{index}", "namespace": "ml", "count": 1, "pool": "h100", "state": "scheduled",
                    "cpu": 4, "memory": "16Gi"}
        workload.update({"claimTemplate": f"gpus-{want}"} if dra else {"resources": {"nvidia.com/gpu": want}})
        spec["workloads"].append(workload)
    count = rng.randint(2, 2 * pool["count"])
    gang = {"name": "gang", "namespace": "ml", "count": count, "pool": "h100", "state": "scheduled",
            "controller": "Job", "cpu": rng.choice([8, 16]), "memory": "64Gi"}
    if topology:
        gang["claimTemplate"] = "one-root"
    else:
        gang.update({"claimTemplate": f"gpus-{size}"} if dra else {"resources": {"nvidia.com/gpu": size}})
    if with_gang:
        spec["workloads"].append(gang)
    return spec, gang


def _job(template_pod: dict[str, Any], parallelism: int) -> dict[str, Any]:
    """The Job a user would submit for the gang: the simulator's pod template, `parallelism` Indexed pods."""
    spec = {key: value for key, value in template_pod["spec"].items() if key not in ("nodeName",)}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gang", "namespace": "ml"},
            "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                     "template": {"metadata": {"labels": {"app": "gang"}}, "spec": spec}}}


def _gang_pods(sim: Simulator) -> list[dict[str, Any]]:
    return [p for p in _get(sim, "/api/v1/namespaces/ml/pods") if p["metadata"]["name"].startswith("gang-")]


def _compare(seed: int) -> tuple[bool, bool, str]:
    """(explainer verdict, simulator verdict, what differs or "") for one generated gang."""
    before, gang = _scenario(seed, with_gang=False)
    with Simulator(scenario=before, port=0) as sim:
        snapshot = snapshot_from_objects(**{key: _get(sim, path) for key, path in _LISTS.items()})
    after, _ = _scenario(seed, with_gang=True)
    with Simulator(scenario=after, port=0) as sim:
        created = _gang_pods(sim)
    assert len(created) == gang["count"]
    bound = sum(1 for p in created if p["spec"].get("nodeName"))

    pods, claims, templates, _ = gang_pods([_job(created[0], gang["count"])])
    result = explain_gang(pods, snapshot, extra_claims=claims, extra_claim_templates=templates)
    simulated = bound == gang["count"]
    if result.schedulable != simulated or result.largest != bound:
        return result.schedulable, simulated, f"seed {seed}: {result.message} / simulator bound {bound}"
    if not result.schedulable:  # the simulator's FailedScheduling reasons are the explainer's
        pending = next(p for p in created if not p["spec"].get("nodeName"))
        message = next(c["message"] for c in pending["status"]["conditions"] if c["type"] == "PodScheduled")
        reasons = result.failure.message.split(": ", 1)[1].rstrip(".")
        if reasons not in message:
            return result.schedulable, simulated, f"seed {seed}: {reasons!r} not in {message!r}"
    return result.schedulable, simulated, ""


@pytest.mark.slow  # about 5 s
def test_the_gang_explainer_agrees_with_the_simulators_placement_on_generated_gangs():
    outcomes = [(seed, *_compare(seed)) for seed in range(GANGS)]
    assert [diff for *_, diff in outcomes if diff] == []
    verdicts = {(seed % 3 == 2, explained) for seed, explained, _, _ in outcomes}
    assert verdicts == {(True, True), (True, False), (False, True), (False, False)}  # DRA or not, fits or not
    assert {explained for seed, explained, _, _ in outcomes if seed % 6 == 5} == {True, False}  # PCIe-root gangs
