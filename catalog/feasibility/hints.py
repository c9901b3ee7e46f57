"""Hints beyond the scheduler's message: what would change the outcome, computed by re-running the filters.

- how many nodes fit now;
- how many more would fit with a toleration for the taint that blocks most nodes, or without the node selector
  requirement that blocks most nodes (and what those nodes would fail on next when that is not enough);
- the largest amount of the pod's main extended resource (or DRA devices of its main request) free on one node
  the pod may use;
- on the nearest fit, which bound pods (or claims) hold the missing units.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from catalog.feasibility.reasons import REASON_AFFINITY
from catalog.feasibility.resources import format_amount
from catalog.feasibility.snapshot import BoundPod, ClusterSnapshot, NodeInfo
from inventory.k8s.semantics import BLOCKING_TAINT_EFFECTS, term_matches

if TYPE_CHECKING:
    from catalog.feasibility.engine import _Pod, _Result

__all__ = ["hints_for"]

Evaluate = Callable[..., dict[str, Any]]
_ELIGIBLE = frozenset({"NodePorts", "NodeResourcesFit", "DynamicResources"})  # failed only after placement rules


def _names(names: list[str], limit: int = 3) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _summary(results: Mapping[str, _Result | None]) -> str:
    counts = Counter(reason for result in results.values() if result is not None for reason in result.reasons)
    return ", ".join(f"{count} {reason}" for reason, count in counts.most_common(3))


def _nodes(count: int) -> str:
    return f"{count} node{'s' * (count != 1)}"


def _kinds(modes: list[str]) -> str:
    return " or ".join(sorted({"MIG slices" if mode.startswith("MIG") else "time-slicing/MPS replicas"
                               for mode in modes}))


def _accepts(ctx: _Pod, node: NodeInfo) -> bool:
    """The pod's own node selector and required node affinity let it onto the node."""
    if any(node.labels.get(key) != value for key, value in ctx.node_selector.items()):
        return False
    return ctx.required_terms is None or any(term_matches(term, node.labels, node.name)
                                             for term in ctx.required_terms)


def _wants_whole_cards(snapshot: ClusterSnapshot, ctx: _Pod, resource: str) -> bool:
    """True when the nodes the pod's selector and affinity accept sell `resource` only as whole cards: the pod is
    pinned to a whole-card offering, and nodes selling shared units (time-slicing, MPS, MIG) are no way out."""
    return not any(_shared_mode(snapshot, name, resource) for name, node in snapshot.nodes.items()
                   if resource in node.allocatable and _accepts(ctx, node))


def _what_if(snapshot: ClusterSnapshot, ctx: _Pod, blocked: list[str], allowed: set[str] | None,
             evaluate: Evaluate, change: str, *, whole_cards: bool = False) -> str:
    results = evaluate(snapshot, ctx, blocked, allowed)
    fits = sorted(name for name, result in results.items() if result is None)
    resource = _main_resource(ctx)
    if whole_cards:  # a whole-card workload is never told to move to shared units (the offering's unit kind)
        shared = [name for name in fits if _shared_mode(snapshot, name, resource)]
        fits = [name for name in fits if name not in shared]
        if shared and not fits:
            modes = [_shared_mode(snapshot, name, resource) for name in shared]
            return (f"{change}, only {_nodes(len(shared))} selling {resource} as {_kinds(modes)} would take it "
                    f"({_names(shared)}), not whole cards: keep it")
    if fits:
        text = f"{change}, {len(fits)} more node{'s' * (len(fits) != 1)} would fit: {_names(fits)}"
        modes = [mode for name in fits if (mode := _shared_mode(snapshot, name, resource))]
        if modes:
            text += (f" ({'all' if len(modes) == len(fits) else len(modes)} of them sell {resource} as "
                     f"{_kinds(modes)}, not whole cards)")
        return text
    return (f"{change} alone is not enough: {'that node then fails' if len(blocked) == 1 else 'those nodes then fail'} "
            f"on {_summary(results)}")


def _taint_key(taint: Mapping[str, Any]) -> tuple[str, str, str]:
    return str(taint.get("key", "")), str(taint.get("value", "")), str(taint.get("effect", ""))


