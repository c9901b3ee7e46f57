"""ClusterSnapshot: an immutable, indexed view of the objects the scheduler looks at, built from raw Kubernetes JSON.

What is kept (and why):
- nodes: labels, taints, `spec.unschedulable`, allocatable as integers, the sum of the requests of the pods bound
  to them (pods with `spec.nodeName` that are not Succeeded/Failed) and those pods themselves (for hints);
- DRA (resource.k8s.io/v1): pools built from ResourceSlices (highest generation only; a pool is complete when it
  has `resourceSliceCount` slices of that generation; a pool publishing one device name twice is invalid), devices
  with the nodes they are reachable from (slice `nodeName`, `nodeSelector`, `allNodes` or per-device selection),
  shared counters minus what allocated devices consume, DeviceClasses, ResourceClaims (allocated ones consume their
  devices, except results with `adminAccess`; a result with a `shareID` on a device with `allowMultipleAllocations`
  consumes its `consumedCapacity` instead of the whole device) and ResourceClaimTemplates.

Building never raises: a malformed object is skipped and described in `notes`. The snapshot is not modified after
`snapshot_from_objects` returns, except for caches that are filled idempotently (safe to share between threads).
"""

from __future__ import annotations

import gc
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from catalog.cel import DeviceInput, device_input
from catalog.feasibility.resources import PODS, node_allocatable, pod_requests
from inventory.k8s import consumable
from inventory.k8s.semantics import BLOCKING_TAINT_EFFECTS, comparisons_enabled, node_selector_matches, scheduler_amount
from inventory.k8s.semantics import as_dict as _dict
from inventory.k8s.semantics import as_list as _list
from inventory.k8s.semantics import as_str as _str
from inventory.podstatus import pod_claim_served_resources

__all__ = [
    "BoundPod",
    "ClusterSnapshot",
    "DeviceRecord",
    "NodeInfo",
    "PoolInfo",
    "scenario_snapshot",
    "snapshot_from_objects",
]

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
DeviceID = tuple[str, str, str]  # (driver, pool, device)
PoolKey = tuple[str, str]  # (driver, pool)
CounterKey = tuple[str, str]  # (counter set, counter)
HostPort = tuple[str, str, int]  # (protocol, hostIP, port)








def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod bound to a node that still holds its requests."""

    namespace: str
    name: str
    requests: Mapping[str, int]
    phase: str
    priority: int
    owner_kind: str = ""
    owner_name: str = ""
    active_deadline_seconds: int | None = None
    claims: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_job(self) -> bool:
        return self.owner_kind == "Job"


@dataclass(slots=True)
class NodeInfo:
    """What the filter plugins need to know about one node."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    unschedulable: bool
    allocatable: Mapping[str, int]
    requested: dict[str, int] = field(default_factory=dict)
    pods: list[BoundPod] = field(default_factory=list)
    host_ports: set[HostPort] = field(default_factory=set)
    local_devices: list[int] = field(default_factory=list)  # indexes into ClusterSnapshot.devices

    @property
    def blocking_taints(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(t for t in self.taints if t.get("effect") in BLOCKING_TAINT_EFFECTS)

    @property
    def allowed_pods(self) -> int:
        return self.allocatable.get(PODS, 0)

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)


@dataclass(slots=True)
class PoolInfo:
    """The current generation of one DRA pool."""

    driver: str
    pool: str
    generation: int
    expected_slices: int
    slices: list[str]
    invalid_reason: str = ""
    counters: dict[CounterKey, int] = field(default_factory=dict)  # total per counter set/counter
    available: dict[CounterKey, int] = field(default_factory=dict)  # after allocated devices' consumption
    counter_users: dict[CounterKey, list[str]] = field(default_factory=dict)  # allocated devices that consume

    @property
    def complete(self) -> bool:
        return self.expected_slices > 0 and len(self.slices) == self.expected_slices

    @property
    def usable(self) -> bool:
        return self.complete and not self.invalid_reason

    @property
    def state(self) -> str:
        if self.invalid_reason:
            return f"invalid ({self.invalid_reason})"
        if not self.complete:
            return f"incomplete: {len(self.slices)} of {self.expected_slices} slices published"
        return "complete"


