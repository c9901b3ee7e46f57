"""Gang feasibility: can all N pods of a multi-pod workload be placed at the same time?

Distributed training starts only when every worker runs, so "pod 1 fits" says nothing about a 4x8 job. The gang
explainer places the pods one after another on a copy of the snapshot (`fork`): each placement consumes what the
pod takes on its node (requests, a pod slot, host ports) and the DRA devices the allocator picked for its claims
(whole devices, shares of consumable capacity, shared counters; a named claim shared by the gang is allocated by
the first pod and pins the others to its node). It reports the first pod that fails, in the scheduler's words
(`explain_pod` on the state left by the pods before it), and the largest gang placeable now with its nodes.

Which node each pod takes: the node of the previous gang pod while it still fits (the scheduler binds one pod at
a time; a gang packs), else the fitting node with the least of the pod's main extended resource left after the
placement (best fit, ties by name) — the choice that leaves whole nodes free for the pods after it. Scoring plugins
are not reproduced (docs/feasibility.md).

Speed: the filters run once over every node for each distinct pod shape; after a placement only the nodes it
changed are filtered again (its node, or every node when it touched devices reachable from other nodes or
allocated a named claim).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from catalog.feasibility.dra import Budget, ClaimsError, ClaimSpec, NodeAllocation, resolve_claims
from catalog.feasibility.engine import (
    Explanation,
    _evaluate,
    _pod_context,
    _prefilter_names,
    _Result,
    explain_pod,
)
from catalog.feasibility.manifests import ManifestError
from catalog.feasibility.snapshot import BoundPod, ClusterSnapshot, NodeInfo
from catalog.feasibility.viewer import EVERYONE, Viewer
from inventory.k8s.semantics import as_dict as _dict
from inventory.k8s.semantics import as_list as _list
from inventory.k8s.semantics import as_str as _str

__all__ = ["MAX_GANG_PODS", "PREFERRED_TOPOLOGY", "REQUIRED_TOPOLOGY", "GangExplanation", "GangPod", "explain_gang",
           "gang_pods", "preferred_topology", "required_topology"]

MAX_GANG_PODS = 4096
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
_GANG_KINDS = ("Pod", "Job", "CronJob", "JobSet", "Deployment", "StatefulSet", "ReplicaSet")


@dataclass(frozen=True, slots=True)
class GangPod:
    """One pod of the gang, with the role it plays (`Job train`, `JobSet llm / workers-0`, `PyTorchJob Worker`)."""

    pod: dict[str, Any]
    role: str

    @property
    def name(self) -> str:
        return _str(_dict(self.pod.get("metadata")).get("name"))


# ----------------------------------------------------------------------------------------------------------------
# workloads → pods
# ----------------------------------------------------------------------------------------------------------------
def _count(value: Any, where: str, default: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ManifestError(f"{where} must be a non-negative integer, got {str(value)[:20]!r}")
    return value


def _template_pod(template: Any, name: str, namespace: str, where: str) -> dict[str, Any]:
    template = _dict(template)
    if not isinstance(template.get("spec"), dict):
        raise ManifestError(f"{where}: no pod template (spec.template.spec)")
    meta = copy.deepcopy(_dict(template.get("metadata")))
    meta["name"] = name
    meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template["spec"])}


def _job_pods(job_spec: Any, name: str, namespace: str, role: str, where: str) -> list[GangPod]:
    """The pods a Job runs at once: `parallelism` (default 1), at most `completions`; Indexed pods carry their index."""
    spec = _dict(job_spec)
    parallelism = _count(spec.get("parallelism"), f"{where}.spec.parallelism", 1)
    completions = spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, _count(completions, f"{where}.spec.completions", 1))
    indexed = spec.get("completionMode") == "Indexed"
    pods = []
    for index in range(parallelism):
        pod = _template_pod(spec.get("template"), f"{name}-{index}", namespace, where)
        if indexed:
            pod["metadata"].setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
        pods.append(GangPod(pod, role))
    return pods


def _replica_specs(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """Kubeflow training operators' `spec.<framework>ReplicaSpecs` (PyTorchJob, TFJob, MPIJob…), if present."""
    for key, value in spec.items():
        if isinstance(key, str) and key.endswith("ReplicaSpecs") and isinstance(value, dict):
            return value
    return None


