"""One model of Kubernetes semantics (inventory.k8s.semantics), held to one answer everywhere it is used.

Hypothesis feeds random quantities, pods, node selectors and tolerations to every caller — the sync's extraction
and pod stages, the feasibility explainer, the validator, the CEL quantity library, the catalog's capacity — and
requires the same answer from all of them, and the answer of a literal transcription of the upstream rule written
here as the oracle (the official Python client's quantity parser is a second, independent oracle).
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as client_parse_quantity

from catalog.cel import parse_quantity_strict
from catalog.feasibility import explain_pod, snapshot_from_objects
from catalog.feasibility.reasons import REASON_AFFINITY, REASON_PREFILTER_AFFINITY, REASON_TAINT
from catalog.feasibility.resources import pod_requests as feasibility_requests
from catalog.validation.objects import pod_resource_totals
from inventory.extract import extract_row
from inventory.k8s.semantics import (
    MAX_QUANTITY,
    QuantityError,
    effective_limits,
    format_quantity,
    is_best_effort,
    is_extended_resource,
    limit_range_defaults,
    node_selector_matches,
    parse_quantity,
    pod_resources,
    quantity_or_none,
    quota_scope_problem,
    quota_scope_text,
    scheduler_amount,
    scope_matches_pod,
    toleration_tolerates,
    untolerated_taints,
    with_limit_range_defaults,
)
from inventory.podstatus import pod_extended_requests

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# ------------------------------------------------------------------------------------------------ quantities

BINARY = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
DECIMAL = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E"]

numbers = st.one_of(
    st.from_regex(r"\d{1,12}", fullmatch=True),
    st.from_regex(r"\d{1,8}\.\d{0,6}", fullmatch=True),
    st.from_regex(r"\.\d{1,6}", fullmatch=True),
)
suffixes = st.one_of(st.sampled_from(BINARY + DECIMAL),
                     st.builds(lambda e, sign: f"e{sign}{e}", st.integers(0, 25), st.sampled_from(["", "+", "-"])),
                     st.builds(lambda e: f"E{e}", st.integers(0, 25)))
quantities = st.builds(lambda sign, number, suffix: f"{sign}{number}{suffix}", st.sampled_from(["", "+", "-"]),
                       numbers, suffixes)


def _nano_up(value: Decimal) -> Fraction:
    exact = Fraction(value)
    if exact == 0:
        return exact
    magnitude = Fraction(math.ceil(abs(exact) * 10**9), 10**9)
    return magnitude if exact > 0 else -magnitude


@SETTINGS
@given(quantities)
def test_every_quantity_parser_agrees_with_the_official_client(text: str) -> None:
    value = parse_quantity(text)
    expected = _nano_up(client_parse_quantity(text))
    if any(text.endswith(suffix) for suffix in BINARY):
        expected = max(min(expected, MAX_QUANTITY), -MAX_QUANTITY)  # upstream caps binary SI only
    assert value == expected
    assert Fraction(parse_quantity_strict(text)) == value  # the CEL quantity library
    assert quantity_or_none(text) == value  # the validator
    assert scheduler_amount("cpu", text) == math.ceil(value * 1000)
    assert scheduler_amount("memory", text) == math.ceil(value)
    assert parse_quantity(format_quantity(value)) == value  # canonical text round-trips


@SETTINGS
@given(st.text(max_size=12))
def test_text_outside_the_grammar_is_refused_by_every_parser(text: str) -> None:
    try:
        parse_quantity(text)
    except QuantityError:
        assert quantity_or_none(text) is None
        with pytest.raises(ValueError, match="quantity"):
            parse_quantity_strict(text)
    else:
        assert Fraction(parse_quantity_strict(text)) == parse_quantity(text)


@pytest.mark.parametrize(("text", "expected"), [
    ("1", Fraction(1)), ("1.", Fraction(1)), (".5", Fraction(1, 2)), ("+3", Fraction(3)), ("-1", Fraction(-1)),
    ("12e-1", Fraction(6, 5)), ("1E3", Fraction(1000)), ("500m", Fraction(1, 2)), ("1n", Fraction(1, 10**9)),
    ("5u", Fraction(5, 10**6)), ("0.1n", Fraction(1, 10**9)), ("-0.1n", Fraction(-1, 10**9)), ("1Ei", Fraction(2**60)),
    ("9999999999999999999Ei", MAX_QUANTITY), ("99999999999999999999G", Fraction(99999999999999999999 * 10**9)),
    ("0e99999", Fraction(0)), (4, Fraction(4)), (0.5, Fraction(1, 2)),
])
def test_quantities(text: Any, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", " 1", "1 ", ".", "1K", "1ki", "Gi", "1e", "1e3.5", "--1", "1Mi3", "NaN",
                                  "1e99999", True, None, [], float("nan"), float("inf")])
def test_not_quantities(text: Any) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(("value", "binary", "text"), [
    (Fraction(1, 2), False, "500m"), (Fraction(1500), False, "1500"), (Fraction(2000), False, "2k"),
    (Fraction(1536 * 2**20), True, "1536Mi"), (Fraction(80 * 2**30), True, "80Gi"), (Fraction(1000), True, "1000"),
    (Fraction(-3, 1000), False, "-3m"), (Fraction(0), True, "0"),
])
def test_canonical_text(value: Fraction, binary: bool, text: str) -> None:
    assert format_quantity(value, binary=binary) == text


# ------------------------------------------------------------------------------------------------ pod requests

RESOURCES = ["cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb",
             "example.com/fpga", "deviceclass.resource.kubernetes.io/gpu.example.com"]
amounts = st.one_of(st.sampled_from(["0", "1", "2", "4", "500m", "1.5", "16Gi", "-1", "bad", "1e3", "3"]),
                    st.integers(0, 8))


@st.composite
def containers(draw: Any, prefix: str) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    for field_name in ("requests", "limits"):
        chosen = draw(st.dictionaries(st.sampled_from(RESOURCES), amounts, max_size=3))
        if chosen:
            resources[field_name] = chosen
    container: dict[str, Any] = {"name": f"{prefix}-{draw(st.integers(0, 99))}", "image": "x:1",
                                 "resources": resources}
    return container


@st.composite
def pods(draw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(containers("main"), min_size=1, max_size=3))}
    inits = draw(st.lists(containers("init"), max_size=3))
    for init in inits:
        if draw(st.booleans()):
            init["restartPolicy"] = "Always"
    if inits:
        spec["initContainers"] = inits
    if draw(st.booleans()):
        spec["overhead"] = draw(st.dictionaries(st.sampled_from(RESOURCES), amounts, max_size=2))
    if draw(st.booleans()):
        spec["resources"] = {"requests": draw(st.dictionaries(st.sampled_from(["cpu", "memory"]), amounts,
                                                              max_size=2))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": spec, "status": {"phase": "Pending"}}


def _oracle_amount(name: str, value: Any) -> Fraction | None:
    """A quantity as the API server keeps it; None where the request rule skips it (malformed, negative, or a
    fractional extended resource)."""
    amount = quantity_or_none(value)
    if amount is None or amount < 0 or (is_extended_resource(name) and amount.denominator != 1):
        return None
    return amount


def _oracle_container(container: dict[str, Any]) -> dict[str, Fraction]:
    """component-helpers: a container requests its requests; a resource with only a limit requests the limit."""
    resources = container.get("resources", {})
    out: dict[str, Fraction] = {}
    for name, value in resources.get("limits", {}).items():
        amount = _oracle_amount(name, value)
        if amount is not None and name not in resources.get("requests", {}):
            out[name] = amount
    for name, value in resources.get("requests", {}).items():
        amount = _oracle_amount(name, value)
        if amount is not None:
            out[name] = amount
    return out


def _oracle_requests(pod: dict[str, Any]) -> dict[str, Fraction]:
    """`resource.PodRequests`, transcribed: AggregateContainerRequests, pod-level resources, then overhead."""
    spec = pod["spec"]
    reqs: dict[str, Fraction] = {}
    for container in spec["containers"]:
        for name, amount in _oracle_container(container).items():
            reqs[name] = reqs.get(name, Fraction(0)) + amount
    restartable: dict[str, Fraction] = {}
    init_reqs: dict[str, Fraction] = {}
    for container in spec.get("initContainers", []):
        own = _oracle_container(container)
        if container.get("restartPolicy") == "Always":
            for name, amount in own.items():
                reqs[name] = reqs.get(name, Fraction(0)) + amount
                restartable[name] = restartable.get(name, Fraction(0)) + amount
            current = dict(restartable)
        else:
            current = dict(restartable)
            for name, amount in own.items():
                current[name] = current.get(name, Fraction(0)) + amount
        for name, amount in current.items():
            init_reqs[name] = max(init_reqs.get(name, Fraction(0)), amount)
    for name, amount in init_reqs.items():
        reqs[name] = max(reqs.get(name, Fraction(0)), amount)
    for name, value in spec.get("resources", {}).get("requests", {}).items():
        amount = _oracle_amount(name, value)
        if amount is not None:
            reqs[name] = amount
    for name, value in spec.get("overhead", {}).items():
        amount = _oracle_amount(name, value)
        if amount is not None:
            reqs[name] = reqs.get(name, Fraction(0)) + amount
    return {name: amount for name, amount in reqs.items() if amount > 0}


@pytest.mark.slow  # 300 generated pods through every caller (7 s)
@SETTINGS
@given(pods())
def test_every_caller_computes_the_same_pod_requests(pod: dict[str, Any]) -> None:
    expected = _oracle_requests(pod)
    assert dict(pod_resources(pod).requests) == expected
    # The validator's quota layer (exact), the explainer (the scheduler's integers), the sync (extended units).
    assert pod_resource_totals(pod["spec"])[0] == expected
    integers = {name: math.ceil(amount * 1000) if name == "cpu" else math.ceil(amount)
                for name, amount in expected.items()}
    assert feasibility_requests(pod)[0] == integers
    extended = {name: int(amount) for name, amount in expected.items() if is_extended_resource(name)}
    assert pod_extended_requests(pod) == extended
    assert extract_row("pods", pod)["extended_requests"] == extended


# ------------------------------------------------------------------------------------------------ node affinity

LABEL_KEYS = ["pool", "gpu.memory", "zone", "bad key!", "example.com/tier"]
LABEL_VALUES = ["a", "b", "80", "120", "not valid!", "", "-1"]
labels = st.dictionaries(st.sampled_from(["pool", "gpu.memory", "zone", "example.com/tier"]),
                         st.sampled_from(["a", "b", "80", "120", "-1", ""]), max_size=4)
requirements = st.fixed_dictionaries({
    "key": st.sampled_from(LABEL_KEYS),
    "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"]),
}, optional={"values": st.lists(st.sampled_from(LABEL_VALUES), max_size=3)})
fields = st.fixed_dictionaries({
    "key": st.sampled_from(["metadata.name", "metadata.namespace"]),
    "operator": st.sampled_from(["In", "NotIn", "Exists"]),
    "values": st.lists(st.sampled_from(["n1", "n2"]), max_size=2),
})
terms = st.fixed_dictionaries({}, optional={"matchExpressions": st.lists(requirements, max_size=3),
                                            "matchFields": st.lists(fields, max_size=2)})


def _pod_with(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "x:1"}], **spec}}


def _node(name: str, node_labels: dict[str, str], taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": node_labels},
            "spec": {"taints": taints or []}, "status": {"allocatable": allocatable, "capacity": allocatable}}


@SETTINGS
@given(labels, st.lists(terms, max_size=3))
def test_the_explainer_and_the_matcher_agree_on_node_affinity(node_labels: dict[str, str],
                                                             node_terms: list[dict[str, Any]]) -> None:
    selector = {"nodeSelectorTerms": node_terms}
    matches = node_selector_matches(selector, node_labels, "n1")
    pod = _pod_with({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}})
    explanation = explain_pod(pod, snapshot_from_objects(nodes=[_node("n1", node_labels)], pods=[]))
    assert explanation.schedulable == matches
    if not matches and explanation.nodes:
        assert explanation.nodes[0].reasons[0] in (REASON_AFFINITY, REASON_PREFILTER_AFFINITY)


def test_a_term_with_an_invalid_value_matches_nothing_even_a_notin_that_would_hold() -> None:
    bad = {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["not valid!"]}]}
    assert not node_selector_matches({"nodeSelectorTerms": [bad]}, {"pool": "a"}, "n1")
    good = {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["b"]}]}
    assert node_selector_matches({"nodeSelectorTerms": [bad, good]}, {"pool": "a"}, "n1")  # terms are ORed


def test_match_fields_reasons_are_the_schedulers() -> None:
    """A node the NodeAffinity PreFilter leaves out (`metadata.name In` in every term) is reported as kube-scheduler
    reports absent nodes: "didn't satisfy plugin(s) [NodeAffinity]" (seen in real FailedScheduling events); a
    `matchFields` mismatch found by the Filter itself (NotIn, or a term without a name pin) is the node-affinity
    reason."""
    nodes = [_node("n1", {}), _node("n2", {})]
    pinned = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
    pod = _pod_with({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pinned}}})
    explanation = explain_pod(pod, snapshot_from_objects(nodes=nodes, pods=[]))
    assert explanation.fitting_nodes == ["n1"]
    assert next(n for n in explanation.nodes if n.name == "n2").reasons == [REASON_PREFILTER_AFFINITY]
    excluded = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "NotIn",
                                                        "values": ["n2"]}]}]}
    pod = _pod_with({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": excluded}}})
    explanation = explain_pod(pod, snapshot_from_objects(nodes=nodes, pods=[]))
    assert next(n for n in explanation.nodes if n.name == "n2").reasons == [REASON_AFFINITY]
    assert explanation.message == "fits on 1 of 2 nodes (n1)"


# ------------------------------------------------------------------------------------------------ tolerations

taints = st.fixed_dictionaries({
    "key": st.sampled_from(["dedicated", "gpu", "example.com/priority"]),
    "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
}, optional={"value": st.sampled_from(["h100", "5", "10", "0950", "x"])})
tolerations = st.fixed_dictionaries({}, optional={
    "key": st.sampled_from(["dedicated", "gpu", "example.com/priority", ""]),
    "operator": st.sampled_from(["Equal", "Exists", "Lt", "Gt"]),
    "value": st.sampled_from(["h100", "5", "10", "0950", ""]),
    "effect": st.sampled_from(["NoSchedule", "NoExecute", ""]),
})


@SETTINGS
@given(st.lists(taints, min_size=1, max_size=3), st.lists(tolerations, max_size=3),
       st.sampled_from(["v1.34.2", "v1.35.0"]))
def test_the_explainer_and_the_capacity_agree_on_tolerations(node_taints: list[dict[str, Any]],
                                                             pod_tolerations: list[dict[str, Any]],
                                                             version: str) -> None:
    comparisons = version.startswith("v1.35")
    blocking = untolerated_taints(node_taints, pod_tolerations, comparisons=comparisons)
    snapshot = snapshot_from_objects(nodes=[_node("n1", {}, node_taints)], pods=[],
                                     kubernetes_version=(1, 35) if comparisons else (1, 34))
    explanation = explain_pod(_pod_with({"tolerations": pod_tolerations}), snapshot)
    assert explanation.schedulable == (not blocking)
    if blocking:
        assert explanation.nodes[0].reasons == [REASON_TAINT]


@pytest.mark.parametrize(("operator", "value", "taint_value", "expected"), [
    ("Lt", "10", "5", True), ("Lt", "10", "10", False), ("Gt", "10", "11", True), ("Gt", "10", "9", False),
    ("Lt", "10", "0950", False),  # not a decimal integer (leading zero): never tolerated
    ("Gt", "x", "11", False),
])
def test_numeric_toleration_operators(operator: str, value: str, taint_value: str, expected: bool) -> None:
    toleration = {"key": "gpu", "operator": operator, "value": value, "effect": "NoSchedule"}
    taint = {"key": "gpu", "value": taint_value, "effect": "NoSchedule"}
    assert toleration_tolerates(toleration, taint, comparisons=True) is expected
    assert toleration_tolerates(toleration, taint, comparisons=False) is False  # before 1.35 the operator is unknown


# ResourceQuota composition (inventory/k8s/semantics/quota.py).

def _priority(operator: str, *values: str) -> dict:
    return {"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": operator,
                                                    **({"values": list(values)} if values else {})}]}}


@pytest.mark.parametrize(("spec", "pod_class", "matches"), [
    (_priority("In", "high"), "high", True),
    (_priority("In", "high"), "", False),
    (_priority("NotIn", "high"), "", True),  # a pod without a class has no PriorityClass "label"
    (_priority("NotIn", "high"), "high", False),
    (_priority("Exists"), "", False),
    (_priority("Exists"), "low", True),
    (_priority("DoesNotExist"), "", True),
    (_priority("DoesNotExist"), "low", False),
    ({"scopes": ["PriorityClass"]}, "low", True),
    ({}, "low", True),
])
def test_priority_class_scope(spec: dict, pod_class: str, matches: bool) -> None:
    pod_spec = {"containers": [{"name": "c"}], **({"priorityClassName": pod_class} if pod_class else {})}
    assert scope_matches_pod(spec, pod_spec) is matches


def test_qos_deadline_and_affinity_scopes() -> None:
    gpus_only = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    with_cpu = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    zero_cpu = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "0"}}}]}
    assert is_best_effort(gpus_only)
    assert is_best_effort(zero_cpu)
    assert not is_best_effort(with_cpu)
    assert not is_best_effort({"initContainers": [{"name": "i", "resources": {"limits": {"memory": "1Gi"}}}],
                               "containers": [{"name": "c"}]})
    assert scope_matches_pod({"scopes": ["Terminating", "BestEffort"]}, {**gpus_only, "activeDeadlineSeconds": 0})
    assert not scope_matches_pod({"scopes": ["Terminating"]}, gpus_only)
    assert scope_matches_pod({"scopes": ["NotTerminating", "NotBestEffort"]}, with_cpu)
    cross = {"containers": [], "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone", "namespaceSelector": {}}]}}}
    assert scope_matches_pod({"scopes": ["CrossNamespacePodAffinity"]}, cross)
    assert not scope_matches_pod({"scopes": ["CrossNamespacePodAffinity"]}, with_cpu)
    # Not a pod (a ResourceClaim, a Job): unscoped quotas only. Unreadable scopes match nothing, never raise.
    assert scope_matches_pod({}, None)
    assert not scope_matches_pod({"scopes": ["NotBestEffort"]}, None)
    assert quota_scope_problem({"scopes": ["Sometimes"]}) == "unknown quota scope 'Sometimes'"
    assert not scope_matches_pod({"scopes": ["Sometimes"]}, with_cpu)
    assert scope_matches_pod({"scopeSelector": {"matchExpressions": "x"}}, with_cpu)  # no requirement: unscoped
    assert quota_scope_text(_priority("In", "high")) == "PriorityClass In [high]"


def test_effective_limit_is_the_tightest_matching_quota() -> None:
    quotas = [
        {"name": "gpu-quota", "hard": {"requests.nvidia.com/gpu": "40"}, "used": {"requests.nvidia.com/gpu": "36"}},
        {"name": "portal", "hard": {"requests.nvidia.com/gpu": "8"}, "used": {"requests.nvidia.com/gpu": "0"}},
        {"name": "high", "hard": {"requests.nvidia.com/gpu": "2"}, "used": {}, "spec": _priority("In", "high")},
        {"name": "broken", "hard": {"requests.nvidia.com/gpu": "x"}},
    ]
    limits, unreadable = effective_limits(quotas, {"containers": []})
    gpu = limits["requests.nvidia.com/gpu"]
    assert (gpu.limit, gpu.headroom, gpu.binding.quota) == (8, 4, "gpu-quota")  # smallest hard; first to refuse
    assert [q.quota for q in gpu.quotas] == ["gpu-quota", "portal"]
    assert unreadable == ["broken"]
    limits, _ = effective_limits(quotas, {"containers": [], "priorityClassName": "high"})
    assert limits["requests.nvidia.com/gpu"].binding.quota == "high"
    limits, _ = effective_limits(quotas, match_all=True)
    assert [q.quota for q in limits["requests.nvidia.com/gpu"].quotas] == ["gpu-quota", "high", "portal"]


def test_limit_range_defaults_fill_only_what_a_container_leaves_out() -> None:
    defaults = limit_range_defaults([
        {"limits": [{"type": "Container", "default": {"cpu": "2", "nvidia.com/gpu": "1"},
                     "defaultRequest": {"cpu": "500m"}},
                    {"type": "Pod", "max": {"cpu": "8"}}, "junk", {"type": "Container", "default": {"memory": "x"}}]},
        None,
    ])
    assert defaults == [({"cpu": "2", "nvidia.com/gpu": "1"}, {"cpu": "500m", "nvidia.com/gpu": "1"})]
    spec = {"initContainers": [{"name": "init"}],
            "containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}, {"name": "b"}, "bad"]}
    out = with_limit_range_defaults(spec, defaults)
    assert out["containers"][0]["resources"] == {"limits": {"cpu": "1", "nvidia.com/gpu": "1"},
                                                 "requests": {"cpu": "1", "nvidia.com/gpu": "1"}}
    assert out["containers"][1]["resources"] == {"limits": {"cpu": "2", "nvidia.com/gpu": "1"},
                                                 "requests": {"cpu": "500m", "nvidia.com/gpu": "1"}}
    assert out["initContainers"][0]["resources"]["requests"]["cpu"] == "500m"
    assert out["containers"][2] == "bad"
    assert spec["containers"][1] == {"name": "b"}  # the input is left alone
    assert with_limit_range_defaults(spec, []) is spec
    assert pod_resources({"spec": out}).requests["cpu"] == Fraction(3, 2)  # 1 + 0.5 (the init's 0.5 is less)