@dataclass(slots=True)
class DeviceRecord:
    """One device of a current pool generation, with where it can be used."""

    index: int
    driver: str
    pool: str
    name: str
    raw: Mapping[str, Any]
    taints: tuple[Mapping[str, Any], ...]
    consumes: tuple[tuple[CounterKey, int], ...]
    allow_multiple: bool
    usable: bool  # its pool is complete and valid
    input: DeviceInput | None = None  # the CEL view; only for usable devices
    _capacities: dict[str, consumable.Capacity] | None = None

    @property
    def capacities(self) -> dict[str, consumable.Capacity]:
        """The device's capacities with their request policies, parsed on first use (idempotent)."""
        if self._capacities is None:
            self._capacities = consumable.device_capacities(self.driver, self.raw.get("capacity"))
        return self._capacities

    @property
    def id(self) -> DeviceID:
        return (self.driver, self.pool, self.name)

    @property
    def pool_key(self) -> PoolKey:
        return (self.driver, self.pool)

    @property
    def attributes(self) -> Mapping[str, Any]:
        return _dict(self.raw.get("attributes"))


@dataclass(slots=True)
class _SharedTarget:
    """Devices reachable from every node (`selector` None) or from the nodes a NodeSelector matches."""

    selector: Mapping[str, Any] | None
    devices: list[int]


class ClusterSnapshot:
    """Immutable indexed cluster state for feasibility explanations. Build it with `snapshot_from_objects`."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.node_names: list[str] = []
        self.devices: list[DeviceRecord] = []
        self.device_by_id: dict[DeviceID, int] = {}
        self.pools: dict[PoolKey, PoolInfo] = {}
        self.device_classes: dict[str, dict[str, Any]] = {}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.claim_templates: dict[tuple[str, str], dict[str, Any]] = {}
        self.allocated: dict[DeviceID, str] = {}  # device → "namespace/claim" holding it (non-admin results)
        # Devices with allowMultipleAllocations that allocated claims share (results with a shareID): what they
        # consume of each capacity (qualified names) and which claims hold shares.
        self.consumed: dict[DeviceID, dict[str, Fraction]] = {}
        self.sharers: dict[DeviceID, list[str]] = {}
        self.claim_pods: dict[str, list[str]] = {}  # "namespace/claim" → "namespace/pod" from status.reservedFor
        self.notes: list[str] = []
        # Toleration Lt/Gt (Kubernetes 1.35+, a feature gate): honoured unless the cluster is known to be older.
        self.toleration_comparisons = True
        self._shared: list[_SharedTarget] = []
        self._node_devices: dict[str, tuple[int, ...]] = {}
        self._lock = threading.Lock()
        self.match_cache: dict[tuple[str, ...], dict[int, bool | str]] = {}

    def __repr__(self) -> str:
        return f"<ClusterSnapshot nodes={len(self.nodes)} devices={len(self.devices)} claims={len(self.claims)}>"

    def devices_for_node(self, name: str) -> tuple[int, ...]:
        """Indexes of every current-generation device reachable from the node (usable or not)."""
        cached = self._node_devices.get(name)
        if cached is not None:
            return cached
        node = self.nodes.get(name)
        if node is None:
            return ()
        found = list(node.local_devices)
        for target in self._shared:
            if target.selector is None or node_selector_matches(target.selector, node.labels, name):
                found.extend(target.devices)
        result = tuple(found)
        self._node_devices[name] = result  # idempotent: concurrent builders compute the same tuple
        return result

    def match_memo(self, key: tuple[str, ...]) -> dict[int, bool | str]:
        """The per-selector-list memo of CEL outcomes (device index → True/False/error message)."""
        memo = self.match_cache.get(key)
        if memo is None:
            with self._lock:
                memo = self.match_cache.setdefault(key, {})
        return memo


class _Notes:
    """Counts skipped objects per kind and keeps a few examples, so one bad batch cannot flood the notes."""

    def __init__(self) -> None:
        self.skipped: dict[str, list[str]] = defaultdict(list)
        self.other: list[str] = []

    def skip(self, kind: str, why: str) -> None:
        self.skipped[kind].append(why)

    def render(self) -> list[str]:
        out = list(self.other)
        for kind, reasons in self.skipped.items():
            examples = "; ".join(reasons[:3]) + ("; …" if len(reasons) > 3 else "")
            out.append(f"skipped {len(reasons)} malformed {kind}(s): {examples}")
        return out


def _name(obj: Mapping[str, Any]) -> str:
    return _str(_dict(obj.get("metadata")).get("name"))


def _namespace(obj: Mapping[str, Any]) -> str:
    return _str(_dict(obj.get("metadata")).get("namespace")) or "default"


def _taints(raw: Any) -> tuple[Mapping[str, Any], ...]:
    return tuple(t for t in _list(raw) if isinstance(t, dict) and isinstance(t.get("key"), str))


def pod_host_ports(pod: Mapping[str, Any]) -> set[HostPort]:
    """Host ports the pod's containers ask for: (protocol, hostIP, port)."""
    ports: set[HostPort] = set()
    for container in _list(_dict(pod.get("spec")).get("containers")):
        for port in _list(_dict(container).get("ports")):
            port = _dict(port)
            number = _int(port.get("hostPort"))
            if number and number > 0:
                ports.add((_str(port.get("protocol")) or "TCP", _str(port.get("hostIP")) or "0.0.0.0", number))  # noqa: S104
    return ports


