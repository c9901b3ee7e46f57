"""Feasibility hints: what would change the outcome (tolerations, selectors, capacity, who holds the units)."""

from __future__ import annotations

from tests.catalog.feasibility_fixtures.builders import explain, gpu_node, gpu_pod, node

TRAINING = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}


def test_fit_hint_lists_the_fitting_nodes():
    result = explain(gpu_pod(gpus=1), [gpu_node("a"), gpu_node("b"), node("c")])
    assert result.hints == ["2 nodes of 3 fit now: a, b"]


def test_toleration_hint_names_the_taint_blocking_most_nodes():
    nodes = [gpu_node("t1", taints=[TRAINING]), gpu_node("t2", taints=[TRAINING]),
             gpu_node("o1", taints=[{"key": "other", "effect": "NoExecute"}]), gpu_node("full", gpus=0)]
    result = explain(gpu_pod(gpus=4), nodes)
    assert not result.schedulable
    assert ("taint dedicated=training:NoSchedule blocks 2 nodes; with a toleration for "
            "dedicated=training:NoSchedule, 2 more nodes would fit: t1, t2") in result.hints


def test_toleration_hint_says_when_a_toleration_is_not_enough():
    nodes = [gpu_node("t1", gpus=2, taints=[TRAINING])]
    result = explain(gpu_pod(gpus=4), nodes)
    assert ("taint dedicated=training:NoSchedule blocks 1 node; with a toleration for "
            "dedicated=training:NoSchedule alone is not enough: that node then fails on "
            "1 Insufficient nvidia.com/gpu") in result.hints


def test_selector_hint_names_the_selector_blocking_most_nodes():
    nodes = [gpu_node("a1", gpus=0, labels={"pool": "a"}), gpu_node("b1", labels={"pool": "b"}),
             gpu_node("b2", labels={"pool": "b"}), gpu_node("b3", gpus=1, labels={"pool": "b"})]
    result = explain(gpu_pod(gpus=4, node_selector={"pool": "a"}), nodes)
    assert ("nodeSelector pool=a excludes 3 nodes; without nodeSelector pool=a, 2 more nodes would fit: b1, b2"
            in result.hints)


def test_selector_hint_for_required_node_affinity():
    terms = [{"matchExpressions": [{"key": "gpu.memory", "operator": "Gt", "values": ["40000"]}]}]
    nodes = [gpu_node("small", labels={"gpu.memory": "24576"})]
    result = explain(gpu_pod(gpus=1, terms=terms), nodes)
    assert ("the required node affinity excludes 1 node; without the required node affinity, 1 more node would "
            "fit: small") in result.hints


def test_largest_placeable_request_on_usable_nodes():
    nodes = [gpu_node("a", gpus=8), gpu_node("b", gpus=8), gpu_node("tainted", gpus=8, taints=[TRAINING])]
    bound = [gpu_pod("x", gpus=6, node_name="a"), gpu_pod("y", gpus=4, node_name="b")]
    result = explain(gpu_pod(gpus=8), nodes, bound)
    assert ("the largest nvidia.com/gpu request placeable on one node this pod may use today is 4 (b); "
            "this pod asks for 8") in result.hints


def test_holders_hint_names_the_pods_on_the_nearest_fit():
    nodes = [gpu_node("h100-000", gpus=7), gpu_node("h100-001", gpus=8)]
    bound = [
        gpu_pod("llm-finetune", namespace="ml-research", gpus=8, node_name="h100-001", owner=("Job", "llm-finetune"),
                deadline=86400),
        gpu_pod("a", gpus=2, node_name="h100-000"), gpu_pod("b", gpus=2, node_name="h100-000"),
    ]
    result = explain(gpu_pod(gpus=8), nodes, bound)
    # h100-000 has only 7 allocatable: it can never host 8; h100-001 needs one pod to finish.
    assert ("h100-001 frees 8 nvidia.com/gpu when ml-research/llm-finetune (Job llm-finetune, "
            "activeDeadlineSeconds 86400) finishes") in result.hints


def test_holders_hint_prefers_the_node_needing_the_fewest_pods_to_finish():
    nodes = [gpu_node("many"), gpu_node("one")]
    bound = [gpu_pod(f"small-{i}", gpus=1, node_name="many") for i in range(8)]
    bound.append(gpu_pod("big", gpus=8, node_name="one"))
    result = explain(gpu_pod(gpus=8), nodes, bound)
    assert "one frees 8 nvidia.com/gpu when default/big finishes" in result.hints


def test_hint_when_no_node_is_big_enough():
    result = explain(gpu_pod(gpus=16), [gpu_node("a"), gpu_node("b")])
    assert ("no node this pod may use has 16 allocatable nvidia.com/gpu (the most is 8 on b): it cannot fit even "
            "on an empty node") in result.hints


def test_shared_units_are_called_out():
    labels = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    result = explain(gpu_pod(gpus=4), [gpu_node("t4", gpus=16, labels=labels)])
    assert result.schedulable
    assert ("on t4, nvidia.com/gpu units are time-slicing replicas (4 per physical GPU), not whole cards"
            in result.hints)


SLICED = {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
H100_POOL = [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}]


def test_a_whole_card_pod_is_never_told_to_drop_its_affinity_for_shared_units():
    nodes = [gpu_node("h100-a", gpus=2, labels={"pool": "h100"}),
             gpu_node("ts-a", gpus=32, labels={"pool": "shared", **SLICED}),
             gpu_node("ts-b", gpus=32, labels={"pool": "shared", **SLICED})]
    result = explain(gpu_pod(gpus=4, terms=H100_POOL), nodes)
    assert not result.schedulable
    assert ("the required node affinity excludes 2 nodes; without the required node affinity, only 2 nodes selling "
            "nvidia.com/gpu as time-slicing/MPS replicas would take it (ts-a, ts-b), not whole cards: keep it"
            in result.hints)
    assert not any("would fit" in hint for hint in result.hints), result.hints


def test_a_whole_card_pod_hears_only_of_whole_card_nodes_outside_its_affinity():
    nodes = [gpu_node("h100-a", gpus=2, labels={"pool": "h100"}), gpu_node("a100-a", labels={"pool": "a100"}),
             gpu_node("ts-a", gpus=32, labels={"pool": "shared", **SLICED})]
    result = explain(gpu_pod(gpus=4, terms=H100_POOL), nodes)
    assert ("the required node affinity excludes 2 nodes; without the required node affinity, 1 more node would "
            "fit: a100-a") in result.hints


def test_a_pod_pinned_to_shared_units_still_hears_of_them():
    nodes = [gpu_node("ts-a", gpus=1, labels={"pool": "shared", **SLICED}),
             gpu_node("ts-b", gpus=32, labels={"pool": "other", **SLICED})]
    terms = [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["shared"]}]}]
    result = explain(gpu_pod(gpus=4, terms=terms), nodes)
    assert ("the required node affinity excludes 1 node; without the required node affinity, 1 more node would "
            "fit: ts-b (all of them sell nvidia.com/gpu as time-slicing/MPS replicas, not whole cards)") in result.hints
