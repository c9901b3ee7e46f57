"""explain_pod: the kube-scheduler Filter phase for one pod over a ClusterSnapshot, with scheduler-style messages.

Per node the filter plugins run in the default profile's order and the first failing plugin decides the node's
status, as in `frameworkImpl.RunFilterPlugins`:

    NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, DynamicResources

(VolumeRestrictions, NodeVolumeLimits, VolumeBinding, VolumeZone, PodTopologySpread and InterPodAffinity sit
between NodeResourcesFit and DynamicResources upstream; they are not reproduced and are named in `notes` when the
pod uses what they check.) NodeResourcesFit reports one reason per insufficient resource; the others one reason.

PreFilter: NodeAffinity narrows the nodes to those named by `matchFields metadata.name In` when every term has
such a requirement (the others get `node(s) didn't satisfy plugin(s) [NodeAffinity]`, or the whole pod fails with
`pod affinity terms conflict` when the names cannot match); DynamicResources resolves the pod's claims and device
classes (a missing one fails the pod on every node).

Message (`FitError.Error()`): `0/N nodes are available: ` + either the PreFilter message + `.`, or the histogram
`"<count> <reason>"` sorted as strings (so "10 …" sorts before "2 …"), joined with ", " and ended with ".".
The PostFilter (preemption) sentence is not produced.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from catalog.feasibility.dra import (
    Budget,
    ClaimsError,
    ClaimSpec,
    NodeAllocation,
    allocate_on_node,
    prepare_matches,
    resolve_claims,
)
from catalog.feasibility.hints import hints_for
from catalog.feasibility.reasons import (
    NO_NODES,
    REASON_AFFINITY,
    REASON_CONFLICT,
    REASON_DRA,
    REASON_DRA_UNAVAILABLE,
    REASON_NODE_NAME,
    REASON_PORTS,
    REASON_PREFILTER_AFFINITY,
    REASON_TAINT,
    REASON_TOO_MANY_PODS,
    REASON_UNSCHEDULABLE,
)
from catalog.feasibility.resources import CPU, EPHEMERAL_STORAGE, MEMORY, format_amount
from catalog.feasibility.snapshot import ClusterSnapshot, HostPort, NodeInfo, pod_host_ports
from catalog.feasibility.viewer import EVERYONE, Viewer
from inventory.k8s.semantics import (
    BLOCKING_TAINT_EFFECTS,
    is_extended_resource,
    node_selector_matches,
    pod_resources,
    taint_text,
    term_failures,
    term_matches,
    toleration_tolerates,
)
from inventory.k8s.semantics import as_dict as _dict
from inventory.k8s.semantics import as_list as _list
from inventory.k8s.semantics import as_str as _str

__all__ = [
    "Explanation",
    "NodeVerdict",
    "explain_pod",
]

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
_NATIVE_ORDER = (CPU, MEMORY, EPHEMERAL_STORAGE)


@dataclass(slots=True)
class NodeVerdict:
    """One node's result: `reasons` are the scheduler's strings, `details` what exactly failed."""

    name: str
    fits: bool
    reasons: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    plugin: str = ""  # the first failing plugin ("" when the node fits)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "fits": self.fits, "plugin": self.plugin, "reasons": list(self.reasons),
                "details": list(self.details)}


@dataclass(slots=True)
class Explanation:
    """Will the pod schedule, and if not, why: per node, summarised as the scheduler would, plus hints."""

    schedulable: bool
    message: str
    nodes: list[NodeVerdict]
    fitting_nodes: list[str]
    hints: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    total_nodes: int = 0
    prefilter_message: str = ""

    def histogram(self) -> dict[str, int]:
        """Reason → number of nodes, as in the message (empty when schedulable or failed in PreFilter)."""
        return dict(Counter(reason for node in self.nodes if not node.fits for reason in node.reasons))

    def as_json(self) -> dict[str, Any]:
        return {
            "schedulable": self.schedulable,
            "message": self.message,
            "total_nodes": self.total_nodes,
            "fitting_nodes": list(self.fitting_nodes),
            "prefilter_message": self.prefilter_message,
            "nodes": [node.as_json() for node in self.nodes],
            "hints": list(self.hints),
            "notes": list(self.notes),
        }








@dataclass(slots=True)
class _Pod:
    """The parts of the pod the filters read, normalised once."""

    namespace: str
    name: str
    requests: dict[str, int]
    tolerations: list[Mapping[str, Any]]
    node_name: str
    node_selector: dict[str, str]
    required_terms: list[Any] | None  # None: no required node affinity
    host_ports: set[HostPort]
    claims: list[ClaimSpec]
    viewer: Viewer = EVERYONE
    comparisons: bool = True  # toleration Lt/Gt exist on the cluster (ClusterSnapshot.toleration_comparisons)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def tolerates(self, taint: Mapping[str, Any]) -> bool:
        return any(toleration_tolerates(t, taint, comparisons=self.comparisons) for t in self.tolerations)


@dataclass(slots=True)
class _Result:
    plugin: str
    reasons: list[str]
    details: list[str]
    allocation: NodeAllocation | None = None


def _pod_context(pod: Mapping[str, Any], notes: list[str]) -> _Pod:
    metadata, spec = _dict(pod.get("metadata")), _dict(pod.get("spec"))
    resources = pod_resources(pod)
    requests = resources.scheduler_requests()
    for problem in resources.problems:  # malformed amounts are left out; an extended-resource rule is a hard error
        notes.append(f"{problem.message} (the API server rejects this)" if is_extended_resource(problem.resource)
                     else f"{problem.message}; ignored")
    selector: dict[str, str] = {}
    for key, value in _dict(spec.get("nodeSelector")).items():
        if isinstance(value, str):
            selector[str(key)] = value
        else:
            notes.append(f"nodeSelector {key}: the value is not a string; it never matches")
            selector[str(key)] = "\x00<invalid>"
    required = _dict(_dict(_dict(spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"))
    terms = required.get("nodeSelectorTerms") if required else None
    if required and not isinstance(terms, list):
        terms = []
    return _Pod(
        namespace=_str(metadata.get("namespace")) or "default",
        name=_str(metadata.get("name")) or _str(metadata.get("generateName")) or "<unnamed>",
        requests=requests,
        tolerations=[t for t in _list(spec.get("tolerations")) if isinstance(t, dict)],
        node_name=_str(spec.get("nodeName")),
        node_selector=selector,
        required_terms=terms,
        host_ports=pod_host_ports(pod),
        claims=[],
    )


def _unsupported_notes(pod: Mapping[str, Any], notes: list[str]) -> None:
    spec = _dict(pod.get("spec"))
    affinity = _dict(spec.get("affinity"))
    for kind in ("podAffinity", "podAntiAffinity"):
        if _dict(affinity.get(kind)).get("requiredDuringSchedulingIgnoredDuringExecution"):
            notes.append(f"required {kind} is not evaluated (InterPodAffinity is not reproduced)")
    if any(_dict(c).get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
           for c in _list(spec.get("topologySpreadConstraints"))):
        notes.append("topologySpreadConstraints are not evaluated (PodTopologySpread is not reproduced)")
    if any(_dict(v).get("persistentVolumeClaim") or _dict(v).get("ephemeral") for v in _list(spec.get("volumes"))):
        notes.append("persistent volumes are not evaluated (VolumeBinding/VolumeZone/NodeVolumeLimits are not "
                     "reproduced)")
    if _list(spec.get("schedulingGates")):
        notes.append("the pod has schedulingGates: the scheduler does not try it until they are removed "
                     "(this explanation assumes they are)")
    scheduler = _str(spec.get("schedulerName"))
    if scheduler and scheduler != "default-scheduler":
        notes.append(f"the pod asks for scheduler {scheduler!r}; this explanation reproduces the default scheduler")
    if _str(spec.get("nodeName")):
        notes.append("spec.nodeName is set: such a pod bypasses the scheduler and the kubelet admits or rejects it; "
                     "the NodeName plugin is applied here as the scheduler would")


def _prefilter_names(terms: list[Any] | None) -> set[str] | None:
    """NodeAffinity PreFilter: the node names every term pins with `metadata.name In`, or None (all nodes)."""
    if not terms:
        return None
    names: set[str] = set()
    for term in terms:
        pinned: set[str] | None = None
        for requirement in _list(_dict(term).get("matchFields")):
            requirement = _dict(requirement)
            if requirement.get("key") == "metadata.name" and requirement.get("operator") == "In":
                values = {v for v in _list(requirement.get("values")) if isinstance(v, str)}
                pinned = values if pinned is None else pinned & values
        if pinned is None:
            return None
        names |= pinned
    return names


def _affinity(ctx: _Pod, node: NodeInfo) -> list[str]:
    """Why the node fails NodeAffinity ([] when it passes): nodeSelector labels, then the required terms."""
    labels = node.labels
    failures = []
    for key, value in ctx.node_selector.items():
        if labels.get(key) != value:
            has = f"node has {key}={labels[key]}" if key in labels else "label absent on the node"
            failures.append(f"nodeSelector {key}={value}: {has}")
    terms = ctx.required_terms
    if terms is None or any(term_matches(term, labels, node.name) for term in terms):
        return failures
    if not terms:
        return [*failures, "required node affinity has no nodeSelectorTerms (matches no node)"]
    failures.append("required node affinity: no nodeSelectorTerm matches")
    for index, term in enumerate(terms[:4]):
        failures.append(f"term {index}: " + "; ".join(term_failures(term, labels, node.name)))
    return failures


def _ports_conflict(wanted: set[HostPort], used: set[HostPort]) -> list[str]:
    out = []
    for protocol, ip, port in sorted(wanted):
        for used_protocol, used_ip, used_port in used:
            if (used_protocol, used_port) == (protocol, port) and (
                ip == used_ip or "0.0.0.0" in (ip, used_ip)  # noqa: S104
            ):
                out.append(f"host port {protocol}/{port} is in use on {used_ip}")
                break
    return out


def _resources(ctx: _Pod, node: NodeInfo) -> tuple[list[str], list[str]]:
    reasons: list[str] = []
    details: list[str] = []
    pod_count = len(node.pods)
    if pod_count + 1 > node.allowed_pods:
        reasons.append(REASON_TOO_MANY_PODS)
        details.append(f"pods: {pod_count} bound, the node allows {node.allowed_pods}")
    names = [r for r in _NATIVE_ORDER if r in ctx.requests] + sorted(
        r for r in ctx.requests if r not in _NATIVE_ORDER)
    for resource in names:
        wanted = ctx.requests[resource]
        allocatable = node.allocatable.get(resource, 0)
        used = node.requested.get(resource, 0)
        if wanted <= allocatable - used:
            continue
        reasons.append(f"Insufficient {resource}")
        shown = format_amount(resource, wanted)
        if resource not in node.allocatable:
            details.append(f"{resource}: requested {shown}, the node does not offer {resource}")
        else:
            free = max(allocatable - used, 0)
            details.append(
                f"{resource}: requested {shown}, free {format_amount(resource, free)} of "
                f"{format_amount(resource, allocatable)} allocatable (short by {format_amount(resource, wanted - free)})"
            )
    return reasons, details


def _static(ctx: _Pod, node: NodeInfo, allowed: set[str] | None) -> _Result | None:
    """Every filter before DynamicResources, in plugin order; None when the node passes them all."""
    if allowed is not None and node.name not in allowed:
        return _Result("NodeAffinity", [REASON_PREFILTER_AFFINITY],
                       ["not among the nodes named by the pod's matchFields metadata.name"])
    if node.unschedulable and not ctx.tolerates(UNSCHEDULABLE_TAINT):
        return _Result("NodeUnschedulable", [REASON_UNSCHEDULABLE],
                       ["node is cordoned (spec.unschedulable: true); the pod does not tolerate "
                        "node.kubernetes.io/unschedulable:NoSchedule"])
    if ctx.node_name and ctx.node_name != node.name:
        return _Result("NodeName", [REASON_NODE_NAME], [f"the pod asks for node {ctx.node_name}"])
    untolerated = [t for t in node.taints if t.get("effect") in BLOCKING_TAINT_EFFECTS and not ctx.tolerates(t)]
    if untolerated:
        return _Result("TaintToleration", [REASON_TAINT], [
            f"untolerated taint {{{t.get('key', '')}: {t.get('value', '')}}} ({taint_text(t)})" for t in untolerated
        ])
    failures = _affinity(ctx, node)
    if failures:
        return _Result("NodeAffinity", [REASON_AFFINITY], failures)
    if ctx.host_ports:
        conflicts = _ports_conflict(ctx.host_ports, node.host_ports)
        if conflicts:
            return _Result("NodePorts", [REASON_PORTS], conflicts)
    reasons, details = _resources(ctx, node)
    if reasons:
        return _Result("NodeResourcesFit", reasons, details)
    return None


def _dynamic(snapshot: ClusterSnapshot, ctx: _Pod, node: NodeInfo, budget: Budget) -> _Result | None:
    """DynamicResources Filter: allocate pending claims first, then check where allocated claims are available."""
    allocation = allocate_on_node(snapshot, ctx.claims, node.name, budget, ctx.viewer)
    if not allocation.ok:
        return _Result("DynamicResources", [REASON_DRA], allocation.details, allocation)
    unavailable = [
        claim.label for claim in ctx.claims
        if claim.allocated and claim.node_selector is not None
        and not node_selector_matches(claim.node_selector, node.labels, node.name)
    ]
    if unavailable:
        return _Result("DynamicResources", [REASON_DRA_UNAVAILABLE],
                       [f"claim {label} is allocated to devices not reachable from this node" for label in unavailable],
                       allocation)
    return None


def _evaluate(snapshot: ClusterSnapshot, ctx: _Pod, names: Iterable[str], allowed: set[str] | None,
              budget: Budget | None = None) -> dict[str, _Result | None]:
    """Run the filters for the pod on these nodes (None: the node fits)."""
    budget = budget or Budget()
    results: dict[str, _Result | None] = {}
    dynamic: list[str] = []
    for name in names:
        node = snapshot.nodes[name]
        result = _static(ctx, node, allowed)
        results[name] = result
        if result is None and ctx.claims:
            dynamic.append(name)
    if dynamic:
        pending = [claim for claim in ctx.claims if not claim.allocated]
        if pending:
            devices = [i for name in dynamic for i in snapshot.devices_for_node(name)]
            prepare_matches(snapshot, pending, devices)
        for name in dynamic:
            results[name] = _dynamic(snapshot, ctx, snapshot.nodes[name], budget)
    return results


def _histogram_message(total: int, verdicts: Sequence[NodeVerdict]) -> str:
    counts = Counter(reason for verdict in verdicts if not verdict.fits for reason in verdict.reasons)
    parts = sorted(f"{count} {reason}" for reason, count in counts.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."


def _failure(total: int, message: str, nodes: list[NodeVerdict], notes: list[str], hints: list[str]) -> Explanation:
    return Explanation(
        schedulable=False,
        message=f"0/{total} nodes are available: {message}." if total else NO_NODES,
        nodes=nodes,
        fitting_nodes=[],
        hints=hints,
        notes=notes,
        total_nodes=total,
        prefilter_message=message,
    )


def explain_pod(
    pod: dict[str, Any],
    snapshot: ClusterSnapshot,
    *,
    extra_claims: Sequence[dict[str, Any]] = (),
    extra_claim_templates: Sequence[dict[str, Any]] = (),
    viewer: Viewer = EVERYONE,
) -> Explanation:
    """Will `pod` schedule on the snapshot's nodes, and if not, why. Never raises for malformed manifests. Other
    tenants' pods and claims are named only where `viewer` may see them (catalog/feasibility/viewer.py)."""
    notes: list[str] = []
    total = len(snapshot.node_names)
    if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
        return _failure(total, "the manifest is not a Pod (no spec)", [], ["expected a Pod manifest"], [])
    if pod.get("kind") not in (None, "Pod"):
        notes.append(f"kind {str(pod.get('kind'))[:40]!r} treated as a Pod")
    ctx = _pod_context(pod, notes)
    ctx.viewer = viewer
    ctx.comparisons = snapshot.toleration_comparisons
    _unsupported_notes(pod, notes)
    if not total:
        return Explanation(False, NO_NODES, [], [], [], notes, 0, "")

    allowed = _prefilter_names(ctx.required_terms)
    if allowed is not None and not allowed:
        return _failure(total, REASON_CONFLICT, [], notes, [])
    try:
        ctx.claims = resolve_claims(pod, snapshot, extra_claims, extra_claim_templates)
    except ClaimsError as exc:
        hint = ["create the missing object, or submit it in the same manifest as the pod"] if "not found" in str(
            exc) else []
        return _failure(total, str(exc), [], notes, hint)

    budget = Budget()
    results = _evaluate(snapshot, ctx, snapshot.node_names, allowed, budget)
    if budget.exhausted_nodes:
        notes.append(f"the device search was abandoned on {budget.exhausted_nodes} node(s) (step budget); they are "
                     "counted as not fitting although a solution may exist")
    verdicts = [
        NodeVerdict(name, True) if result is None
        else NodeVerdict(name, False, result.reasons, result.details, result.plugin)
        for name, result in results.items()
    ]
    fitting = [verdict.name for verdict in verdicts if verdict.fits]
    if fitting:
        shown = ", ".join(fitting[:5]) + (", …" if len(fitting) > 5 else "")
        message = f"fits on {len(fitting)} of {total} node{'s' * (total != 1)} ({shown})"
    else:
        message = _histogram_message(total, verdicts)
    hints = hints_for(snapshot, ctx, results, allowed, evaluate=_evaluate)
    notes.extend(snapshot.notes)
    return Explanation(
        schedulable=bool(fitting),
        message=message,
        nodes=verdicts,
        fitting_nodes=fitting,
        hints=hints,
        notes=notes,
        total_nodes=total,
    )