def _add_node(snapshot: ClusterSnapshot, raw: Any, notes: _Notes) -> None:
    if not isinstance(raw, dict):
        notes.skip("Node", "not an object")
        return
    name = _name(raw)
    if not name:
        notes.skip("Node", "no metadata.name")
        return
    if name in snapshot.nodes:
        notes.skip("Node", f"{name} listed twice")
        return
    allocatable, problems = node_allocatable(raw)
    notes.other.extend(f"node {name}: {problem}" for problem in problems)
    labels = {k: v for k, v in _dict(_dict(raw.get("metadata")).get("labels")).items() if isinstance(v, str)}
    spec = _dict(raw.get("spec"))
    snapshot.nodes[name] = NodeInfo(
        name=name,
        labels=labels,
        taints=_taints(spec.get("taints")),
        unschedulable=spec.get("unschedulable") is True,
        allocatable=allocatable,
    )


def _add_pod(snapshot: ClusterSnapshot, raw: Any, notes: _Notes, unknown_nodes: set[str]) -> None:
    if not isinstance(raw, dict):
        notes.skip("Pod", "not an object")
        return
    spec, status = _dict(raw.get("spec")), _dict(raw.get("status"))
    node_name = _str(spec.get("nodeName"))
    if not node_name or _str(status.get("phase")) in TERMINAL_PHASES:
        return
    node = snapshot.nodes.get(node_name)
    if node is None:
        unknown_nodes.add(node_name)
        return
    name = _name(raw)
    if not name:
        notes.skip("Pod", f"a pod on {node_name} without metadata.name")
        return
    requests, problems = pod_requests(raw)
    if problems:
        notes.other.append(f"pod {_namespace(raw)}/{name}: {problems[0]}")
    # Served by the scheduler's generated DRA claim (DRAExtendedResource): the claim's devices hold those units, not
    # the node's device plugin.
    served = pod_claim_served_resources(raw)
    requests = {resource: amount for resource, amount in requests.items() if resource not in served}
    owner: dict[str, Any] = next((_dict(o) for o in _list(_dict(raw.get("metadata")).get("ownerReferences")) if _dict(o).get("controller")), {})
    claims = []
    generated = {
        _str(_dict(s).get("name")): _str(_dict(s).get("resourceClaimName"))
        for s in _list(status.get("resourceClaimStatuses"))
    }
    for entry in _list(spec.get("resourceClaims")):
        entry = _dict(entry)
        claim = _str(entry.get("resourceClaimName")) or generated.get(_str(entry.get("name")), "")
        if claim:
            claims.append(claim)
    pod = BoundPod(
        namespace=_namespace(raw),
        name=name,
        requests=requests,
        phase=_str(status.get("phase")),
        priority=_int(spec.get("priority")) or 0,
        owner_kind=_str(_dict(owner).get("kind")),
        owner_name=_str(_dict(owner).get("name")),
        active_deadline_seconds=_int(spec.get("activeDeadlineSeconds")),
        claims=tuple(claims),
    )
    node.pods.append(pod)
    requested = node.requested
    for resource, amount in requests.items():
        requested[resource] = requested.get(resource, 0) + amount
    node.host_ports |= pod_host_ports(raw)