def _object_pods(obj: dict[str, Any], replicas: int | None) -> list[GangPod]:
    kind = _str(obj.get("kind")) or "Pod"
    meta, spec = _dict(obj.get("metadata")), _dict(obj.get("spec"))
    name = _str(meta.get("name")) or _str(meta.get("generateName")).rstrip("-") or kind.lower()
    namespace = _str(meta.get("namespace")) or "default"
    where = f"{kind} {name}"
    if kind == "Pod":
        count = replicas or 1
        pods = []
        for index in range(count):
            pod = copy.deepcopy(obj)
            pod_meta = pod.setdefault("metadata", {})
            if not isinstance(pod_meta, dict):
                raise ManifestError(f"{where}: metadata must be an object")
            pod_meta["name"] = name if count == 1 else f"{name}-{index}"
            pod_meta["namespace"] = namespace
            pods.append(GangPod(pod, "Pod" if count == 1 else f"{count} identical pods"))
        return pods
    if kind == "Job":
        return _job_pods(spec, name, namespace, f"Job {name}", where)
    if kind == "CronJob":
        return _job_pods(_dict(_dict(spec.get("jobTemplate")).get("spec")), name, namespace, f"CronJob {name}", where)
    if kind == "JobSet":
        pods = []
        for position, replicated in enumerate(_list(spec.get("replicatedJobs"))):
            replicated = _dict(replicated)
            job_name = _str(replicated.get("name")) or f"job{position}"
            count = _count(replicated.get("replicas"), f"{where}.spec.replicatedJobs[{position}].replicas", 1)
            job_spec = _dict(_dict(replicated.get("template")).get("spec"))
            for replica in range(count):
                pods += _job_pods(job_spec, f"{name}-{job_name}-{replica}", namespace,
                                  f"JobSet {name} / {job_name}-{replica}", where)
        if not pods and not _list(spec.get("replicatedJobs")):
            raise ManifestError(f"{where}: no spec.replicatedJobs")
        return pods
    specs = _replica_specs(spec)
    if specs is not None:
        pods = []
        for role, role_spec in specs.items():
            role_spec = _dict(role_spec)
            count = _count(role_spec.get("replicas"), f"{where}.{role}.replicas", 1)
            for index in range(count):
                pods.append(GangPod(_template_pod(role_spec.get("template"), f"{name}-{str(role).lower()}-{index}",
                                                  namespace, f"{where} {role}"), f"{kind} {role}"))
        return pods
    if kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        count = _count(spec.get("replicas"), f"{where}.spec.replicas", 1)
        return [GangPod(_template_pod(spec.get("template"), f"{name}-{index}", namespace, where), f"{kind} {name}")
                for index in range(count)]
    raise ManifestError(f"{where}: not a workload the gang explainer knows ({', '.join(_GANG_KINDS)}, or a "
                        "training job with spec.*ReplicaSpecs)")


