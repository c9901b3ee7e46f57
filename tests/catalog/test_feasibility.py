"""Feasibility engine: the kube-scheduler filter plugins and the FitError message, from documented behaviour.

References: kubernetes.io docs (Resource Management for Pods and Containers, Sidecar containers, Pod Overhead,
Taints and Tolerations, Assigning Pods to Nodes), and kube-scheduler's FitError format (kubernetes-gpu-facts 1.7).
"""

from __future__ import annotations

import pytest

from catalog.feasibility import explain_pod, snapshot_from_objects
from catalog.feasibility.resources import pod_requests
from tests.catalog.feasibility_fixtures.builders import (
    container,
    explain,
    gpu_node,
    gpu_pod,
    node,
    pod,
    verdict,
)

GPU = "nvidia.com/gpu"


# ------------------------------------------------------------------------------------------- NodeResourcesFit


def test_extended_resource_in_limits_only_requests_the_limit():
    assert pod_requests(gpu_pod(gpus=2))[0] == {GPU: 2}
    result = explain(gpu_pod(gpus=8), [gpu_node("small", gpus=4), gpu_node("big", gpus=8)])
    assert result.schedulable
    assert result.fitting_nodes == ["big"]
    assert verdict(result, "small").reasons == ["Insufficient nvidia.com/gpu"]
    assert "requested 8, free 4 of 4 allocatable" in verdict(result, "small").details[0]


def test_cpu_and_memory_limits_only_also_default_the_request():
    assert pod_requests(pod(limits={"cpu": "500m", "memory": "1Gi"}))[0] == {"cpu": 500, "memory": 2**30}


def test_explicit_request_wins_over_limit_for_cpu():
    requests, _ = pod_requests(pod(requests={"cpu": "250m"}, limits={"cpu": "2"}))
    assert requests == {"cpu": 250}


def test_init_containers_take_the_max_not_the_sum():
    spec = pod(containers=[container(requests={"cpu": "1"}), container("b", requests={"cpu": "1"})],
               init=[container("i1", requests={"cpu": "3"}), container("i2", requests={"cpu": "1"})])
    assert pod_requests(spec)[0] == {"cpu": 3000}
    result = explain(spec, [node("a", cpu="2500m"), node("b", cpu="3")])
    assert result.fitting_nodes == ["b"]
    assert verdict(result, "a").reasons == ["Insufficient cpu"]


def test_sidecars_add_to_main_containers_and_to_later_init_containers():
    # sidecar 1 cpu runs beside the main container (2) → 3; the init container after it (3) runs beside the
    # sidecar → 4; the pod needs max(3, 4) = 4.
    spec = pod(containers=[container(requests={"cpu": "2"})],
               init=[container("side", requests={"cpu": "1"}, restart_policy="Always"),
                     container("setup", requests={"cpu": "3"})])
    assert pod_requests(spec)[0] == {"cpu": 4000}
    # Sidecars only: they add up with the main containers.
    two_sidecars = pod(containers=[container(requests={"memory": "1Gi"})],
                       init=[container("s1", requests={"memory": "1Gi"}, restart_policy="Always"),
                             container("s2", requests={"memory": "2Gi"}, restart_policy="Always")])
    assert pod_requests(two_sidecars)[0] == {"memory": 4 * 2**30}
    # An init container before the sidecar does not see it.
    before = pod(containers=[container(requests={"cpu": "1"})],
                 init=[container("setup", requests={"cpu": "2"}),
                       container("side", requests={"cpu": "1"}, restart_policy="Always")])
    assert pod_requests(before)[0] == {"cpu": 2000}


def test_pod_overhead_is_added():
    spec = pod(requests={"cpu": "1"}, overhead={"cpu": "500m", "memory": "100Mi"})
    assert pod_requests(spec)[0] == {"cpu": 1500, "memory": 100 * 2**20}
    result = explain(spec, [node("exact", cpu="1"), node("roomy", cpu="2")])
    assert result.fitting_nodes == ["roomy"]
    assert verdict(result, "exact").reasons == ["Insufficient cpu"]


def test_too_many_pods_counts_bound_pods_against_allocatable_pods():
    nodes = [node("full", pods="2"), node("free", pods="3")]
    bound = [pod("a", node_name="full"), pod("b", node_name="full"), pod("c", node_name="free"),
             pod("d", node_name="free")]
    result = explain(pod(requests={"cpu": "1"}), nodes, bound)
    assert result.fitting_nodes == ["free"]
    assert verdict(result, "full").reasons == ["Too many pods"]