@dataclass
class _PoolSlices:
    generation: int
    slices: list[dict[str, Any]] = field(default_factory=list)
    stale: int = 0


def _counter_amounts(raw: Any) -> dict[str, int]:
    out = {}
    for counter, value in _dict(raw).items():
        try:
            out[str(counter)] = scheduler_amount("", _dict(value).get("value"))
        except ValueError:
            continue
    return out


def _consumption(device: Mapping[str, Any]) -> tuple[tuple[CounterKey, int], ...]:
    out = []
    for entry in _list(device.get("consumesCounters")):
        entry = _dict(entry)
        counter_set = _str(entry.get("counterSet"))
        for counter, amount in _counter_amounts(entry.get("counters")).items():
            out.append(((counter_set, counter), amount))
    return tuple(out)


def _device_target(slice_spec: Mapping[str, Any], device: Mapping[str, Any]) -> tuple[str, Any]:
    """("node", name) | ("all", None) | ("selector", NodeSelector) | ("none", None) for one device."""
    source = device if slice_spec.get("perDeviceNodeSelection") is True else slice_spec
    if _str(source.get("nodeName")):
        return "node", source["nodeName"]
    if source.get("allNodes") is True:
        return "all", None
    if isinstance(source.get("nodeSelector"), dict):
        return "selector", source["nodeSelector"]
    return "none", None


