"""The engine against the simulator's demo scenario (no database): its Pending pods get the scheduler's message.

kubesim writes, for every Pending pod, the `PodScheduled=False` message the scheduler would give. We compare the
filter histogram (the PostFilter/preemption sentence is not reproduced). Two known differences in kubesim, which
are kubesim's and not the engine's:
- kubesim defaults to the old keyed taint reason (`node(s) had untolerated taint {dedicated: training}`) although
  the scenario declares v1.35, which reports `node(s) had untolerated taint(s)` (kubernetes#134740); we compare
  after mapping the keyed form to the generic one;
- kubesim computes a Pending pod's message when its workload is declared, before later workloads are placed, so
  `dra-big` keeps a message from before `shared-infer`/`dcgm-probe` filled l40s-dra-000's CPU and memory.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from catalog.feasibility import explain_pod, snapshot_from_objects
from inventory.scheduling import parse_scheduling_message
from kubesim.scenario import load_scenario


@pytest.fixture(scope="module")
def demo():
    objects = load_scenario("demo")
    by_kind = defaultdict(list)
    for obj in objects:
        by_kind[obj["kind"]].append(obj)
    snapshot = snapshot_from_objects(
        nodes=by_kind["Node"], pods=by_kind["Pod"], resource_slices=by_kind["ResourceSlice"],
        device_classes=by_kind["DeviceClass"], resource_claims=by_kind["ResourceClaim"],
        resource_claim_templates=by_kind["ResourceClaimTemplate"],
    )
    pending = {obj["metadata"]["name"]: obj for obj in by_kind["Pod"]
               if obj["status"].get("phase") == "Pending" and not obj["spec"].get("nodeName")}
    return snapshot, pending


def _kubesim_histogram(pod: dict) -> dict[str, int]:
    message = next(c["message"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    parsed = parse_scheduling_message(message)
    assert parsed.parsed
    assert parsed.total_nodes == 18  # 16 + the two a100-mig-single nodes
    return {re.sub(r"^node\(s\) had untolerated taint \{.*\}$", "node(s) had untolerated taint(s)", r.reason): r.count
            for r in parsed.reasons}


def _pod(pending: dict, prefix: str) -> list[dict]:
    found = [pod for name, pod in sorted(pending.items()) if name.startswith(prefix)]
    assert found, prefix
    return found


@pytest.mark.parametrize("prefix", ["llm-eval-xl", "detector-train"])
def test_pending_pods_get_the_scheduler_message(demo, prefix):
    snapshot, pending = demo
    for pod in _pod(pending, prefix):
        explanation = explain_pod(pod, snapshot)
        assert not explanation.schedulable
        assert explanation.histogram() == _kubesim_histogram(pod)
        assert explanation.message.startswith("0/18 nodes are available: ")


def test_llm_eval_xl_message_and_hints(demo):
    snapshot, pending = demo
    explanation = explain_pod(_pod(pending, "llm-eval-xl")[0], snapshot)
    assert explanation.message == (
        "0/18 nodes are available: 1 node(s) had untolerated taint(s), 15 node(s) didn't match Pod's node "
        "affinity/selector, 2 Insufficient nvidia.com/gpu.")
    assert ("the largest nvidia.com/gpu request placeable on one node this pod may use today is 3 (h100-000); "
            "this pod asks for 8") in explanation.hints
    assert any(h.startswith("h100-001 frees 8 nvidia.com/gpu when ml-research/llm-finetune-") for h in explanation.hints)


def test_single_strategy_slices_are_explained_as_slices(demo):
    # nvidia.com/gpu on the a100-mig-single nodes counts MIG 1g.10gb slices (14 per node, 13 free on -001): a pod
    # asking for 16 "GPUs" there is short of slices, and would not get 16 cards anyway.
    snapshot, pending = demo
    explanation = explain_pod(_pod(pending, "detector-train")[0], snapshot)
    assert next(v for v in explanation.nodes if v.name == "a100-mig-single-000").reasons == [
        "Insufficient nvidia.com/gpu"]
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "ml-research"},
             "spec": {"nodeSelector": {"kubesim.io/node-pool": "a100-mig-single"},
                      "containers": [{"name": "main", "image": "x",
                                      "resources": {"limits": {"nvidia.com/gpu": "16"}}}]}}
    hints = explain_pod(probe, snapshot).hints
    assert ("the largest nvidia.com/gpu request placeable on one node this pod may use today is 14 "
            "(a100-mig-single-000); this pod asks for 16") in hints
    assert ("on a100-mig-single-000, nvidia.com/gpu units are MIG 1g.10gb slices (single strategy), not whole cards"
            in hints)


def test_dra_big_message(demo):
    snapshot, pending = demo
    (pod,) = _pod(pending, "dra-big")
    explanation = explain_pod(pod, snapshot)
    assert explanation.histogram() == {
        "node(s) had untolerated taint(s)": 1,
        "node(s) didn't match Pod's node affinity/selector": 15,
        "Insufficient cpu": 1,  # l40s-dra-000: 33 of 47.5 cores requested by its 6 pods; dra-big wants 16
        "Insufficient memory": 1,
        "cannot allocate all claims": 1,  # l40s-dra-001: 8 GPUs wanted, 4 match, gpu-0 held by warm-spare
    }
    l40s = next(v for v in explanation.nodes if v.name == "l40s-dra-001")
    assert l40s.details == ["request gpus: 8 devices needed, 4 match the selectors, 3 free",
                            "  gpu-0: allocated to claim ml-research/warm-spare"]


def test_dra_big_matches_kubesim(demo):
    # kubesim declares pending workloads last, so their message describes the cluster with every pod placed.
    snapshot, pending = demo
    (pod,) = _pod(pending, "dra-big")
    assert explain_pod(pod, snapshot).histogram() == _kubesim_histogram(pod)


def _dra_pod(pool: str, template: str, namespace: str = "ml-research") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": namespace},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
                     "nodeSelector": {"kubesim.io/node-pool": pool},
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}}


def test_demo_dra_pools_in_awkward_states(demo):
    snapshot, _ = demo
    partial = explain_pod(_dra_pod("h100-dra-partial", "single-gpu"), snapshot)
    node = next(v for v in partial.nodes if v.name == "h100-dra-partial-000")
    assert node.reasons == ["cannot allocate all claims"]
    assert "is incomplete: 1 of 2 slices published" in node.details[0]
    # h100-dra-upd: generation 2 is current; gpu-0 is allocated, gpu-3 carries a NoSchedule taint.
    three = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": "three", "namespace": "ml-research"},
             "spec": {"spec": {"devices": {"requests": [
                 {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 3}}]}}}}
    upd = explain_pod(_dra_pod("h100-dra-upd", "three"), snapshot, extra_claim_templates=[three])
    node = next(v for v in upd.nodes if v.name == "h100-dra-upd-000")
    assert node.details[0] == "request gpus: 3 devices needed, 4 match the selectors, 2 free"
    assert "  gpu-3: device taint example.com/unhealthy=ecc:NoSchedule not tolerated" in node.details
    # MIG partitions on a100-dra-mig: the other cards still have free 1g.10gb partitions.
    mig = explain_pod(_dra_pod("a100-dra-mig", "mig-1g", namespace="ml-inference"), snapshot)
    assert mig.fitting_nodes == ["a100-dra-mig-000"]