def gang_pods(objects: Sequence[dict[str, Any]], *, replicas: int | None = None
              ) -> tuple[list[GangPod], list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(pods, claims, claim templates, notes) from a manifest: a Job (parallelism, capped by completions), a
    JobSet, a training job with `*ReplicaSpecs`, a workload with `replicas`, a Pod repeated `replicas` times, or a
    list of Pods. ResourceClaim(Template)s beside them are returned apart; other kinds are ignored (noted)."""
    if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1):
        raise ManifestError("replicas must be a positive integer")
    workloads = [o for o in objects if o.get("kind") not in ("ResourceClaim", "ResourceClaimTemplate")
                 and (o.get("kind") in _GANG_KINDS or _replica_specs(_dict(o.get("spec"))) is not None)]
    if not workloads:
        raise ManifestError("no Pod, Job, JobSet or training job in the manifest")
    if replicas is not None and (len(workloads) != 1 or workloads[0].get("kind") != "Pod"):
        raise ManifestError("replicas repeats a single Pod; give the count in the workload itself otherwise")
    pods: list[GangPod] = []
    for obj in workloads:
        pods += _object_pods(obj, replicas)
        if len(pods) > MAX_GANG_PODS:
            raise ManifestError(f"the gang has more than {MAX_GANG_PODS} pods")
    if not pods:
        raise ManifestError("the workload runs no pod at once (parallelism, completions or replicas is 0)")
    notes = []
    ignored = sorted({_str(o.get("kind")) or "?" for o in objects
                      if o not in workloads and o.get("kind") not in ("ResourceClaim", "ResourceClaimTemplate")})
    if ignored:
        notes.append(f"ignored objects of kind {', '.join(ignored)}")
    claims: list[dict[str, Any]] = []
    templates: list[dict[str, Any]] = []
    for obj in objects:
        if obj.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"):
            obj = dict(obj)
            meta = dict(_dict(obj.get("metadata")))
            meta.setdefault("namespace", _str(_dict(pods[0].pod.get("metadata")).get("namespace")) or "default")
            obj["metadata"] = meta
            (claims if obj["kind"] == "ResourceClaim" else templates).append(obj)
    return pods, claims, templates, notes


# ----------------------------------------------------------------------------------------------------------------
# the simulation
# ----------------------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class GangExplanation:
    """Whether all pods can be placed at once; the first one that cannot, and why; the largest gang placeable."""

    schedulable: bool
    message: str
    total_pods: int
    placements: list[tuple[str, str]]  # (pod, node) for the pods placed, in order
    failed: list[str] = field(default_factory=list)  # pods that found no node (after the pods placed before them)
    first_failure: str = ""
    failure: Explanation | None = None  # explain_pod of the first failing pod on the state the others left
    notes: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    topology: str = ""  # the node label all pods must share a value of ("" when none)
    domain: str = ""  # the value chosen (or the closest one when none holds the gang)
    domains: dict[str, int] = field(default_factory=dict)  # value → pods that domain holds now
    preferred: str = ""  # Kueue's preferred-topology level asked for ("" when none)
    tried: list[str] = field(default_factory=list)  # the levels tried for it, narrowest first ("" = no constraint)

    @property
    def largest(self) -> int:
        return len(self.placements)

    def nodes_used(self) -> dict[str, int]:
        """Node → pods of the largest placeable gang on it, in first-use order."""
        return dict(Counter(node for _, node in self.placements))

    def _topology_json(self) -> dict[str, Any] | None:
        if not self.topology and not self.preferred:
            return None
        out: dict[str, Any] = {"key": self.topology, "domain": self.domain, "domains": dict(self.domains)}
        if self.preferred:  # Kueue's preferred topology: the level asked for and the levels tried ("" = anywhere)
            out |= {"preferred": self.preferred, "levels_tried": list(self.tried)}
        return out

    def as_json(self, *, max_nodes: int = 50) -> dict[str, Any]:
        failure = None
        if self.failure is not None:
            failure = self.failure.as_json()
            failing_nodes = [n for n in failure["nodes"] if not n["fits"]]
            failure["nodes"] = failing_nodes[:max_nodes]
            failure["nodes_omitted"] = max(len(failing_nodes) - max_nodes, 0)
        return {
            "schedulable": self.schedulable,
            "message": self.message,
            "total_pods": self.total_pods,
            "largest_gang": self.largest,
            "nodes_used": self.nodes_used(),
            "placements": [{"pod": pod, "node": node} for pod, node in self.placements],
            "failed_pods": list(self.failed),
            "first_failure": {"pod": self.first_failure, "explanation": failure} if self.first_failure else None,
            "topology": self._topology_json(),
            "hints": list(self.hints),
            "notes": list(self.notes),
        }


_WRITTEN = ("nodes", "pools", "claims", "allocated", "consumed", "sharers")  # what placements change


def fork(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A shallow copy of the snapshot for placements. The indexes a placement changes (`_WRITTEN`) are copied the
    first time it writes one (`_Gang.own`); the rest (devices, CEL memo, node → device index) is shared and stays
    immutable, so forking is cheap and the snapshot itself is never changed."""
    return copy.copy(snapshot)


@dataclass(slots=True)
class _Shape:
    """Filter results for pods with the same spec and namespace, kept current through the placements."""

    ctx: Any  # engine._Pod
    allowed: set[str] | None
    results: dict[str, _Result | None]
    seen: int  # placements already reflected in `results`
    main: str  # the main extended resource ("" when none)


class _Gang:
    def __init__(self, snapshot: ClusterSnapshot, claims: Sequence[dict[str, Any]], templates: Sequence[dict[str, Any]],
                 viewer: Viewer) -> None:
        self.state = fork(snapshot)
        self.claims, self.templates, self.viewer = claims, templates, viewer
        self.shapes: dict[str, _Shape] = {}
        self.dirty: list[set[str] | None] = []  # per placement: the nodes it changed (None: any node may change)
        self.copied_pools: set[tuple[str, str]] = set()
        self.owned: set[str] = set()  # which of _WRITTEN this fork has copied already
        self.owner: dict[int, str] | None = None  # device index → the node it is local to
        self.previous = ""

    # --- filters ----------------------------------------------------------------------------------------------
    def shape(self, pod: dict[str, Any], notes: list[str]) -> _Shape:
        key = json.dumps([_dict(pod.get("metadata")).get("namespace"), pod.get("spec")], sort_keys=True, default=str)
        shape = self.shapes.get(key)
        if shape is None:
            ctx = _pod_context(pod, notes)
            ctx.viewer, ctx.comparisons = self.viewer, self.state.toleration_comparisons
            extended = [(amount, name) for name, amount in ctx.requests.items()
                        if "/" in name and not name.startswith("hugepages-")]
            shape = _Shape(ctx, _prefilter_names(ctx.required_terms), {}, -1, max(extended)[1] if extended else "")
            self.shapes[key] = shape
        return shape

    def refresh(self, shape: _Shape, pod: dict[str, Any]) -> None:
        """Bring the shape's results up to date with the placements since it was last evaluated."""
        meta = _dict(pod.get("metadata"))
        shape.ctx.name = _str(meta.get("name"))
        shape.ctx.claims = resolve_claims(pod, self.state, self.claims, self.templates)
        if shape.seen < 0 or any(changed is None for changed in self.dirty[shape.seen:]):
            names: Sequence[str] = self.state.node_names
        else:
            names = sorted(set().union(*(changed for changed in self.dirty[shape.seen:] if changed is not None)))
        if names:
            shape.results.update(_evaluate(self.state, shape.ctx, names, shape.allowed, Budget()))
        shape.seen = len(self.dirty)

    def choose(self, shape: _Shape) -> str:
        fitting = [name for name, result in shape.results.items() if result is None]
        if not fitting:
            return ""
        if self.previous in shape.results and shape.results[self.previous] is None:
            return self.previous
        if not shape.main:
            return min(fitting)
        want = shape.ctx.requests[shape.main]
        return min(fitting, key=lambda name: (self.state.nodes[name].free(shape.main) - want, name))

    # --- placement --------------------------------------------------------------------------------------------
    def own(self, *names: str) -> ClusterSnapshot:
        """Copy these indexes of the fork before the first write to them (copy-on-write)."""
        for name in names:
            if name not in self.owned:
                setattr(self.state, name, dict(getattr(self.state, name)))
                self.owned.add(name)
        return self.state

    def place(self, shape: _Shape, pod: dict[str, Any], node_name: str) -> None:
        ctx, state = shape.ctx, self.own("nodes")
        node = state.nodes[node_name]
        requested = dict(node.requested)
        for resource, amount in ctx.requests.items():
            requested[resource] = requested.get(resource, 0) + amount
        bound = BoundPod(namespace=ctx.namespace, name=ctx.name, requests=dict(ctx.requests), phase="Pending",
                         priority=0, owner_kind="Job", owner_name="(this gang)")
        state.nodes[node_name] = dataclasses.replace(node, requested=requested, pods=[*node.pods, bound],
                                                     host_ports=node.host_ports | ctx.host_ports)
        changed: set[str] | None = {node_name}
        pending = [claim for claim in ctx.claims if not claim.allocated]
        if pending:
            allocation = self.allocation(shape, node_name)
            if self.consume(ctx, pending, allocation, node) or self.pin(ctx, pending, allocation, node_name):
                changed = None
        self.dirty.append(changed)
        self.previous = node_name

    def allocation(self, shape: _Shape, node_name: str) -> NodeAllocation:
        from catalog.feasibility.dra import allocate_on_node

        return allocate_on_node(self.state, shape.ctx.claims, node_name, Budget(), self.viewer)

    def _holder(self, ctx: Any, claim: ClaimSpec) -> str:
        if claim.label.endswith(">"):  # generated from a template: one claim per pod
            return f"{ctx.namespace}/{ctx.name}-{claim.pod_claim}"
        return claim.label

    def _local(self) -> dict[int, str]:
        if self.owner is None:
            self.owner = {index: node.name for node in self.state.nodes.values() for index in node.local_devices}
        return self.owner

    def consume(self, ctx: Any, pending: list[ClaimSpec], allocation: NodeAllocation, node: NodeInfo) -> bool:
        """Take the picked devices; True when other nodes may see the change (a device or pool not local to it)."""
        state, owner = self.own("allocated", "consumed", "sharers"), self._local()
        wide = False
        for pick in allocation.picks:
            record = state.devices[pick.device]
            if owner.get(pick.device) != node.name:
                wide = True
            if pick.admin:
                continue
            holder = self._holder(ctx, pending[pick.claim])
            counters = True
            if pick.share is not None:
                counters = record.id not in state.sharers
                used = dict(state.consumed.get(record.id, {}))
                for capacity, amount in pick.share.items():
                    used[capacity] = used.get(capacity, 0) + amount
                state.consumed[record.id] = used
                state.sharers[record.id] = [*state.sharers.get(record.id, []), holder]
            else:
                state.allocated[record.id] = holder
            if counters and record.consumes:
                pool = self._pool(record.pool_key)
                for counter, amount in record.consumes:
                    if counter in pool.available:
                        pool.available[counter] -= amount
                        pool.counter_users.setdefault(counter, []).append(record.name)
                if any(owner.get(i) != node.name for i in state.devices_for_node(node.name)
                       if state.devices[i].pool_key == record.pool_key):
                    wide = True
        return wide

    def _pool(self, key: tuple[str, str]) -> Any:
        pool = self.own("pools").pools[key]
        if key not in self.copied_pools:
            pool = dataclasses.replace(pool, available=dict(pool.available),
                                       counter_users={k: list(v) for k, v in pool.counter_users.items()})
            self.state.pools[key] = pool
            self.copied_pools.add(key)
        return pool

    def pin(self, ctx: Any, pending: list[ClaimSpec], allocation: NodeAllocation, node_name: str) -> bool:
        """A named claim allocated by this pod: the next pods of the gang find it allocated, available on this node."""
        pinned = False
        for index, claim in enumerate(pending):
            if claim.label.endswith(">"):
                continue
            namespace, _, name = claim.label.partition("/")
            raw = self.state.claims.get((namespace, name)) or next(
                (c for c in self.claims if _str(_dict(c.get("metadata")).get("name")) == name), None)
            if raw is None:
                continue
            allocated = copy.deepcopy(raw)
            results = [{"request": "", "driver": self.state.devices[p.device].driver,
                        "pool": self.state.devices[p.device].pool, "device": self.state.devices[p.device].name}
                       for p in allocation.picks if p.claim == index]
            allocated.setdefault("status", {})["allocation"] = {
                "devices": {"results": results},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]},
            }
            self.own("claims").claims[(namespace, name)] = allocated
            self.claims = [c for c in self.claims if _str(_dict(c.get("metadata")).get("name")) != name]
            pinned = True
        return pinned


