"""Which inventory devices belong to an offering.

A device belongs to an offering when its mode is the offering's unit kind (so a time-slice replica is never sold
as a card) and then:
- device plugin: the node resource is the offering's extended resource and the node's labels match the offering's
  node selector;
- DRA: every CEL selector of the offering's DeviceClass (as mirrored from that cluster) and the offering's own
  selector are true for the device, and the node labels match the node selector if one is set.

A CEL runtime error (e.g. a missing attribute) is not a "no": like the scheduler, which fails the allocation, the
device is left out and counted as a selector error so that the admin sees it.

`ClusterDevices` loads one cluster's devices, nodes and classes once; matching many offerings against it (the
capacity recomputation) reuses the prepared CEL inputs.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from catalog import cel
from catalog.isolation import isolation_problem
from catalog.models import DRA_KINDS, Offering
from inventory.k8s.semantics import labels_match
from inventory.models import Cluster, Device, DeviceClass, Node, Path

logger = logging.getLogger(__name__)

DEVICE_VALUES = (
    "key", "path", "mode", "node_name", "node_schedulable", "resource_name", "driver", "pool_complete", "model",
    "memory_mib", "architecture", "compute_capability", "driver_version", "cuda_version", "cards", "parent",
    "capacity", "allocatable", "in_use", "free", "unhealthy", "attributes", "capacities",
    "allow_multiple_allocations", "consumes_counters", "device_name", "pool", "mig_profile", "consumed_share",
    "id", "selector_hash",
)


@dataclass
class NodeFacts:
    labels: dict[str, Any]
    taints: list[Any]
    schedulable: bool
    kubelet_version: str


@dataclass
class Match:
    """The devices of one offering in one cluster."""

    devices: list[dict[str, Any]] = field(default_factory=list)
    selector_errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def nodes(self) -> set[str]:
        return {d["node_name"] for d in self.devices if d["node_name"]}


def class_selectors(raw: dict[str, Any]) -> list[str]:
    selectors = (raw.get("spec") or {}).get("selectors") or []
    return [
        str(s["cel"]["expression"]) for s in selectors
        if isinstance(s, dict) and isinstance(s.get("cel"), dict) and isinstance(s["cel"].get("expression"), str)
    ]


class SelectorOutcomes:
    """Outcomes of a list of CEL selectors by device `selector_hash`, kept by the process between recomputations.

    A selector's outcome depends only on what the hash covers (driver, attributes, capacity,
    allowMultipleAllocations), so a device whose attributes did not change since the last recomputation is not
    evaluated again, and its attributes are not even read. Churn changes allocations, not attributes: on `large`
    a recomputation then reads a few hundred devices' attributes instead of 30,000. Bounded: at most `max_lists`
    selector lists of at most `max_entries` outcomes each (a list that grows past it starts afresh)."""

    def __init__(self, *, max_lists: int = 256, max_entries: int = 200_000) -> None:
        self.max_lists, self.max_entries = max_lists, max_entries
        self._lists: dict[tuple[str, ...], dict[str, bool | str]] = {}
        self._lock = threading.Lock()

    def memo(self, expressions: tuple[str, ...]) -> dict[str, bool | str]:
        with self._lock:
            outcomes = self._lists.pop(expressions, None)
            if outcomes is None or len(outcomes) > self.max_entries:
                outcomes = {}
            self._lists[expressions] = outcomes  # most recently used last
            while len(self._lists) > self.max_lists:
                del self._lists[next(iter(self._lists))]
            return outcomes

    def clear(self) -> None:
        with self._lock:
            self._lists.clear()


SELECTOR_OUTCOMES = SelectorOutcomes()
_SELECTOR_INPUTS = ("attributes", "capacities")
_ATTRIBUTE_BATCH = 2000


class ClusterDevices:
    """One cluster's accelerator devices, nodes and DeviceClasses, loaded once.

    With `attributes=False` the devices' attributes and capacities (most of the bytes of a device row) are read only
    for the devices a selector has to evaluate: those whose outcome SELECTOR_OUTCOMES does not know."""

    def __init__(self, cluster: Cluster, *, modes: Iterable[str] | None = None, attributes: bool = True) -> None:
        self.cluster = cluster
        devices = Device.objects.filter(cluster=cluster)
        if modes is not None:  # e.g. the live selector check needs only the devices of one unit kind
            devices = devices.filter(mode__in=list(modes))
        fields = DEVICE_VALUES if attributes else tuple(f for f in DEVICE_VALUES if f not in _SELECTOR_INPUTS)
        self.devices: list[dict[str, Any]] = list(devices.order_by("node_name", "key").values(*fields))
        self.nodes: dict[str, NodeFacts] = {
            name: NodeFacts(labels or {}, taints or [], bool(ready) and not unschedulable, kubelet or "")
            for name, labels, taints, ready, unschedulable, kubelet in Node.objects.live()
            .filter(cluster=cluster)
            .values_list("name", "labels", "taints", "ready", "unschedulable", "kubelet_version")
        }
        self.classes: dict[str, dict[str, Any]] = dict(DeviceClass.objects.live().filter(cluster=cluster).values_list("name", "raw"))
        self._by_kind: dict[str, list[int]] = defaultdict(list)
        for index, device in enumerate(self.devices):
            self._by_kind[device["mode"]].append(index)
        self._inputs: dict[int, cel.DeviceInput] = {}
        self._matches: dict[tuple[Any, ...], Match] = {}

    def _input(self, index: int) -> cel.DeviceInput:
        prepared = self._inputs.get(index)
        if prepared is None:
            device = self.devices[index]
            prepared = self._inputs[index] = cel.device_input(
                driver=device["driver"], attributes=device["attributes"], capacity=device["capacities"],
                allow_multiple_allocations=device["allow_multiple_allocations"],
            )
        return prepared

    def _read_selector_inputs(self, indexes: list[int]) -> list[int]:
        """Read the attributes of the devices that lack them; returns the indexes still present. A row rewritten
        since the first read is taken as it is now (hash and inputs together); a deleted one is left out."""
        unread = [i for i in indexes if "attributes" not in self.devices[i]]
        gone: set[int] = set()
        columns = ("pk", "selector_hash", "driver", "allow_multiple_allocations", *_SELECTOR_INPUTS)
        # Most of the cluster (a worker's first recomputation): one scan; otherwise by primary key, a batch at a time.
        whole = len(unread) > len(self.devices) // 2
        for start in range(0, len(unread), len(unread) if whole else _ATTRIBUTE_BATCH):
            chunk = unread[start:len(unread) if whole else start + _ATTRIBUTE_BATCH]
            selected = (Device.objects.filter(cluster=self.cluster, path=Path.DRA) if whole else
                        Device.objects.filter(pk__in=[self.devices[i]["id"] for i in chunk]))
            rows = {pk: rest for pk, *rest in selected.values_list(*columns)}
            for i in chunk:
                row = rows.get(self.devices[i]["id"])
                if row is None:
                    gone.add(i)
                    continue
                self.devices[i].update(zip(("selector_hash", "driver", "allow_multiple_allocations",
                                            *_SELECTOR_INPUTS), row, strict=True))
        return [i for i in indexes if i not in gone]

    def _node_ok(self, device: dict[str, Any], node_selector: dict[str, Any]) -> bool:
        if not node_selector:
            return True
        node = self.nodes.get(device["node_name"])
        return node is not None and labels_match(node.labels, node_selector)

    def match(self, offering: Offering) -> Match:
        """The offering's devices (memoised per selection: the quota capacity asks again for each class)."""
        node_selector = offering.node_selector if isinstance(offering.node_selector, dict) else {}
        key = (offering.unit_kind, offering.device_class_name, offering.resource_name, offering.cel_selector,
               json.dumps(node_selector, sort_keys=True, default=str))
        found = self._matches.get(key)
        if found is None:
            found = self._matches[key] = self._match(offering, node_selector)
        return found

    def _match(self, offering: Offering, node_selector: dict[str, Any]) -> Match:
        result = Match()
        candidates = list(self._by_kind.get(offering.unit_kind, []))
        if offering.unit_kind not in DRA_KINDS:
            result.devices = [
                self.devices[i] for i in candidates
                if self.devices[i]["path"] == Path.DEVICE_PLUGIN
                and self.devices[i]["resource_name"] == offering.resource_name
                and self._node_ok(self.devices[i], node_selector)
            ]
            return result
        raw_class = self.classes.get(offering.device_class_name)
        if raw_class is None:
            result.notes.append(f"DeviceClass {offering.device_class_name!r} does not exist in cluster "
                                f"{self.cluster.name}.")
            return result
        expressions = (*class_selectors(raw_class), *([offering.cel_selector] if offering.cel_selector else []))
        try:
            selectors = [cel.compile_selector(expression) for expression in expressions]
        except cel.CelError as exc:
            result.notes.append(f"Selector does not compile: {exc.message}")
            return result
        candidates = [
            i for i in candidates
            if self.devices[i]["path"] == Path.DRA and self._node_ok(self.devices[i], node_selector)
        ]
        memo = SELECTOR_OUTCOMES.memo(expressions)
        outcomes: dict[int, bool | str] = {}
        unknown: list[int] = []
        for i in candidates:
            digest = self.devices[i]["selector_hash"]
            known = memo.get(digest) if digest else None
            if known is None:
                unknown.append(i)
            else:
                outcomes[i] = known
        if unknown:
            present = self._read_selector_inputs(unknown)
            evaluated = cel.match_devices(selectors, [self._input(i) for i in present])
            matched = set(evaluated.matched)
            for j, i in enumerate(present):
                fresh: bool | str = True if j in matched else evaluated.errors.get(j, False)
                outcomes[i] = fresh
                if digest := self.devices[i]["selector_hash"]:
                    memo[digest] = fresh
        result.devices = [self.devices[i] for i in candidates if outcomes.get(i) is True]
        errors = [error for i in candidates if isinstance(error := outcomes.get(i), str)]
        result.selector_errors = len(errors)
        result.error_samples = sorted(set(errors))[:3]
        return result