def _taint_hint(snapshot: ClusterSnapshot, ctx: _Pod, results: Mapping[str, _Result | None],
                allowed: set[str] | None, evaluate: Evaluate) -> list[str]:
    blocked = [name for name, result in results.items() if result is not None and result.plugin == "TaintToleration"]
    if not blocked:
        return []
    counts: Counter[tuple[str, str, str]] = Counter()
    for name in blocked:
        keys = {_taint_key(t) for t in snapshot.nodes[name].taints
                if t.get("effect") in BLOCKING_TAINT_EFFECTS and not ctx.tolerates(t)}
        counts.update(keys)
    (key, value, effect), count = min(counts.items(), key=lambda item: (-item[1], item[0]))
    toleration = {"key": key, "operator": "Equal", "value": value, "effect": effect}
    relaxed = dataclasses.replace(ctx, tolerations=[*ctx.tolerations, toleration])
    text = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
    targets = [name for name in blocked if any(_taint_key(t) == (key, value, effect)
                                               for t in snapshot.nodes[name].taints)]
    return [f"taint {text} blocks {_nodes(count)}; "
            + _what_if(snapshot, relaxed, targets, allowed, evaluate, f"with a toleration for {text}",
                       whole_cards=_wants_whole_cards(snapshot, ctx, _main_resource(ctx)))]


def _selector_hint(snapshot: ClusterSnapshot, ctx: _Pod, results: Mapping[str, _Result | None],
                   allowed: set[str] | None, evaluate: Evaluate) -> list[str]:
    blocked = [name for name, result in results.items()
               if result is not None and result.reasons == [REASON_AFFINITY]]
    if not blocked:
        return []
    options: list[tuple[int, str, _Pod, list[str]]] = []
    for key, value in ctx.node_selector.items():
        hit = [name for name in blocked if snapshot.nodes[name].labels.get(key) != value]
        if hit:
            relaxed = dataclasses.replace(ctx, node_selector={k: v for k, v in ctx.node_selector.items() if k != key})
            options.append((len(hit), f"nodeSelector {key}={value}", relaxed, hit))
    if ctx.required_terms is not None:
        hit = [name for name in blocked
               if not any(term_matches(term, snapshot.nodes[name].labels, name) for term in ctx.required_terms)]
        if hit:
            options.append((len(hit), "the required node affinity", dataclasses.replace(
                ctx, required_terms=None), hit))
    if not options:
        return []
    count, what, relaxed, targets = max(options, key=lambda option: option[0])
    whole_cards = _wants_whole_cards(snapshot, ctx, _main_resource(ctx))
    return [f"{what} excludes {_nodes(count)}; "
            + _what_if(snapshot, relaxed, targets, allowed, evaluate, f"without {what}", whole_cards=whole_cards)]


def _main_resource(ctx: _Pod) -> str:
    extended = [(amount, name) for name, amount in ctx.requests.items()
                if "/" in name and not name.startswith("hugepages-")]
    return max(extended)[1] if extended else ""


def _eligible(results: Mapping[str, _Result | None]) -> list[str]:
    return [name for name, result in results.items() if result is None or result.plugin in _ELIGIBLE]


def _largest_hint(snapshot: ClusterSnapshot, ctx: _Pod, results: Mapping[str, _Result | None],
                  resource: str) -> list[str]:
    eligible = _eligible(results)
    scope = "on one node this pod may use"
    if not eligible:
        eligible, scope = list(results), "on one node anywhere in the cluster"
    offering = [snapshot.nodes[name] for name in eligible if resource in snapshot.nodes[name].allocatable]
    wanted = ctx.requests[resource]
    if not offering:
        return [f"no node {'this pod may use' if 'may use' in scope else 'in the cluster'} offers {resource}"]
    best = max(offering, key=lambda node: (node.free(resource), node.name))
    free = max(best.free(resource), 0)
    if not free:
        where = "this pod may use" if "may use" in scope else "in the cluster"
        return [f"no node {where} has any free {resource} today; this pod asks for {format_amount(resource, wanted)}"]
    text = (f"the largest {resource} request placeable {scope} today is {format_amount(resource, free)} "
            f"({best.name}); this pod asks for {format_amount(resource, wanted)}")
    result = results.get(best.name)
    other = [r for r in result.reasons if r != f"Insufficient {resource}"] if result is not None else []
    if other:
        text += f" (but {best.name} fails on: {', '.join(other)})"
    return [text, *_unit_notes(snapshot, [best.name], resource)]