def _message(total: int, placed: int, gang: GangExplanation) -> str:
    if not gang.failed:
        nodes = len(gang.nodes_used())
        return f"all {total} pod{'s' * (total != 1)} fit at once on {nodes} node{'s' * (nodes != 1)}"
    failure = gang.failure.message if gang.failure else ""
    return (f"only {placed} of {total} pods fit at once; {gang.first_failure} finds no node after the "
            f"{placed} before it: {failure}") if placed else f"no pod of the gang fits: {failure}"


def _simulate(gang_list: Sequence[GangPod], snapshot: ClusterSnapshot, claims: Sequence[dict[str, Any]],
              templates: Sequence[dict[str, Any]], viewer: Viewer, *, explain: bool = True) -> GangExplanation:
    """Place the pods in order on a fork of `snapshot` (its `node_names` are the nodes the gang may use). Without
    `explain`, only the placements are computed (no explanation of the first failure, no hints)."""
    gang = _Gang(snapshot, list(claims), list(templates), viewer)
    result = GangExplanation(schedulable=False, message="", total_pods=len(gang_list), placements=[])
    notes: list[str] = []
    for member in gang_list:
        pod = member.pod
        node = ""
        if isinstance(pod, dict) and isinstance(pod.get("spec"), dict):
            shape = gang.shape(pod, notes)
            try:
                gang.refresh(shape, pod)
            except ClaimsError:
                shape.seen = -1  # explained below; the next pod of this shape starts over
            else:
                node = gang.choose(shape)
        if node:
            gang.place(shape, pod, node)
            result.placements.append((member.name, node))
            continue
        result.failed.append(member.name or "<unnamed>")
        if not result.first_failure:
            result.first_failure = member.name or "<unnamed>"
            if explain:
                result.failure = explain_pod(pod, gang.state, extra_claims=gang.claims,
                                             extra_claim_templates=gang.templates, viewer=viewer)
    result.schedulable = not result.failed
    if not explain:
        return result
    result.notes = list(dict.fromkeys([*notes, *(result.failure.notes if result.failure else snapshot.notes)]))
    result.message = _message(len(gang_list), len(result.placements), result)
    if result.failed and result.placements:
        used = result.nodes_used()
        shown = ", ".join(f"{name} x{count}" if count > 1 else name for name, count in list(used.items())[:8])
        result.hints.append(f"largest gang placeable now: {len(result.placements)} of {len(gang_list)} pods, on "
                            f"{shown}{', …' if len(used) > 8 else ''}")
    if result.failure is not None:
        result.hints += [f"{result.first_failure}: {hint}" for hint in result.failure.hints]
    return result