def _add_slices(snapshot: ClusterSnapshot, slices: Iterable[Any], notes: _Notes) -> None:
    pools: dict[PoolKey, _PoolSlices] = {}
    for raw in slices:
        spec = _dict(_dict(raw).get("spec"))
        pool = _dict(spec.get("pool"))
        driver, pool_name, generation = _str(spec.get("driver")), _str(pool.get("name")), _int(pool.get("generation"))
        if not driver or not pool_name or generation is None:
            notes.skip("ResourceSlice", f"{_name(_dict(raw)) or '?'}: no driver, pool name or generation")
            continue
        key = (driver, pool_name)
        state = pools.get(key)
        if state is None or generation > state.generation:
            stale = (state.stale + len(state.slices)) if state else 0
            pools[key] = _PoolSlices(generation, [raw], stale)
        elif generation == state.generation:
            state.slices.append(raw)
        else:
            state.stale += 1
    stale_pools = [f"{d}/{p}" for (d, p), s in pools.items() if s.stale]
    if stale_pools:
        notes.other.append(f"older generations of {len(stale_pools)} DRA pool(s) ignored: {', '.join(stale_pools[:5])}")

    shared: dict[int, _SharedTarget] = {}
    for (driver, pool_name), state in sorted(pools.items()):
        slices_ = sorted(state.slices, key=lambda s: _name(_dict(s)))
        expected = max((_int(_dict(_dict(s.get("spec")).get("pool")).get("resourceSliceCount")) or 0) for s in slices_)
        info = PoolInfo(driver, pool_name, state.generation, expected, [_name(s) for s in slices_])
        seen: set[str] = set()
        entries: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for raw in slices_:
            spec = _dict(raw.get("spec"))
            for counter_set in _list(spec.get("sharedCounters")):
                counter_set = _dict(counter_set)
                for counter, amount in _counter_amounts(counter_set.get("counters")).items():
                    info.counters[(_str(counter_set.get("name")), counter)] = amount
            for device in _list(spec.get("devices")):
                if not isinstance(device, dict) or not _str(device.get("name")):
                    notes.skip("ResourceSlice device", f"{_name(raw)}: a device without a name")
                    continue
                if device["name"] in seen and not info.invalid_reason:
                    info.invalid_reason = f"duplicate device name {device['name']}"
                seen.add(device["name"])
                entries.append((spec, device))
        info.available = dict(info.counters)
        snapshot.pools[(driver, pool_name)] = info
        for spec, device in entries:
            index = len(snapshot.devices)
            record = DeviceRecord(
                index=index,
                driver=driver,
                pool=pool_name,
                name=device["name"],
                raw=device,
                taints=_taints(device.get("taints")),
                consumes=_consumption(device),
                allow_multiple=device.get("allowMultipleAllocations") is True,
                usable=info.usable,
            )
            if record.usable:
                record.input = device_input(
                    driver=driver,
                    attributes=device.get("attributes"),
                    capacity=device.get("capacity"),
                    allow_multiple_allocations=record.allow_multiple,
                )
            snapshot.devices.append(record)
            snapshot.device_by_id.setdefault(record.id, index)
            kind, target = _device_target(spec, device)
            if kind == "node":
                node = snapshot.nodes.get(target)
                if node is not None:
                    node.local_devices.append(index)
            elif kind in ("all", "selector"):
                slot = id(spec) if kind == "all" or spec.get("perDeviceNodeSelection") is not True else id(device)
                shared.setdefault(slot, _SharedTarget(target, [])).devices.append(index)
    snapshot._shared = list(shared.values())


def _claim_key(claim: Mapping[str, Any]) -> str:
    return f"{_namespace(claim)}/{_name(claim)}"


def _add_claims(snapshot: ClusterSnapshot, claims: Iterable[Any], notes: _Notes) -> None:
    for raw in claims:
        if not isinstance(raw, dict) or not _name(raw):
            notes.skip("ResourceClaim", "not an object with metadata.name")
            continue
        key = (_namespace(raw), _name(raw))
        snapshot.claims[key] = raw
        status = _dict(raw.get("status"))
        reserved = [
            f"{key[0]}/{_str(_dict(r).get('name'))}"
            for r in _list(status.get("reservedFor"))
            if _dict(r).get("resource", "pods") == "pods" and _str(_dict(r).get("name"))
        ]
        if reserved:
            snapshot.claim_pods[_claim_key(raw)] = reserved
        results = _list(_dict(_dict(_dict(status.get("allocation")).get("devices"))).get("results"))
        for result in results:
            result = _dict(result)
            if result.get("adminAccess") is True:
                continue  # admin access does not consume the device
            device_id = (_str(result.get("driver")), _str(result.get("pool")), _str(result.get("device")))
            if not all(device_id):
                continue
            index = snapshot.device_by_id.get(device_id)
            if result.get("shareID") and index is not None and snapshot.devices[index].allow_multiple:
                consumable.add(snapshot.consumed.setdefault(device_id, {}),
                               consumable.consumed_amounts(device_id[0], result.get("consumedCapacity")))
                snapshot.sharers.setdefault(device_id, []).append(_claim_key(raw))
            else:
                snapshot.allocated.setdefault(device_id, _claim_key(raw))
    # Counters consumed by allocated devices (a device allocated by several claims still consumes once).
    for device_id in [*snapshot.allocated, *(d for d in snapshot.sharers if d not in snapshot.allocated)]:
        index = snapshot.device_by_id.get(device_id)
        if index is None:
            continue
        record = snapshot.devices[index]
        pool = snapshot.pools[record.pool_key]
        for counter_key, amount in record.consumes:
            if counter_key in pool.available:
                pool.available[counter_key] -= amount
                pool.counter_users.setdefault(counter_key, []).append(record.name)