def test_resource_fit_reports_every_insufficient_resource_and_too_many_pods():
    nodes = [gpu_node("n", gpus=1, cpu="1", pods="1")]
    bound = [pod("x", node_name="n", requests={"cpu": "500m"})]
    result = explain(pod(requests={"cpu": "1", "memory": "1Ti"}, limits={GPU: "2"}), nodes, bound)
    assert verdict(result, "n").reasons == [
        "Too many pods", "Insufficient cpu", "Insufficient memory", "Insufficient nvidia.com/gpu"]
    assert result.message == ("0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
                              "1 Insufficient nvidia.com/gpu, 1 Too many pods.")


def test_resource_absent_on_node_is_insufficient():
    result = explain(gpu_pod(gpus=1), [node("cpu-only")])
    assert verdict(result, "cpu-only").reasons == ["Insufficient nvidia.com/gpu"]
    assert "does not offer nvidia.com/gpu" in verdict(result, "cpu-only").details[0]


def test_bound_pods_consume_but_finished_and_pending_pods_do_not():
    nodes = [gpu_node("n", gpus=8)]
    bound = [gpu_pod("run", gpus=4, node_name="n"), gpu_pod("done", gpus=4, node_name="n", phase="Succeeded"),
             gpu_pod("failed", gpus=4, node_name="n", phase="Failed"), gpu_pod("pending", gpus=4)]
    assert explain(gpu_pod(gpus=4), nodes, bound).schedulable
    result = explain(gpu_pod(gpus=5), nodes, bound)
    assert verdict(result, "n").details == ["nvidia.com/gpu: requested 5, free 4 of 8 allocatable (short by 1)"]


def test_a_request_served_by_a_generated_dra_claim_does_not_consume_the_device_plugin():
    nodes = [gpu_node("n", gpus=8)]
    dra_backed = gpu_pod("dra", gpus=4, node_name="n")
    dra_backed["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "dra-extended-resources-x7k2p",
        "requestMappings": [{"containerName": "main", "requestName": "container-0-request-0", "resourceName": GPU}]}
    assert explain(gpu_pod(gpus=8), nodes, [dra_backed]).schedulable


def test_ephemeral_storage_is_checked():
    result = explain(pod(requests={"ephemeral-storage": "200Gi"}), [node("n")])
    assert verdict(result, "n").reasons == ["Insufficient ephemeral-storage"]


# -------------------------------------------------------------------------------------------- TaintToleration

TRAINING = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "dedicated", "operator": "Exists"}, True),  # Exists ignores the value; empty effect = all
        ({"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "training"}, True),  # operator defaults to Equal
        ({"key": "dedicated", "operator": "Equal", "value": "inference"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),  # effect must match
        ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations_against_a_noschedule_taint(toleration, tolerated):
    result = explain(pod(tolerations=[toleration]), [node("n", taints=[TRAINING])])
    assert result.schedulable is tolerated
    if not tolerated:
        assert verdict(result, "n").reasons == ["node(s) had untolerated taint(s)"]
        assert verdict(result, "n").details == ["untolerated taint {dedicated: training} (dedicated=training:NoSchedule)"]


def test_noexecute_blocks_and_prefer_noschedule_does_not():
    nodes = [node("noexec", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}]),
             node("prefer", taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}])]
    result = explain(pod(), nodes)
    assert result.fitting_nodes == ["prefer"]
    assert verdict(result, "noexec").reasons == ["node(s) had untolerated taint(s)"]


# ---------------------------------------------------------------------------------------------- NodeAffinity


def _affinity_case(requirement: dict, labels: dict) -> bool:
    return explain(pod(terms=[{"matchExpressions": [requirement]}]), [node("n", labels=labels)]).schedulable