def required_topology(pods: Sequence[GangPod]) -> str:
    """The node label every pod of the gang must share a value of: Kueue's topology-aware scheduling annotation on
    the pod template (`kueue.x-k8s.io/podset-required-topology`), or a required pod affinity of the pods to
    themselves (`matchLabels` they carry) on a topologyKey — the first pod goes anywhere, the others follow it.
    "" when neither."""
    for member in pods:
        metadata = _dict(member.pod.get("metadata"))
        value = _dict(metadata.get("annotations")).get(REQUIRED_TOPOLOGY)
        if isinstance(value, str) and value:
            return value
        labels = _dict(metadata.get("labels"))
        terms = _dict(_dict(_dict(member.pod.get("spec")).get("affinity")).get("podAffinity")).get(
            "requiredDuringSchedulingIgnoredDuringExecution")
        for term in _list(terms):
            term = _dict(term)
            selector = _dict(term.get("labelSelector"))
            wanted = _dict(selector.get("matchLabels"))
            key = _str(term.get("topologyKey"))
            if key and wanted and not selector.get("matchExpressions") and all(
                    labels.get(k) == v for k, v in wanted.items()):
                return key
    return ""


def _fitting_anywhere(gang_list: Sequence[GangPod], snapshot: ClusterSnapshot, claims: Sequence[dict[str, Any]],
                      templates: Sequence[dict[str, Any]], viewer: Viewer) -> set[str]:
    """The nodes where some pod of the gang fits on the snapshot as it is (each distinct pod shape filtered once)."""
    gang = _Gang(snapshot, list(claims), list(templates), viewer)
    found: set[str] = set()
    for member in gang_list:
        pod = member.pod
        if not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
            continue
        shape = gang.shape(pod, [])
        if shape.seen >= 0:
            continue  # this shape was filtered already
        try:
            gang.refresh(shape, pod)
        except ClaimsError:
            shape.seen = 0
            continue
        found.update(name for name, result in shape.results.items() if result is None)
    return found