def _shared_mode(snapshot: ClusterSnapshot, name: str, resource: str) -> str:
    """"time-slicing replicas"/"MPS shares"/"MIG <profile> slices (single strategy)" when the node sells `resource`
    as parts of a card (GFD labels)."""
    if resource not in ("nvidia.com/gpu", "nvidia.com/gpu.shared"):
        return ""
    labels = snapshot.nodes[name].labels
    if resource == "nvidia.com/gpu" and labels.get("nvidia.com/mig.strategy") == "single":
        product = labels.get("nvidia.com/gpu.product", "")
        if "-MIG-" in product:  # GFD's single strategy: nvidia.com/gpu counts the node's MIG devices
            return f"MIG {product.rpartition('-MIG-')[2]} slices (single strategy)"
    replicas = labels.get("nvidia.com/gpu.replicas", "1")
    if not (replicas.isdigit() and int(replicas) > 1):
        return ""
    strategy = labels.get("nvidia.com/gpu.sharing-strategy", "")
    return {"mps": "MPS shares", "time-slicing": "time-slicing replicas"}.get(strategy, "shared replicas")


def _unit_notes(snapshot: ClusterSnapshot, names: list[str], resource: str) -> list[str]:
    """Shared units are not cards (DESIGN §2): say so where nvidia.com/gpu counts time-slicing or MPS replicas, or
    MIG slices (the single strategy)."""
    out = []
    for name in names:
        mode = _shared_mode(snapshot, name, resource)
        if mode.startswith("MIG"):
            out.append(f"on {name}, {resource} units are {mode}, not whole cards")
        elif mode:
            replicas = snapshot.nodes[name].labels["nvidia.com/gpu.replicas"]
            out.append(f"on {name}, {resource} units are {mode} ({replicas} per physical GPU), not whole cards")
    return out


def _pod_label(pod: BoundPod) -> str:
    extra = []
    if pod.is_job:
        extra.append(f"Job {pod.owner_name}")
    if pod.active_deadline_seconds is not None:
        extra.append(f"activeDeadlineSeconds {pod.active_deadline_seconds}")
    return pod.key + (f" ({', '.join(extra)})" if extra else "")


def _release_plan(node: NodeInfo, resource: str, wanted: int) -> tuple[list[BoundPod], int]:
    """The fewest bound pods whose end frees enough of `resource` on the node (largest holders first, Jobs first)."""
    missing = wanted - max(node.free(resource), 0)
    holders = sorted((p for p in node.pods if p.requests.get(resource, 0) > 0),
                     key=lambda p: (-p.requests.get(resource, 0), not p.is_job, p.key))
    chosen: list[BoundPod] = []
    freed = 0
    for pod in holders:
        if freed >= missing:
            break
        chosen.append(pod)
        freed += pod.requests.get(resource, 0)
    return chosen, freed


def _holders_hint(snapshot: ClusterSnapshot, ctx: _Pod, results: Mapping[str, _Result | None],
                  resource: str) -> list[str]:
    wanted = ctx.requests[resource]
    short_results = {name: result for name, result in results.items()
                     if result is not None and result.plugin == "NodeResourcesFit"
                     and f"Insufficient {resource}" in result.reasons}
    short = [snapshot.nodes[name] for name in short_results]
    if not short:
        return []
    capable = [node for node in short if node.allocatable.get(resource, 0) >= wanted]
    if not capable:
        most = max(short, key=lambda node: (node.allocatable.get(resource, 0), node.name))
        return [f"no node this pod may use has {format_amount(resource, wanted)} allocatable {resource} "
                f"(the most is {format_amount(resource, most.allocatable.get(resource, 0))} on {most.name}): "
                "it cannot fit even on an empty node"]
    plans = [(_release_plan(node, resource, wanted), node) for node in capable]
    (chosen, freed), node = min(plans, key=lambda plan: (len(plan[0][0]), -plan[1].free(resource), plan[1].name))
    if not chosen:
        return []
    verb = "finishes" if len(chosen) == 1 else "finish"
    text = (f"{node.name} frees {format_amount(resource, freed)} {resource} when "
            f"{_names([ctx.viewer.pod(p.key, _pod_label(p)) for p in chosen], 4)} {verb}")
    other = [r for r in short_results[node.name].reasons if r != f"Insufficient {resource}"]
    if other:
        text += f" (it is also short on: {', '.join(r.removeprefix('Insufficient ') for r in other)})"
    return [text]