@pytest.mark.parametrize(
    ("requirement", "labels", "matches"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, {"zone": "b"}, True),
        ({"key": "zone", "operator": "In", "values": ["a"]}, {"zone": "b"}, False),
        ({"key": "zone", "operator": "In", "values": ["a"]}, {}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {"zone": "b"}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {}, True),  # absent label: NotIn matches
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, {"zone": "a"}, False),
        ({"key": "gpu", "operator": "Exists"}, {"gpu": "x"}, True),
        ({"key": "gpu", "operator": "Exists"}, {}, False),
        ({"key": "gpu", "operator": "DoesNotExist"}, {}, True),
        ({"key": "gpu", "operator": "DoesNotExist"}, {"gpu": ""}, False),
        ({"key": "mem", "operator": "Gt", "values": ["40000"]}, {"mem": "81559"}, True),
        ({"key": "mem", "operator": "Gt", "values": ["40000"]}, {"mem": "40000"}, False),
        ({"key": "mem", "operator": "Lt", "values": ["40000"]}, {"mem": "24576"}, True),
        ({"key": "mem", "operator": "Lt", "values": ["40000"]}, {"mem": "big"}, False),  # non-integer: no match
        ({"key": "mem", "operator": "Gt", "values": ["x"]}, {"mem": "1"}, False),
        ({"key": "mem", "operator": "Gt", "values": ["1"]}, {}, False),
        ({"key": "zone", "operator": "Near", "values": ["a"]}, {"zone": "a"}, False),  # unknown operator
    ],
)
def test_node_selector_requirement_operators(requirement, labels, matches):
    assert _affinity_case(requirement, labels) is matches


def test_terms_are_ored_and_expressions_anded():
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                              {"key": "gpu", "operator": "Exists"}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["c"]}]},
    ]
    nodes = [node("a-gpu", labels={"zone": "a", "gpu": "1"}), node("a-cpu", labels={"zone": "a"}),
             node("c", labels={"zone": "c"}), node("b", labels={"zone": "b", "gpu": "1"})]
    result = explain(pod(terms=terms), nodes)
    assert result.fitting_nodes == ["a-gpu", "c"]
    assert verdict(result, "a-cpu").reasons == ["node(s) didn't match Pod's node affinity/selector"]
    details = verdict(result, "a-cpu").details
    assert details[0] == "required node affinity: no nodeSelectorTerm matches"
    assert details[1] == "term 0: gpu Exists (label absent)"
    assert details[2] == "term 1: zone In [c] (node has zone=a)"


def test_empty_term_list_and_empty_term_match_nothing():
    assert not explain(pod(terms=[]), [node("n")]).schedulable
    assert not explain(pod(terms=[{}]), [node("n")]).schedulable
    assert explain(pod(terms=[{}, {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]}]),
                   [node("n")]).schedulable


def test_match_fields_metadata_name_narrows_nodes_in_prefilter():
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]
    result = explain(pod(terms=terms), [node("a"), node("b"), node("c")])
    assert result.fitting_nodes == ["b"]
    assert verdict(result, "a").reasons == ["node(s) didn't satisfy plugin(s) [NodeAffinity]"]
    full = explain(pod(terms=terms, requests={"cpu": "64"}), [node("a"), node("b"), node("c")])
    assert full.message == ("0/3 nodes are available: 1 Insufficient cpu, "
                            "2 node(s) didn't satisfy plugin(s) [NodeAffinity].")


def test_match_fields_not_in_is_a_filter():
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["b"]}]}]
    result = explain(pod(terms=terms), [node("a"), node("b")])
    assert result.fitting_nodes == ["a"]
    assert verdict(result, "b").reasons == ["node(s) didn't match Pod's node affinity/selector"]


def test_conflicting_node_name_terms_fail_in_prefilter():
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]},
                              {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]
    result = explain(pod(terms=terms), [node("a"), node("b")])
    assert result.message == "0/2 nodes are available: pod affinity terms conflict."
    assert result.nodes == []