def _domain_view(snapshot: ClusterSnapshot, names: list[str]) -> ClusterSnapshot:
    view = copy.copy(snapshot)
    view.node_names = names
    view.nodes = {name: snapshot.nodes[name] for name in names}
    return view


def _in_domains(gang_list: Sequence[GangPod], snapshot: ClusterSnapshot, topology: str, claims: Sequence[dict[str, Any]],
                templates: Sequence[dict[str, Any]], viewer: Viewer) -> GangExplanation:
    """All pods within one value of the `topology` node label (zone, rack, NVLink clique): the gang is simulated
    in each domain; the tightest domain that holds it wins, else the closest one is explained."""
    domains: dict[str, list[str]] = {}
    for name in snapshot.node_names:
        value = snapshot.nodes[name].labels.get(topology)
        if value is not None:
            domains.setdefault(value, []).append(name)
    unlabelled = len(snapshot.node_names) - sum(len(names) for names in domains.values())
    if not domains:
        result = GangExplanation(schedulable=False, total_pods=len(gang_list), placements=[],
                                 failed=[p.name for p in gang_list], first_failure=gang_list[0].name if gang_list
                                 else "", message=f"no node carries the label {topology}: the gang's topology "
                                                  "constraint cannot be met")
        result.topology = topology
        return result
    # Many small domains (racks, cliques, one per node): one pass over every node first, and a domain where no pod
    # of the gang fits on any node holds none of it — only the others are simulated.
    usable = _fitting_anywhere(gang_list, snapshot, claims, templates, viewer) if len(domains) > 16 else None
    outcomes = {value: _simulate(gang_list, _domain_view(snapshot, names), claims, templates, viewer, explain=False)
                if usable is None or usable.intersection(names) else GangExplanation(False, "", len(gang_list), [])
                for value, names in sorted(domains.items())}
    fitting = [value for value, outcome in outcomes.items() if outcome.schedulable]
    if fitting:
        chosen = min(fitting, key=lambda value: (len(outcomes[value].nodes_used()), value))
    else:
        chosen = min(outcomes, key=lambda value: (-outcomes[value].largest, len(domains[value]), value))
    result = _simulate(gang_list, _domain_view(snapshot, domains[chosen]), claims, templates, viewer)
    result.topology, result.domain = topology, chosen
    result.domains = {value: outcome.largest for value, outcome in outcomes.items()}
    where = f"{topology}={chosen}"
    if result.schedulable:
        result.message = f"{result.message}, all in {where} ({len(fitting)} of {len(domains)} domains can hold it)"
    else:
        result.message = (f"no {topology} domain holds all {len(gang_list)} pods at once ({len(domains)} "
                          f"domain{'s' * (len(domains) != 1)}); the closest, {where}, holds {result.largest}: "
                          f"{result.message}")
        ranked = sorted(outcomes.items(), key=lambda item: (-item[1].largest, item[0]))[:5]
        result.hints.insert(0, f"pods each {topology} domain holds now: "
                               + ", ".join(f"{value}: {outcome.largest}" for value, outcome in ranked)
                               + (", …" if len(outcomes) > 5 else ""))
    if unlabelled:
        result.notes.append(f"{unlabelled} node(s) without the label {topology} are not used by this gang")
    return result