def snapshot_from_objects(
    *,
    nodes: Sequence[dict[str, Any]],
    pods: Sequence[dict[str, Any]],
    resource_slices: Sequence[dict[str, Any]] = (),
    device_classes: Sequence[dict[str, Any]] = (),
    resource_claims: Sequence[dict[str, Any]] = (),
    resource_claim_templates: Sequence[dict[str, Any]] = (),
    kubernetes_version: tuple[int, int] | None = None,
) -> ClusterSnapshot:
    """Index raw Kubernetes objects (`kubectl get -o json` items) for `explain_pod`. Never raises. With the
    cluster's version, version-dependent rules (toleration Lt/Gt) follow it; without, the objects are taken as the
    cluster accepted them."""
    collecting = gc.isenabled()
    gc.disable()  # a bulk build of long-lived objects: collections in the middle would only rescan them
    try:
        snapshot = _build(nodes, pods, resource_slices, device_classes, resource_claims, resource_claim_templates)
        if kubernetes_version is not None:
            snapshot.toleration_comparisons = comparisons_enabled(kubernetes_version)
        return snapshot
    finally:
        if collecting:
            gc.enable()


def scenario_snapshot(objects: Iterable[dict[str, Any]], *, kubernetes_version: tuple[int, int] | None = None
                      ) -> ClusterSnapshot:
    """A snapshot of a mixed list of objects (a kubesim scenario, one `kubectl get … -o json` dump), by kind."""
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in objects:
        if isinstance(obj, dict):
            by_kind[_str(obj.get("kind"))].append(obj)
    return snapshot_from_objects(
        nodes=by_kind["Node"], pods=by_kind["Pod"], resource_slices=by_kind["ResourceSlice"],
        device_classes=by_kind["DeviceClass"], resource_claims=by_kind["ResourceClaim"],
        resource_claim_templates=by_kind["ResourceClaimTemplate"], kubernetes_version=kubernetes_version,
    )


def _build(nodes: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]], resource_slices: Sequence[dict[str, Any]],
           device_classes: Sequence[dict[str, Any]], resource_claims: Sequence[dict[str, Any]],
           resource_claim_templates: Sequence[dict[str, Any]]) -> ClusterSnapshot:
    snapshot = ClusterSnapshot()
    notes = _Notes()
    for raw in nodes or ():
        _add_node(snapshot, raw, notes)
    snapshot.node_names = sorted(snapshot.nodes)
    unknown_nodes: set[str] = set()
    for raw in pods or ():
        _add_pod(snapshot, raw, notes, unknown_nodes)
    if unknown_nodes:
        notes.other.append(f"pods bound to {len(unknown_nodes)} node(s) not in the snapshot were ignored")
    _add_slices(snapshot, resource_slices or (), notes)
    for raw in device_classes or ():
        if not isinstance(raw, dict) or not _name(raw):
            notes.skip("DeviceClass", "not an object with metadata.name")
            continue
        snapshot.device_classes[_name(raw)] = raw
    _add_claims(snapshot, resource_claims or (), notes)
    for raw in resource_claim_templates or ():
        if not isinstance(raw, dict) or not _name(raw):
            notes.skip("ResourceClaimTemplate", "not an object with metadata.name")
            continue
        snapshot.claim_templates[(_namespace(raw), _name(raw))] = raw
    snapshot.notes = notes.render()
    return snapshot