def test_node_selector_and_affinity_are_both_required():
    terms = [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
    nodes = [node("both", labels={"pool": "a", "gpu": "1"}), node("selector-only", labels={"pool": "a"}),
             node("affinity-only", labels={"pool": "b", "gpu": "1"})]
    result = explain(pod(node_selector={"pool": "a"}, terms=terms), nodes)
    assert result.fitting_nodes == ["both"]
    assert verdict(result, "affinity-only").details == ["nodeSelector pool=a: node has pool=b"]
    assert verdict(result, "selector-only").details[0] == "required node affinity: no nodeSelectorTerm matches"


# ------------------------------------------------------------------------------- NodeName, NodeUnschedulable


def test_node_name_must_match():
    result = explain(pod(node_name="b", phase="Pending"), [node("a"), node("b")])
    assert result.fitting_nodes == ["b"]
    assert verdict(result, "a").reasons == ["node(s) didn't match the requested node name"]
    assert any("bypasses the scheduler" in note for note in result.notes)


def test_unschedulable_node_unless_tolerated():
    nodes = [node("cordoned", unschedulable=True)]
    result = explain(pod(), nodes)
    assert result.message == "0/1 nodes are available: 1 node(s) were unschedulable."
    tolerating = pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                                   "effect": "NoSchedule"}])
    assert explain(tolerating, nodes).schedulable


def test_first_failing_plugin_decides_in_scheduler_order():
    # Cordoned, tainted, mislabelled and full: only NodeUnschedulable is reported.
    everything = gpu_node("n", gpus=0, unschedulable=True, taints=[TRAINING], labels={"pool": "b"})
    result = explain(gpu_pod(gpus=1, node_selector={"pool": "a"}), [everything])
    assert verdict(result, "n").reasons == ["node(s) were unschedulable"]
    assert verdict(result, "n").plugin == "NodeUnschedulable"
    tainted = gpu_node("n", gpus=0, taints=[TRAINING], labels={"pool": "b"})
    assert verdict(explain(gpu_pod(gpus=1, node_selector={"pool": "a"}), [tainted]), "n").plugin == "TaintToleration"
    mislabelled = gpu_node("n", gpus=0, labels={"pool": "b"})
    assert verdict(explain(gpu_pod(gpus=1, node_selector={"pool": "a"}), [mislabelled]), "n").plugin == "NodeAffinity"


def test_host_port_conflict():
    web = [container(ports=[{"containerPort": 80, "hostPort": 8080}])]
    nodes = [node("busy"), node("idle")]
    result = explain(pod(containers=web), nodes, [pod("other", containers=web, node_name="busy")])
    assert result.fitting_nodes == ["idle"]
    assert verdict(result, "busy").reasons == ["node(s) didn't have free ports for the requested pod ports"]


# ------------------------------------------------------------------------------------------------- message


def test_message_histogram_is_sorted_as_strings():
    nodes = [gpu_node(f"tainted-{i:02}", taints=[TRAINING]) for i in range(10)]
    nodes += [gpu_node("small-0", gpus=2), gpu_node("small-1", gpus=2)]
    result = explain(gpu_pod(gpus=4), nodes)
    # "10 …" sorts before "2 …" because the scheduler sorts the formatted strings (sort.Strings).
    assert result.message == ("0/12 nodes are available: 10 node(s) had untolerated taint(s), "
                              "2 Insufficient nvidia.com/gpu.")
    assert result.histogram() == {"node(s) had untolerated taint(s)": 10, "Insufficient nvidia.com/gpu": 2}
    assert not result.schedulable
    assert result.fitting_nodes == []


def test_message_matches_the_documented_example():
    nodes = [gpu_node("g1", gpus=1), gpu_node("g2", gpus=1, labels={"pool": "x"}),
             gpu_node("t1", taints=[TRAINING], labels={"pool": "x"}),
             gpu_node("t2", taints=[TRAINING], labels={"pool": "x"}),
             node("c1"), node("c2")]
    result = explain(gpu_pod(gpus=2, node_selector={"pool": "x"}), nodes)
    assert result.message == ("0/6 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated "
                              "taint(s), 3 node(s) didn't match Pod's node affinity/selector.")


def test_schedulable_message_and_json_shape():
    result = explain(gpu_pod(gpus=1), [gpu_node("a"), gpu_node("b"), node("c")])
    assert result.schedulable
    assert result.message == "fits on 2 of 3 nodes (a, b)"
    data = result.as_json()
    assert data["schedulable"] is True
    assert data["fitting_nodes"] == ["a", "b"]
    assert data["nodes"][2] == {"name": "c", "fits": False, "plugin": "NodeResourcesFit",
                                "reasons": ["Insufficient nvidia.com/gpu"],
                                "details": ["nvidia.com/gpu: requested 1, the node does not offer nvidia.com/gpu"]}
    assert {"schedulable", "message", "nodes", "hints", "notes"} <= set(data)


