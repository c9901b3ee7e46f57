"""Gang feasibility: all N pods placed at once on a copy of the snapshot (catalog/feasibility/gang.py)."""

from __future__ import annotations

import pytest

from catalog.feasibility import ManifestError, scenario_snapshot
from catalog.feasibility.gang import explain_gang, gang_pods
from kubesim.scenario import load_scenario
from tests.catalog.feasibility_fixtures.builders import (
    claim,
    container,
    device,
    device_class,
    exact,
    gpu_node,
    gpu_pod,
    pod,
    resource_slice,
    snap,
    template,
)


def _job(parallelism: int, gpus: int, *, completions: int | None = None, indexed: bool = True, **spec) -> dict:
    template_pod = gpu_pod("w", gpus)
    job_spec = {"parallelism": parallelism, "template": {"metadata": {"labels": {"app": "train"}},
                                                          "spec": template_pod["spec"]}, **spec}
    if completions is not None:
        job_spec["completions"] = completions
    if indexed:
        job_spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
            "spec": job_spec}


def _fragmented() -> object:
    """Four 8-GPU nodes with 8 free cards in all, spread 2+2+2+2 — the seeds' fragmentation story."""
    nodes = [gpu_node(f"h100-00{i}") for i in range(4)]
    bound = [gpu_pod(f"busy-{i}", 6, node_name=f"h100-00{i}", phase="Running") for i in range(4)]
    return snap(nodes, bound)


def test_a_job_expands_to_parallelism_pods_capped_by_completions_with_indexes():
    pods, _, _, _ = gang_pods([_job(4, 8, completions=3)])
    assert [p.name for p in pods] == ["train-0", "train-1", "train-2"]
    assert pods[2].pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "2"
    assert pods[0].pod["metadata"]["namespace"] == "ml"


def test_jobset_training_job_identical_pods_and_pod_lists_expand():
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "llm"},
              "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": _job(3, 8)["spec"]}}]}}
    pods, _, _, _ = gang_pods([jobset])
    assert len(pods) == 6
    assert pods[0].name == "llm-workers-0-0"
    assert pods[0].role == "JobSet llm / workers-0"
    pytorch = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "pt"},
               "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": gpu_pod()["spec"]}},
                                                "Worker": {"replicas": 3, "template": {"spec": gpu_pod()["spec"]}}}}}
    assert [p.name for p in gang_pods([pytorch])[0]] == ["pt-master-0", "pt-worker-0", "pt-worker-1", "pt-worker-2"]
    assert len(gang_pods([gpu_pod("x", 8)], replicas=5)[0]) == 5
    assert len(gang_pods([gpu_pod("a"), gpu_pod("b")])[0]) == 2


@pytest.mark.parametrize(("objects", "replicas", "text"), [
    ([], None, "no Pod, Job"),
    ([{"kind": "ConfigMap"}], None, "no Pod, Job"),
    ([{"kind": "Job", "metadata": {"name": "j"}, "spec": {"parallelism": -1}}], None, "non-negative"),
    ([{"kind": "Job", "metadata": {"name": "j"}, "spec": {"parallelism": 0, "template": {"spec": {}}}}], None,
     "runs no pod"),
    ([{"kind": "Job", "metadata": {"name": "j"}, "spec": {"parallelism": 2}}], None, "no pod template"),
    ([{"kind": "Job", "metadata": {"name": "j"}, "spec": {"parallelism": 99999, "template": {"spec": {}}}}], None,
     "more than 4096"),
    ([{"kind": "Pod", "spec": {}}], 0, "positive"),
    ([{"kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": {}}}}], 3, "single Pod"),
])
def test_bad_workloads_get_a_clear_error(objects, replicas, text):
    with pytest.raises(ManifestError, match=text):
        gang_pods(objects, replicas=replicas)


def test_eight_free_gpus_spread_over_four_nodes_do_not_host_a_gang_of_one_8_gpu_pod():
    snapshot = _fragmented()
    pods, _, _, _ = gang_pods([_job(1, 8)])
    result = explain_gang(pods, snapshot)
    assert not result.schedulable
    assert result.largest == 0
    assert result.first_failure == "train-0"
    assert result.failure.message == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    assert result.message.startswith("no pod of the gang fits: 0/4 nodes")