def _dra_hints(snapshot: ClusterSnapshot, ctx: _Pod, results: Mapping[str, _Result | None]) -> list[str]:
    pending = [claim for claim in ctx.claims if not claim.allocated and claim.requests]
    failed = {name: result.allocation for name, result in results.items()
              if result is not None and result.plugin == "DynamicResources" and result.allocation is not None}
    if not pending or not failed:
        return []
    main = pending[0].requests[0].alternatives[0]
    counts = {name: allocation.free_by_request.get(main.name, 0) for name, allocation in failed.items()}
    best = max(counts, key=lambda name: (counts[name], name))
    hints = [f"the largest request for class {main.class_name} placeable on one node today is "
             f"{counts[best]} device(s) ({best}); request {main.name} asks for {main.needed}"]
    holders = failed[best].holders
    if holders:
        parts = []
        for claim, count in sorted(holders.items(), key=lambda item: (-item[1], item[0]))[:3]:
            pods = [ctx.viewer.pod(key) for key in snapshot.claim_pods.get(claim, [])]
            held_by = f"claim {claim}" if ctx.viewer.visible(claim) else ctx.viewer.claim(claim)
            parts.append(f"{count} by {held_by}" + (f" (pod {_names(pods, 2)})" if pods else " (no pod uses it)"))
        hints.append(f"on {best}, matching devices are held: {'; '.join(parts)}")
    return hints


def _topology_hints(results: Mapping[str, _Result | None]) -> list[str]:
    """Per matchAttribute constraint (PCIe root, NUMA node, NVLink domain): how many nodes it blocks, and which of
    them would satisfy it if the devices held there were freed."""
    blocked: dict[str, list[str]] = {}
    freeable: dict[str, list[str]] = {}
    for name, result in results.items():
        if result is None or result.allocation is None:
            continue
        for attribute, if_freed in result.allocation.topology:
            blocked.setdefault(attribute, []).append(name)
            if if_freed:
                freeable.setdefault(attribute, []).append(name)
    hints = []
    for attribute, names in sorted(blocked.items()):
        fixable = sorted(freeable.get(attribute, []))
        text = f"constraint matchAttribute {attribute} blocks {_nodes(len(names))}"
        text += (f"; {len(fixable)} of them would satisfy it if their devices were freed: {_names(fixable)}"
                 if fixable else "; none of them has enough matching devices with one value even if all were free")
        hints.append(text)
    return hints


def hints_for(snapshot: ClusterSnapshot, ctx: _Pod, results: Mapping[str, _Result | None],
              allowed: set[str] | None, *, evaluate: Evaluate) -> list[str]:
    """Every hint for one explanation, most useful first."""
    fitting = [name for name, result in results.items() if result is None]
    verb = "fits" if len(fitting) == 1 else "fit"
    hints = [f"{_nodes(len(fitting))} of {len(results)} {verb} now" + (f": {_names(fitting, 5)}" if fitting else "")]
    if fitting:
        resource = _main_resource(ctx)
        return hints + (_unit_notes(snapshot, fitting[:5], resource) if resource else [])
    hints += _taint_hint(snapshot, ctx, results, allowed, evaluate)
    hints += _selector_hint(snapshot, ctx, results, allowed, evaluate)
    resource = _main_resource(ctx)
    if resource:
        hints += _largest_hint(snapshot, ctx, results, resource)
        hints += _holders_hint(snapshot, ctx, results, resource)
    hints += _dra_hints(snapshot, ctx, results)
    hints += _topology_hints(results)
    return hints