def _annotation(pods: Sequence[GangPod], key: str) -> str:
    for member in pods:
        value = _dict(_dict(member.pod.get("metadata")).get("annotations")).get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def preferred_topology(pods: Sequence[GangPod]) -> str:
    """Kueue's `kueue.x-k8s.io/podset-preferred-topology` on the pod template: the level where the gang would best
    share one domain ("" when absent)."""
    return _annotation(pods, PREFERRED_TOPOLOGY)


def _chain(label: str, topologies: Mapping[str, Sequence[str]] | None) -> tuple[list[str], str]:
    """The levels from `label` up to the widest (narrowest first) of the first Topology (by name) holding `label`,
    and that Topology's name; just [label] and "" when no known Topology holds it."""
    for name, levels in sorted((topologies or {}).items()):
        if label in levels:
            return list(reversed(list(levels)[: list(levels).index(label) + 1])), name
    return [label], ""


def _not_a_level(annotation: str, label: str, topologies: Mapping[str, Sequence[str]]) -> str:
    known = ", ".join(f"{name} ({' > '.join(levels)})" for name, levels in sorted(topologies.items()))
    return (f"{annotation}: {label} is not a level of any Kueue Topology of this cluster "
            f"({known or 'it has none'}): Kueue would not admit this workload")


def _preferred(gang_list: Sequence[GangPod], snapshot: ClusterSnapshot, label: str,
               topologies: Mapping[str, Sequence[str]] | None, claims: Sequence[dict[str, Any]],
               templates: Sequence[dict[str, Any]], viewer: Viewer) -> GangExplanation:
    """Kueue's preferred topology: one domain of the preferred level if the gang fits in one, else one domain of
    the next wider level of its Topology, and so on; else no constraint at all."""
    chain, source = _chain(label, topologies)
    said: list[str] = []
    tried: list[str] = []
    for level in chain:
        result = _in_domains(gang_list, snapshot, level, claims, templates, viewer)
        tried.append(level)
        if result.schedulable:
            said.append(f"in one {level}={result.domain}: yes")
            break
        said.append(f"in one {level}? no")
    else:
        result = _simulate(gang_list, snapshot, claims, templates, viewer)
        tried.append("")
        said.append(f"without a common domain: {'yes' if result.schedulable else 'no'}")
    result.preferred, result.tried = label, tried
    result.message = f"preferred topology {label}: fits {'; '.join(said)} — {result.message}"
    if source:
        result.notes.append(f"levels from Kueue Topology {source}: {' > '.join(reversed(chain))} (widest first)")
    elif topologies is None:
        result.notes.append(f"the cluster's Kueue Topologies are not known here: only {label} was tried before no "
                            "constraint (Kueue would try each wider level of the flavor's Topology)")
    else:
        result.notes.append(_not_a_level(PREFERRED_TOPOLOGY, label, topologies))
    return result