def test_each_placement_consumes_so_the_gang_fails_where_each_pod_alone_fits():
    snapshot = _fragmented()
    pods, _, _, _ = gang_pods([_job(5, 2)])
    result = explain_gang(pods, snapshot)
    assert not result.schedulable
    assert [node for _, node in result.placements] == ["h100-000", "h100-001", "h100-002", "h100-003"]
    assert result.failed == ["train-4"]
    assert result.first_failure == "train-4"
    # the failing pod is explained on the state the four before it left
    assert result.failure.message == "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    assert result.message.startswith("only 4 of 5 pods fit at once; train-4 finds no node after the 4 before it")
    assert result.hints[0] == ("largest gang placeable now: 4 of 5 pods, on h100-000, h100-001, h100-002, "
                               "h100-003")
    # the snapshot itself is untouched: one pod alone still fits
    assert explain_gang(gang_pods([_job(1, 2)])[0], snapshot).schedulable
    assert snapshot.nodes["h100-000"].free("nvidia.com/gpu") == 2


def test_a_gang_packs_best_fit_and_keeps_whole_nodes_for_later_pods():
    nodes = [gpu_node("a"), gpu_node("b")]
    snapshot = snap(nodes, [gpu_pod("busy", 4, node_name="b", phase="Running")])
    # 4 + 8: the 4-GPU pod must go to b (best fit), leaving a whole for the 8-GPU pod
    result = explain_gang([gpu_pod("small", 4), gpu_pod("big", 8)], snapshot)
    assert result.schedulable
    assert result.placements == [("small", "b"), ("big", "a")]
    assert result.message == "all 2 pods fit at once on 2 nodes"
    assert result.as_json()["nodes_used"] == {"b": 1, "a": 1}


def test_cpu_pods_and_host_ports_are_consumed_too():
    nodes = [gpu_node("a", cpu="8")]
    result = explain_gang(gang_pods([pod("p", requests={"cpu": "3"})], replicas=3)[0], snap(nodes))
    assert result.largest == 2
    assert result.failure.message == "0/1 nodes are available: 1 Insufficient cpu."
    ported = pod("p", containers=[container(ports=[{"containerPort": 80, "hostPort": 8080}])])
    twice = explain_gang(gang_pods([ported], replicas=2)[0], snap(nodes))
    assert twice.largest == 1
    assert twice.failure.nodes[0].plugin == "NodePorts"


def test_dra_devices_picked_by_one_pod_are_taken_for_the_next():
    nodes = [gpu_node("a", gpus=0), gpu_node("b", gpus=0)]
    slices = [resource_slice(n, [device(f"gpu-{i}") for i in range(4)]) for n in ("a", "b")]
    snapshot = snap(nodes, resource_slices=slices, device_classes=[device_class()],
                    resource_claim_templates=[template("four", [exact("gpu", count=3)], namespace="ml")])
    workload = pod("w", namespace="ml", claims=[{"name": "gpu", "resourceClaimTemplateName": "four"}])
    result = explain_gang(gang_pods([workload], replicas=3)[0], snapshot)
    assert [node for _, node in result.placements] == ["a", "b"]
    assert result.failure.message == "0/2 nodes are available: 2 cannot allocate all claims."
    assert any("1 free" in line for line in result.failure.nodes[0].details)
    assert snapshot.allocated == {}


def test_a_named_claim_shared_by_the_gang_pins_every_pod_to_the_first_pods_node():
    nodes = [gpu_node("a", gpus=0, cpu="4"), gpu_node("b", gpus=0, cpu="4")]
    slices = [resource_slice(n, [device("gpu-0")]) for n in ("a", "b")]
    shared = claim("shared", [exact("gpu", count=1)], namespace="ml")
    snapshot = snap(nodes, resource_slices=slices, device_classes=[device_class()])
    workload = pod("w", namespace="ml", requests={"cpu": "3"},
                   claims=[{"name": "gpu", "resourceClaimName": "shared"}])
    result = explain_gang(gang_pods([workload, shared], replicas=2)[0], snapshot, extra_claims=[shared])
    assert result.placements == [("w-0", "a")]
    assert result.failure.message == ("0/2 nodes are available: 1 Insufficient cpu, "
                                      "1 resourceclaim not available on the node.")


def test_malformed_pods_in_a_list_fail_with_an_explanation_and_do_not_crash():
    result = explain_gang([{"kind": "Pod", "metadata": {"name": "bad"}}, gpu_pod("ok")], snap([gpu_node("a")]))
    assert result.failed == ["bad"]
    assert result.placements == [("ok", "a")]
    assert "not a Pod" in result.failure.message