def clusters_devices(clusters: Iterable[Cluster] | None = None, *,
                     modes: Iterable[str] | None = None) -> list[ClusterDevices]:
    clusters = Cluster.objects.all() if clusters is None else clusters
    return [ClusterDevices(cluster, modes=modes) for cluster in clusters]


@dataclass(frozen=True)
class MatchSummary:
    devices: int
    nodes: int
    clusters: int
    selector_errors: int
    notes: tuple[str, ...]
    error_samples: tuple[str, ...]


def offering_match_summary(offering: Offering, loaded: Sequence[ClusterDevices] | None = None) -> MatchSummary:
    """Devices and nodes an (unsaved) offering matches across clusters: the admin form's live check."""
    loaded = clusters_devices(modes=[offering.unit_kind]) if loaded is None else loaded
    devices = nodes = clusters = errors = 0
    notes: list[str] = []
    samples: list[str] = []
    for cluster in loaded:
        match = cluster.match(offering)
        devices += len(match.devices)
        nodes += len(match.nodes)
        clusters += 1 if match.devices else 0
        errors += match.selector_errors
        notes += match.notes
        samples += match.error_samples
    return MatchSummary(devices, nodes, clusters, errors, tuple(notes), tuple(sorted(set(samples))[:3]))


def offering_selector_check(*, unit_kind: str, device_class_name: str = "", resource_name: str = "",
                            cel_selector: str = "", node_selector: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compile the selector and count what it matches now: the live check of the admin form and the API.

    A selector that does not compile is an error; one that matches nothing is only a warning.
    """
    result: dict[str, Any] = {"valid": True, "error": "", "devices": 0, "nodes": 0, "clusters": 0,
                              "selector_errors": 0, "error_samples": [], "notes": [], "warning": ""}
    if cel_selector.strip():
        if unit_kind not in DRA_KINDS:
            result.update(valid=False, error="CEL selectors apply to DRA devices; device-plugin pools are selected "
                                             "by node labels.")
            return result
        try:
            cel.compile_selector(cel_selector)
        except cel.CelError as exc:
            result.update(valid=False, error=str(exc))
            return result
    probe = Offering(unit_kind=unit_kind, device_class_name=device_class_name, resource_name=resource_name,
                     cel_selector=cel_selector, node_selector=node_selector or {})
    summary = offering_match_summary(probe)
    result.update(devices=summary.devices, nodes=summary.nodes, clusters=summary.clusters,
                  selector_errors=summary.selector_errors, error_samples=list(summary.error_samples),
                  notes=list(summary.notes))
    if not summary.devices:
        result["warning"] = "The selector matches no device in any cluster right now."
    return result


def offering_warnings(offering: Offering) -> list[str]:
    """Non-blocking problems of a saved offering: a selector that matches nothing, selector runtime errors."""
    summary = offering_match_summary(offering)
    warnings = list(summary.notes)
    if not summary.devices:
        warnings.append("The offering matches no device in any cluster right now.")
    if summary.selector_errors:
        warnings.append(f"The selectors fail on {summary.selector_errors} devices (left out): "
                        f"{'; '.join(summary.error_samples)}")
    if offering.unit_kind in DRA_KINDS:
        problem = isolation_problem(offering.device_class_name, offering.isolation)
        if problem:
            warnings.append(problem)
    return warnings