def explain_gang(
    pods: Sequence[GangPod] | Sequence[dict[str, Any]],
    snapshot: ClusterSnapshot,
    *,
    extra_claims: Sequence[dict[str, Any]] = (),
    extra_claim_templates: Sequence[dict[str, Any]] = (),
    viewer: Viewer = EVERYONE,
    topology: str = "",
    topology_levels: Mapping[str, Sequence[str]] | None = None,
) -> GangExplanation:
    """Place `pods` in order on a copy of the snapshot and say whether all of them fit at the same time.

    With a `topology` node label (or Kueue's required-topology annotation, or a required self pod-affinity on the
    pods), all of them must land on nodes sharing one value of it. With Kueue's preferred-topology annotation, one
    domain of that level is tried, then one of each wider level, then no constraint; the explanation says where it
    landed. `topology_levels`: Kueue's Topologies (name → node labels of the levels, widest first) that give the
    wider levels; None when they are not known (offline): a preferred level is then tried alone. A required or
    preferred level that is no level of any of them is noted (Kueue would not admit the workload). Never raises
    for malformed manifests (the failing pod's explanation says what is wrong)."""
    gang_list = [p if isinstance(p, GangPod) else GangPod(p, "Pod") for p in pods]
    annotated = "" if topology else _annotation(gang_list, REQUIRED_TOPOLOGY)
    required = topology or required_topology(gang_list)
    if required:
        result = _in_domains(gang_list, snapshot, required, extra_claims, extra_claim_templates, viewer)
        if annotated and topology_levels is not None and not any(
                annotated in levels for levels in topology_levels.values()):
            result.notes.append(_not_a_level(REQUIRED_TOPOLOGY, annotated, topology_levels))
        return result
    preferred = preferred_topology(gang_list)
    if preferred:
        return _preferred(gang_list, snapshot, preferred, topology_levels, extra_claims, extra_claim_templates, viewer)
    return _simulate(gang_list, snapshot, extra_claims, extra_claim_templates, viewer)