def test_no_nodes():
    result = explain(pod(), [])
    assert result.message == "no nodes available to schedule pods"
    assert not result.schedulable


# ------------------------------------------------------------------------------------------------ tolerance


def test_malformed_objects_are_skipped_with_notes():
    nodes = [node("good"), "not a node", {"metadata": {}}, node("good"),
             {"metadata": {"name": "bad-qty"}, "status": {"allocatable": {"cpu": "lots", "pods": "10"}}}]
    pods = [None, {"spec": {"nodeName": "good"}}, pod("x", node_name="good", requests={"cpu": "abc"}),
            pod("y", node_name="ghost")]
    snapshot = snapshot_from_objects(nodes=nodes, pods=pods, resource_slices=[{}, "x", {"spec": {"pool": 3}}],
                                     device_classes=[None], resource_claims=[1], resource_claim_templates=[[]])
    assert snapshot.node_names == ["bad-qty", "good"]
    text = " | ".join(snapshot.notes)
    assert "skipped 3 malformed Node(s)" in text
    assert "allocatable cpu is not a valid quantity" in text
    assert "not in the snapshot" in text
    result = explain_pod(pod(requests={"cpu": "1"}), snapshot)
    assert result.fitting_nodes == ["good"]
    assert verdict(result, "bad-qty").reasons == ["Insufficient cpu"]


@pytest.mark.parametrize("bad", [None, "pod", {"kind": "Pod"}, {"spec": "x"}, []])
def test_explain_never_raises_for_a_malformed_pod(bad):
    result = explain_pod(bad, snapshot_from_objects(nodes=[node("n")], pods=[]))
    assert not result.schedulable
    assert "not a Pod" in result.message


def test_invalid_pod_quantities_are_noted_not_raised():
    result = explain(pod(requests={"cpu": "two"}, limits={GPU: "0.5"}), [gpu_node("n")])
    assert any("cpu is not a valid quantity" in note for note in result.notes)
    assert any("must be an integer" in note for note in result.notes)


def test_unsupported_features_are_named_in_notes():
    spec = pod()
    spec["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}
    spec["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone"}]
    spec["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    spec["spec"]["schedulingGates"] = [{"name": "wait"}]
    notes = " | ".join(explain(spec, [node("n")]).notes)
    for expected in ("podAntiAffinity", "topologySpreadConstraints", "persistent volumes", "schedulingGates"):
        assert expected in notes


def test_snapshot_is_reusable_across_explanations():
    snapshot = snapshot_from_objects(nodes=[gpu_node("n", gpus=4)], pods=[gpu_pod("x", gpus=2, node_name="n")])
    assert explain_pod(gpu_pod(gpus=2), snapshot).schedulable
    assert not explain_pod(gpu_pod(gpus=3), snapshot).schedulable
    assert explain_pod(gpu_pod(gpus=2), snapshot).schedulable


def test_pod_level_resources_replace_the_container_aggregate():
    spec = pod(requests={"cpu": "1", "memory": "1Gi"}, limits={"nvidia.com/gpu": "1"})
    spec["spec"]["resources"] = {"requests": {"cpu": "4"}, "limits": {"memory": "8Gi"}}
    assert pod_requests(spec)[0] == {"cpu": 4000, "memory": 8 * 2**30, GPU: 1}


def test_affinity_details_list_selector_and_terms_together():
    terms = [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]
    result = explain(pod(node_selector={"pool": "a"}, terms=terms), [node("n", labels={"pool": "b"})])
    assert verdict(result, "n").details == [
        "nodeSelector pool=a: node has pool=b",
        "required node affinity: no nodeSelectorTerm matches",
        "term 0: gpu Exists (label absent)",
    ]


def test_one_snapshot_serves_concurrent_explanations():
    from concurrent.futures import ThreadPoolExecutor

    nodes = [gpu_node(f"n{i}", gpus=i % 9) for i in range(60)]
    snapshot = snapshot_from_objects(nodes=nodes, pods=[gpu_pod(f"b{i}", gpus=1, node_name=f"n{i}")
                                                        for i in range(0, 60, 3)])
    pods = [gpu_pod(f"q{i}", gpus=i % 9) for i in range(40)]
    expected = [explain_pod(p, snapshot).as_json() for p in pods]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda p: explain_pod(p, snapshot).as_json(), pods))
    assert results == expected