def _clique_cluster() -> object:
    """Two NVLink cliques of two 8-GPU nodes (kubesim cliqueSize): free cards 8+4 in clique 0, 8+2 in clique 1."""
    busy = {"gb-001": 4, "gb-003": 6}
    spec = {"name": "cliques", "namespaces": [{"name": "ml"}],
            "nodePools": [{"name": "gb", "count": 4, "cliqueSize": 2, "cpu": 192, "memory": "2Ti",
                           "gpu": {"model": "NVIDIA-H100-80GB-HBM3", "perNode": 8}}],
            "workloads": [{"name": f"busy-{node[-1]}", "namespace": "ml", "pool": "gb", "cpu": 4, "memory": "8Gi",
                           "nodeSelector": {"kubernetes.io/hostname": node}, "resources": {"nvidia.com/gpu": gpus}}
                          for node, gpus in busy.items()]}
    return scenario_snapshot(load_scenario(spec))


def test_a_gang_confined_to_one_nvlink_clique_says_which_domain_comes_closest_and_what_frees_it():
    snapshot = _clique_cluster()
    cliques = sorted({node.labels["nvidia.com/gpu.clique"] for node in snapshot.nodes.values()})
    assert len(cliques) == 2
    job = _job(2, 8)
    assert explain_gang(gang_pods([job])[0], snapshot).schedulable  # anywhere: gb-000 and gb-002
    job["spec"]["template"]["metadata"]["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": "nvidia.com/gpu.clique"}
    result = explain_gang(gang_pods([job])[0], snapshot)
    assert not result.schedulable
    assert result.topology == "nvidia.com/gpu.clique"
    assert result.domains == {cliques[0]: 1, cliques[1]: 1}
    assert result.domain == cliques[0]  # ties: the smaller domain, then the first value
    assert result.message.startswith(f"no nvidia.com/gpu.clique domain holds all 2 pods at once (2 domains); the "
                                     f"closest, nvidia.com/gpu.clique={cliques[0]}, holds 1: only 1 of 2 pods")
    assert "0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in result.message  # within the clique
    assert result.hints[0] == f"pods each nvidia.com/gpu.clique domain holds now: {cliques[0]}: 1, {cliques[1]}: 1"
    assert any(h.startswith("train-1: gb-001 frees 4 nvidia.com/gpu when ml/busy-1") for h in result.hints)
    # the default scheduler's way: required pod affinity to the Job's own pods on the clique label
    del job["spec"]["template"]["metadata"]["annotations"]
    job["spec"]["template"]["spec"]["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "train"}}, "topologyKey": "nvidia.com/gpu.clique"}]}}
    assert explain_gang(gang_pods([job])[0], snapshot).topology == "nvidia.com/gpu.clique"
    # a 2x4 gang fits in either clique: the one it packs tightest (clique 1: both pods on gb-002, 10 cards free)
    small = explain_gang(gang_pods([_job(2, 4)])[0], snapshot, topology="nvidia.com/gpu.clique")
    assert small.schedulable
    assert small.domain == cliques[1]
    assert small.message == (f"all 2 pods fit at once on 1 node, all in nvidia.com/gpu.clique={cliques[1]} "
                             "(2 of 2 domains can hold it)")
    assert small.as_json()["topology"] == {"key": "nvidia.com/gpu.clique", "domain": cliques[1],
                                           "domains": {cliques[0]: 2, cliques[1]: 2}}


def test_a_topology_label_no_node_carries_fails_clearly():
    result = explain_gang(gang_pods([_job(2, 1)])[0], _fragmented(), topology="example.com/rack")
    assert not result.schedulable
    assert result.message == "no node carries the label example.com/rack: the gang's topology constraint cannot be met"


def test_a_generated_pcie_root_claim_is_blocked_by_topology_and_says_which_root_freeing_would_open():
    # kubesim: one 8-GPU DRA node, GPUs 0-3 behind one PCIe root and 4-7 behind another; claims hold gpu-0..2 and
    # gpu-4, so 4 cards are free but no root has 4 of them.
    from catalog.generator import WorkloadSpec, generate
    from catalog.models import Offering

    spec = {"name": "roots", "namespaces": [{"name": "ml"}],
            "nodePools": [{"name": "l40s", "count": 1, "mode": "dra", "cpu": 96, "memory": "768Gi",
                           "gpu": {"model": "NVIDIA-L40S", "perNode": 8, "pcieRoots": 2,
                                   "driverVersion": "570.124.06", "cudaDriver": "12.8"}}],
            "deviceClasses": [{"name": "gpu.nvidia.com", "match": {"driver": "gpu.nvidia.com",
                                                                   "attributes": {"type": "gpu"}}}],
            "claimTemplates": [
                {"name": "three", "namespace": "ml", "requests": [{"name": "g", "deviceClassName": "gpu.nvidia.com",
                                                                   "count": 3}]},
                {"name": "fifth", "namespace": "ml", "requests": [{"name": "g", "deviceClassName": "gpu.nvidia.com",
                                                                   "match": {"attributes": {"index": 4}}}]}],
            "workloads": [{"name": "a", "namespace": "ml", "pool": "l40s", "cpu": 4, "memory": "8Gi",
                           "claimTemplate": "three"},
                          {"name": "b", "namespace": "ml", "pool": "l40s", "cpu": 4, "memory": "8Gi",
                           "claimTemplate": "fifth"}]}
    snapshot = scenario_snapshot(load_scenario(spec))
    offering = Offering(slug="l40s", name="L40S", unit_kind="dra-device", device_class_name="gpu.nvidia.com")

    def explain(topology: str):
        generated = generate(WorkloadSpec(offering=offering, namespace="ml", name="ddp", shape="claim-template-job",
                                          count=4, parallelism=1, topology=topology))
        pods, claims, templates, _ = gang_pods(generated.documents)
        return explain_gang(pods, snapshot, extra_claims=claims, extra_claim_templates=templates)

    assert explain("").schedulable  # four free cards, anywhere on the node
    blocked = explain("pcie-root")
    assert not blocked.schedulable
    (node,) = blocked.failure.nodes
    root = "resource.kubernetes.io/pcieRoot"
    assert node.details == [
        f"constraint matchAttribute {root}: no value is shared by 4 free matching devices (pci0000:97: 3, "
        f"pci0000:15: 1); {root}=pci0000:97 would satisfy it if its devices were freed (held by 1 claim)"]
    assert any(h.startswith(f"ddp-0: constraint matchAttribute {root} blocks 1 node; 1 of them would satisfy it")
               for h in blocked.hints)


def test_many_small_domains_are_prefiltered_and_still_give_the_same_answer():
    # 20 one-node domains (kubernetes.io/hostname): only n-03 (8 free) and n-07 (4 free) have room
    nodes = [gpu_node(f"n-{i:02d}", labels={"kubernetes.io/hostname": f"n-{i:02d}"}) for i in range(20)]
    busy = [gpu_pod(f"busy-{i}", 8 if i not in (3, 7) else 4, node_name=f"n-{i:02d}", phase="Running")
            for i in range(20) if i != 3]
    snapshot = snap(nodes, busy)
    fits = explain_gang(gang_pods([_job(2, 4)])[0], snapshot, topology="kubernetes.io/hostname")
    assert fits.schedulable
    assert fits.domain == "n-03"
    assert fits.domains["n-07"] == 1
    assert fits.domains["n-00"] == 0
    too_big = explain_gang(gang_pods([_job(2, 8)])[0], snapshot, topology="kubernetes.io/hostname")
    assert not too_big.schedulable
    assert too_big.domain == "n-03"
    assert too_big.message.startswith("no kubernetes.io/hostname domain holds all 2 pods at once (20 domains); the "
                                      "closest, kubernetes.io/hostname=n-03, holds 1")
    assert too_big.failure.message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


# ----------------------------------------------------------------------------------------------------------------
# Kueue's topology-aware scheduling: the levels of a Topology (widest first)
# ----------------------------------------------------------------------------------------------------------------
BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
LEVELS = {"dc": [BLOCK, RACK, HOST]}


def _racks() -> object:
    """Five 8-GPU nodes, free cards a 4, b 4 (rack r1), c 2, d 4 (rack r2) in block b1; e 4 (rack r3) in block b2:
    no node holds two 4-GPU pods, rack r1 holds two, block b1 three, the cluster four."""
    where = {"a": ("r1", "b1", 4), "b": ("r1", "b1", 4), "c": ("r2", "b1", 6), "d": ("r2", "b1", 4),
             "e": ("r3", "b2", 4)}
    nodes = [gpu_node(name, labels={RACK: rack, BLOCK: block}) for name, (rack, block, _) in where.items()]
    bound = [gpu_pod(f"busy-{name}", busy, node_name=name, phase="Running") for name, (_, _, busy) in where.items()]
    return snap(nodes, bound)


def _kueue_job(parallelism: int, annotation: str, level: str) -> dict:
    job = _job(parallelism, 4)
    job["spec"]["template"]["metadata"]["annotations"] = {f"kueue.x-k8s.io/podset-{annotation}-topology": level}
    return job


@pytest.mark.parametrize(("parallelism", "tried", "landed", "said"), [
    (2, [HOST, RACK], (RACK, "r1"), f"fits in one {HOST}? no; in one {RACK}=r1: yes — all 2 pods fit at once on 2 nodes, "
                                    f"all in {RACK}=r1 (1 of 3 domains can hold it)"),
    (3, [HOST, RACK, BLOCK], (BLOCK, "b1"), f"fits in one {HOST}? no; in one {RACK}? no; in one {BLOCK}=b1: yes — all 3 "
                                            f"pods fit at once on 3 nodes, all in {BLOCK}=b1 (1 of 2 domains can hold it)"),
    (4, [HOST, RACK, BLOCK, ""], ("", ""), f"fits in one {HOST}? no; in one {RACK}? no; in one {BLOCK}? no; without a "
                                           "common domain: yes — all 4 pods fit at once on 4 nodes"),
])
def test_preferred_topology_lands_at_the_narrowest_level_that_holds_the_gang(parallelism, tried, landed, said):
    result = explain_gang(gang_pods([_kueue_job(parallelism, "preferred", HOST)])[0], _racks(), topology_levels=LEVELS)
    assert result.schedulable
    assert (result.topology, result.domain) == landed
    assert result.tried == tried
    assert result.message == f"preferred topology {HOST}: {said}"
    assert f"levels from Kueue Topology dc: {BLOCK} > {RACK} > {HOST} (widest first)" in result.notes
    assert result.as_json()["topology"]["levels_tried"] == tried


def test_preferred_topology_starts_at_its_level_and_says_when_nothing_holds_the_gang():
    # asked at the rack level: the hostname level below it is not tried
    rack = explain_gang(gang_pods([_kueue_job(3, "preferred", RACK)])[0], _racks(), topology_levels=LEVELS)
    assert (rack.tried, rack.topology, rack.domain) == ([RACK, BLOCK], BLOCK, "b1")
    too_big = explain_gang(gang_pods([_kueue_job(5, "preferred", RACK)])[0], _racks(), topology_levels=LEVELS)
    assert not too_big.schedulable
    assert too_big.tried == [RACK, BLOCK, ""]
    assert too_big.message.startswith(f"preferred topology {RACK}: fits in one {RACK}? no; in one {BLOCK}? no; without "
                                      "a common domain: no — only 4 of 5 pods fit at once")


def test_preferred_topology_without_known_levels_tries_its_level_alone_and_says_so():
    job = _kueue_job(3, "preferred", HOST)
    offline = explain_gang(gang_pods([job])[0], _racks())
    assert offline.tried == [HOST, ""]
    assert offline.schedulable
    assert offline.topology == ""
    assert any(n.startswith("the cluster's Kueue Topologies are not known here") for n in offline.notes)
    unknown = explain_gang(gang_pods([_kueue_job(2, "preferred", "example.com/row")])[0], _racks(),
                           topology_levels=LEVELS)
    assert unknown.tried == ["example.com/row", ""]
    assert (f"kueue.x-k8s.io/podset-preferred-topology: example.com/row is not a level of any Kueue Topology of this "
            f"cluster (dc ({BLOCK} > {RACK} > {HOST})): Kueue would not admit this workload") in unknown.notes


def test_required_topology_is_unchanged_by_the_levels_and_an_unknown_level_is_noted():
    job = _kueue_job(3, "required", RACK)
    alone = explain_gang(gang_pods([job])[0], _racks())
    with_levels = explain_gang(gang_pods([job])[0], _racks(), topology_levels=LEVELS)
    assert not with_levels.schedulable  # no wider level is tried: the requirement is the rack
    assert with_levels.as_json() == alone.as_json()
    assert with_levels.tried == []
    assert with_levels.preferred == ""
    assert "preferred" not in with_levels.as_json()["topology"]
    none_known = explain_gang(gang_pods([job])[0], _racks(), topology_levels={})
    assert none_known.message == alone.message
    assert none_known.notes[-1] == (f"kueue.x-k8s.io/podset-required-topology: {RACK} is not a level of any Kueue "
                                    "Topology of this cluster (it has none): Kueue would not admit this workload")
