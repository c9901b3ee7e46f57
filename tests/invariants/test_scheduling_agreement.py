"""The explainer agrees with the simulator's own scheduler, pod by pod.

kubesim places every workload with its own, independent implementation of the Filter phase (it imports nothing of
the portal), in file order, and writes a FailedScheduling message for each pod it leaves Pending, computed against
the cluster as it stood when the pod was created. Two implementations agreeing is the point: each pod is explained
against the same cluster the simulator saw — every object created before it, without the claims generated for the
pod itself — and a Pending pod must get the same verdict and the same reason histogram, a placed pod must fit on the
node the simulator chose. A disagreement names the pod, the node and both reasons.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from typing import Any

import pytest

from catalog.feasibility import explain_pod, snapshot_from_objects
from kubesim.scenario import load_scenario
from tests.invariants.scenarios import random_scenario

SCENARIOS = [("demo", "demo"), *[(f"random-{seed}", seed) for seed in range(6)]]


def _objects(source: Any) -> list[dict[str, Any]]:
    if source == "demo":
        return load_scenario("demo", seed=1)
    return load_scenario(random_scenario(source, workloads=24), seed=source)


def _before(objects: list[dict[str, Any]], pod: dict[str, Any]) -> Any:
    """The cluster when `pod` was created: every object before it, less the claims generated for the pod itself (a
    pod submitted again would get new ones from its templates)."""
    position = next(i for i, o in enumerate(objects) if o is pod)
    own = {entry.get("resourceClaimName") for entry in pod.get("status", {}).get("resourceClaimStatuses") or []}
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects[:position]:
        owners = {ref.get("uid") for ref in obj["metadata"].get("ownerReferences") or []}
        if obj["kind"] == "ResourceClaim" and (pod["metadata"]["uid"] in owners or obj["metadata"]["name"] in own):
            continue
        by_kind.setdefault(obj["kind"], []).append(obj)
    return snapshot_from_objects(
        nodes=by_kind.get("Node", []), pods=by_kind.get("Pod", []), resource_slices=by_kind.get("ResourceSlice", []),
        device_classes=by_kind.get("DeviceClass", []), resource_claims=by_kind.get("ResourceClaim", []),
        resource_claim_templates=by_kind.get("ResourceClaimTemplate", []), kubernetes_version=(1, 35))


def _histogram(message: str) -> Counter[str]:
    """The per-reason counts of a FitError message ("0/N nodes are available: 2 Insufficient cpu, …."); the keyed
    taint wording of older schedulers is normalised to the generic one."""
    head = message.split(" no new claims to deallocate")[0].split(" preemption:")[0]
    body = head.split("nodes are available: ", 1)[1].rstrip(".")
    body = re.sub(r"had untolerated taint \{[^}]*\}", "had untolerated taint(s)", body)
    counts: Counter[str] = Counter()
    for part in body.split(", "):
        count, _, reason = part.partition(" ")
        counts[reason] += int(count)
    return counts


def _as_submitted(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as it was before scheduling: no node, no status (claims stay: their allocation is the cluster's)."""
    submitted = copy.deepcopy(pod)
    submitted["spec"].pop("nodeName", None)
    submitted.pop("status", None)
    return submitted


def _failed_scheduling(objects: list[dict[str, Any]]) -> dict[str, str]:
    return {e["involvedObject"]["uid"]: e["message"] for e in objects
            if e["kind"] == "Event" and e.get("reason") == "FailedScheduling"}


@pytest.mark.parametrize(("name", "source"), SCENARIOS, ids=[name for name, _ in SCENARIOS])
def test_the_explainer_agrees_with_the_simulators_scheduler(name: str, source: Any) -> None:
    objects = _objects(source)
    pods = [o for o in objects if o["kind"] == "Pod"]
    messages = _failed_scheduling(objects)
    disagreements: list[str] = []
    pending = placed = 0
    for pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        key = f"{meta['namespace']}/{meta['name']}"
        if not spec.get("nodeName"):
            pending += 1
            explanation = explain_pod(_as_submitted(pod), _before(objects, pod))
            simulator = messages.get(meta["uid"], "")
            assert simulator, f"{key}: Pending without the simulator's FailedScheduling event"
            if explanation.schedulable:
                disagreements.append(f"{key}: the simulator left it Pending ({simulator!r}) but the explainer says it "
                                     f"fits on {explanation.fitting_nodes[:3]}")
            elif _histogram(explanation.message) != _histogram(simulator):
                ours = {n.name: n.reasons for n in explanation.nodes if not n.fits}
                disagreements.append(f"{key}: simulator {simulator!r} vs explainer {explanation.message!r}; "
                                     f"explainer per node: {dict(list(ours.items())[:8])}")
        elif pod.get("status", {}).get("phase") in ("Running", "Pending"):
            placed += 1
            node = spec["nodeName"]
            explanation = explain_pod(_as_submitted(pod), _before(objects, pod))
            if node not in explanation.fitting_nodes:
                verdict = next((n for n in explanation.nodes if n.name == node), None)
                disagreements.append(f"{key}: the simulator placed it on {node}; the explainer says "
                                     f"{verdict.reasons if verdict else 'no such node'} "
                                     f"({'; '.join(verdict.details[:3]) if verdict else ''})")
    assert placed, "the scenario placed no pod"
    assert not disagreements, f"{name}: {len(disagreements)} of {pending + placed} pods disagree:\n" + "\n".join(
        disagreements[:20])


def test_every_random_scenario_has_pending_and_placed_pods_of_several_kinds() -> None:
    """The generated scenarios exercise what they claim to: Pending and placed pods, several pool kinds."""
    pending = kinds = 0
    for seed in range(6):
        spec = random_scenario(seed, workloads=24)
        pending += sum(1 for w in spec["workloads"] if w["state"] == "pending")
        kinds = max(kinds, len({p.get("mode") for p in spec["nodePools"]}))
    assert pending >= 6
    assert kinds >= 4
