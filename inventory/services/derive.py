"""Derive the accelerator inventory (Device, Finding, ClaimAllocation, AllocationInterval) from mirrored rows.

Every function is set-based and deterministic: given a scope (node names, DRA pools, pod/claim uids, or None for
everything) it recomputes exactly the derived rows of that scope from the mirrored rows, with a bounded number of
queries. The sync engine calls `derive_scope` inside the transaction that applied a watch batch, so derived rows
are current as soon as the batch is visible; `derive_cluster` recomputes everything (after a full listing, and as
the reference in tests).

Rules (DESIGN.md §2, kubernetes-gpu-facts.md):
- "in use" comes from pod requests (device plugin) or claim allocations (DRA), never from capacity - allocatable;
- time-slicing/MPS replicas are units, not cards: cards = units / replicas; MIG slices belong to parent cards, with
  the mixed strategy (`nvidia.com/mig-<profile>`) and with the single strategy (`nvidia.com/gpu` on a node labelled
  `nvidia.com/mig.strategy=single` whose product ends in `-MIG-<profile>`: cards = slices / slices per card);
- a node whose `nvidia.com/mig.config.state` is not `success` is being (or failed to be) repartitioned: a finding;
- DRA holders: the opaque config that applies to a result says how its pods share the device (time-slicing, MPS,
  unknown); a device with `allowMultipleAllocations` is shared by capacity: what its allocations consume and what is
  left is derived per capacity (inventory/k8s/consumable.py), and it stays free while a request still fits;
- DRA pools: only the highest generation counts; a pool with fewer slices than resourceSliceCount is incomplete
  and its devices are never counted as free; shared counters block partitions of a card whose other partitions
  (or the whole card) are allocated.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from inventory.extract import parse_time
from inventory.k8s import consumable
from inventory.k8s.semantics import BLOCKING_TAINT_EFFECTS, parse_quantity
from inventory.k8s.semantics.values import as_dict, as_list
from inventory.models import (
    AllocationInterval,
    ChangeEvent,
    ClaimAllocation,
    Device,
    Finding,
    Health,
    Mode,
    Node,
    Path,
    Pod,
    ResourceClaim,
    ResourceSlice,
)
from inventory.podstatus import pod_claim_served_resources, pod_rejected_at_admission
from inventory.representations import device_content_hash, device_documents
from inventory.services.changes import changes_record, device_changes
from inventory.sharing import sharing_for_result
from inventory.signals import devices_changed

GPU_LABEL_PREFIX = "nvidia.com/"
GPU_PRESENT_LABELS = ("nvidia.com/gpu.present", "nvidia.com/gpu.product", "nvidia.com/gpu.count")
TERMINAL_PHASES = {"Succeeded", "Failed"}
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(?P<profile>\d+g\.\d+gb(?:\+me)?)$")
MIG_PROFILE_MEMORY = re.compile(r"^\d+g\.(?P<gb>\d+)gb(?:\+me)?$")
MIG_PROFILE_SLICES = re.compile(r"^(?P<g>\d+)g\.")
# GFD's single strategy appends the profile of the node's (identical) MIG devices to the product label.
MIG_SINGLE_PRODUCT = re.compile(r"-MIG-(?P<profile>\d+g\.\d+gb(?:\+me)?)$")
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
# GPU instance slices of one card: 7 on A100/H100/H200/B200, 4 on A30.
MIG_GPU_SLICES_DEFAULT = 7
MIG_GPU_SLICES = (("A30", 4),)

PoolKey = tuple[str, str]  # (driver, pool)


@dataclass
class Scope:
    """What a batch touched; `None` in a dimension means "all of it". Expanded by `derive_scope` to dependents."""

    nodes: set[str] | None = field(default_factory=set)
    pools: set[PoolKey] | None = field(default_factory=set)
    pod_uids: set[str] | None = field(default_factory=set)
    claim_uids: set[str] | None = field(default_factory=set)

    @classmethod
    def everything(cls) -> Scope:
        return cls(None, None, None, None)

    def __bool__(self) -> bool:
        return any(x is None or x for x in (self.nodes, self.pools, self.pod_uids, self.claim_uids))

    def merge(self, other: Scope) -> Scope:
        for name in ("nodes", "pools", "pod_uids", "claim_uids"):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, None if mine is None or theirs is None else mine | theirs)
        return self


# ---------------------------------------------------------------------------------------------------- helpers


def _int(value: Any) -> int:
    try:
        number = parse_quantity(value)
    except ValueError:
        return 0
    return int(number) if number.denominator == 1 else 0


def _label_int(labels: dict[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError, TypeError):
        return None


def _model_from_product(product: str) -> str:
    """GFD product label → model: strip the -SHARED suffix and the MIG single-strategy suffix."""
    product = product.removesuffix("-SHARED")
    return MIG_SINGLE_PRODUCT.sub("", product)


def mig_slices_per_card(profile: str, product: str) -> int:
    """How many MIG devices of `profile` one card holds when partitioned with it alone (the GPU Operator's
    `all-<profile>` layouts, the only kind the single strategy allows): the card's GPU-instance slices divided by the
    profile's (1g: 7, 2g: 3, 3g: 2, 4g and 7g: 1 on 7-slice cards)."""
    match = MIG_PROFILE_SLICES.match(profile)
    per_instance = int(match.group("g")) if match else 0
    slices = next((n for name, n in MIG_GPU_SLICES if name in product.upper()), MIG_GPU_SLICES_DEFAULT)
    return max(slices // per_instance, 1) if per_instance else 1


def _mig_single_profile(resource: str, labels: dict[str, str]) -> str:
    """The MIG profile `nvidia.com/gpu` stands for on a single-strategy node ("" when it is a whole card)."""
    if resource != "nvidia.com/gpu" or labels.get(MIG_STRATEGY_LABEL) != "single":
        return ""
    match = MIG_SINGLE_PRODUCT.search(labels.get("nvidia.com/gpu.product", ""))
    return match.group("profile") if match else ""


def _normalise_model(text: str) -> str:
    return re.sub(r"[\s_]+", "-", text.strip()).upper()


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", text or "")
    return tuple(int(p) for p in parts)


def _node_pool(labels: dict[str, str]) -> str:
    for key in settings.PORTAL_NODE_POOL_LABELS:
        if labels.get(key):
            return labels[key]
    return ""


def _blocking_taints(taints: Any) -> list[dict[str, Any]]:
    if not isinstance(taints, list):
        return []
    return [t for t in taints if isinstance(t, dict) and t.get("effect") in BLOCKING_TAINT_EFFECTS]


def _attr(attributes: dict[str, Any], name: str, driver: str) -> Any:
    """A DRA attribute's value, whether written as `name` or `<driver>/name`."""
    raw = attributes.get(name)
    if raw is None:
        raw = attributes.get(f"{driver}/{name}")
    if not isinstance(raw, dict):
        return None
    for kind in ("string", "version", "int", "bool", "strings", "versions", "ints", "bools"):
        if kind in raw:
            return raw[kind]
    return None


dra_attribute = _attr  # public name for other apps (telemetry maps DRA devices by their `uuid` attribute)


def _capacity_value(capacities: dict[str, Any], name: str, driver: str) -> Any:
    raw = capacities.get(name)
    if raw is None:
        raw = capacities.get(f"{driver}/{name}")
    return raw.get("value") if isinstance(raw, dict) else None


def _mib(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(parse_quantity(value) / (1024 * 1024))
    except ValueError:
        return None


def _gpu_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k.startswith(GPU_LABEL_PREFIX)}


def _finding(cluster_id: int, kind: str, severity: str, scope: str, subject: str, node: str, message: str,
             evidence: dict[str, Any]) -> Finding:
    return Finding(cluster_id=cluster_id, kind=kind, severity=severity, scope=scope, subject=subject, node_name=node,
                   message=message, evidence=evidence)


# ------------------------------------------------------------------------------------------- claim allocations


def _claim_allocation_rows(cluster_id: int, claim: dict[str, Any]) -> list[ClaimAllocation]:
    raw = claim["raw"]
    status = as_dict(raw.get("status"))
    allocation = as_dict(status.get("allocation"))
    devices = as_dict(allocation.get("devices"))
    results = as_list(devices.get("results"))
    reserved = [
        {"name": str(r.get("name", "")), "uid": str(r.get("uid", "")), "resource": str(r.get("resource", ""))}
        for r in (status.get("reservedFor") or [])
        if isinstance(r, dict)
    ]
    configs = as_list(devices.get("config"))
    rows = []
    for result in results:
        if not isinstance(result, dict) or not all(isinstance(result.get(k), str) for k in ("driver", "pool", "device")):
            continue
        request = str(result.get("request", ""))[:253]
        sharing = sharing_for_result(configs, driver=result["driver"], request=request)
        consumed = result.get("consumedCapacity")
        rows.append(ClaimAllocation(
            cluster_id=cluster_id, claim_uid=claim["uid"], namespace=claim["namespace"], claim_name=claim["name"],
            request=request, driver=result["driver"][:253], pool=result["pool"][:253],
            device=result["device"][:253], admin_access=bool(result.get("adminAccess")),
            share_id=str(result.get("shareID") or "")[:64], reserved_for=reserved,
            consumed_capacity={str(k)[:253]: str(v)[:64] for k, v in consumed.items()}
            if isinstance(consumed, dict) else {},
            sharing=sharing.strategy, sharing_detail=sharing.describe()[:200],
        ))
    return rows


def claim_allocations_rebuild(*, cluster_id: int, claim_uids: set[str] | None) -> set[PoolKey]:
    """Rebuild ClaimAllocation rows of these claims (None = all); returns the pools touched before and after."""
    existing = ClaimAllocation.objects.filter(cluster_id=cluster_id)
    claims = ResourceClaim.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True)
    if claim_uids is not None:
        existing = existing.filter(claim_uid__in=claim_uids)
        claims = claims.filter(uid__in=claim_uids)
    pools: set[PoolKey] = set(existing.values_list("driver", "pool").distinct())
    existing.delete()
    rows: list[ClaimAllocation] = []
    for claim in claims.filter(allocated=True).values("uid", "namespace", "name", "raw").iterator(chunk_size=2000):
        rows.extend(_claim_allocation_rows(cluster_id, claim))
    ClaimAllocation.objects.bulk_create(rows, batch_size=1000)
    pools |= {(r.driver, r.pool) for r in rows}
    return pools


# ------------------------------------------------------------------------------------------ device-plugin path


def _plugin_unit(resource: str, labels: dict[str, str]) -> dict[str, Any]:
    """What one unit of `resource` is on a node with these labels."""
    gpu_count = _label_int(labels, "nvidia.com/gpu.count")
    card_memory = _label_int(labels, "nvidia.com/gpu.memory")
    single = _mig_single_profile(resource, labels)
    if single:
        # GFD overrides gpu.count (MIG devices) and gpu.memory (one MIG device's MiB) under the single strategy.
        memory = card_memory
        if memory is None and (gb := MIG_PROFILE_MEMORY.match(single)):
            memory = int(gb.group("gb")) * 1024
        per_card = mig_slices_per_card(single, labels.get("nvidia.com/gpu.product", ""))
        return {"mode": Mode.MIG, "mig_profile": single, "memory_mib": memory, "units_per_card": per_card,
                "cards_from_labels": None, "unit": f"{resource} MIG-{single}"}
    mig = MIG_RESOURCE.match(resource)
    if mig:
        profile = mig.group("profile")
        per_node = _label_int(labels, f"{resource}.count")
        memory = _label_int(labels, f"{resource}.memory")
        if memory is None and (gb := MIG_PROFILE_MEMORY.match(profile)):
            memory = int(gb.group("gb")) * 1024
        per_card = (per_node // gpu_count) if per_node and gpu_count else 0
        return {"mode": Mode.MIG, "mig_profile": profile, "memory_mib": memory, "units_per_card": per_card or 1,
                "cards_from_labels": gpu_count}
    if resource in ("nvidia.com/gpu", "nvidia.com/gpu.shared"):
        strategy = labels.get("nvidia.com/gpu.sharing-strategy", "none")
        replicas = _label_int(labels, "nvidia.com/gpu.replicas") or 1
        if resource == "nvidia.com/gpu.shared" and strategy == "none":
            strategy = "time-slicing"
        if strategy in ("time-slicing", "mps") and replicas > 1:
            mode = Mode.TIME_SLICING if strategy == "time-slicing" else Mode.MPS
            return {"mode": mode, "mig_profile": "", "memory_mib": card_memory, "units_per_card": replicas,
                    "cards_from_labels": None}
        return {"mode": Mode.WHOLE, "mig_profile": "", "memory_mib": card_memory, "units_per_card": 1,
                "cards_from_labels": None}
    return {"mode": Mode.OTHER, "mig_profile": "", "memory_mib": None, "units_per_card": 1, "cards_from_labels": None}


def _plugin_devices(cluster_id: int, node: dict[str, Any], requested: dict[str, int]) -> list[Device]:
    labels = node["labels"] or {}
    capacity, allocatable = node["capacity"] or {}, node["allocatable"] or {}
    product = labels.get("nvidia.com/gpu.product", "")
    common = {
        "cluster_id": cluster_id, "path": Path.DEVICE_PLUGIN, "node_name": node["name"],
        "node_pool": _node_pool(labels)[:253], "node_schedulable": bool(node["ready"]) and not node["unschedulable"],
        "model": _model_from_product(product)[:200] if product else "",
        "architecture": labels.get("nvidia.com/gpu.family", "")[:64],
        "driver_version": labels.get("nvidia.com/cuda.driver-version.full", "")[:64],
        "cuda_version": labels.get("nvidia.com/cuda.runtime-version.full", "")[:32],
    }
    major, minor = labels.get("nvidia.com/gpu.compute.major"), labels.get("nvidia.com/gpu.compute.minor")
    common["compute_capability"] = f"{major}.{minor}" if major and minor else ""
    rows = []
    for resource in sorted(capacity):
        if "/" not in resource:
            continue
        cap = _int(capacity.get(resource))
        alloc = _int(allocatable.get(resource, 0))
        used = requested.get(resource, 0)
        unit = _plugin_unit(resource, labels)
        single_strategy = "unit" in unit  # slices of cards whose count no label gives: slices / slices per card
        if unit["mode"] == Mode.MIG and not single_strategy:
            cards = float(unit["cards_from_labels"] or 0)
        elif unit["units_per_card"] > 1:
            cards = cap / unit["units_per_card"]
        else:
            cards = float(cap)
        unhealthy = max(0, cap - alloc)
        health = Health.OK if not unhealthy else (Health.UNHEALTHY if alloc == 0 else Health.DEGRADED)
        rows.append(Device(
            **common, key=f"node/{node['name']}/{resource}"[:800], mode=unit["mode"],
            unit=unit.get("unit", resource)[:300],
            resource_name=resource[:253], mig_profile=unit["mig_profile"], memory_mib=unit["memory_mib"],
            units_per_card=unit["units_per_card"], cards=cards, capacity=cap, allocatable=alloc, in_use=used,
            free=max(0, alloc - used), unhealthy=unhealthy, health=health,
        ))
    return rows


def _device_plugin_requests(requests: Any, claim_status: Any) -> dict[str, int]:
    """The pod's extended requests that a device plugin serves: without those the scheduler satisfied through a
    generated DRA claim (DRAExtendedResource), whose devices the claim's own allocation already counts."""
    served = pod_claim_served_resources({"status": {"extendedResourceClaimStatus": claim_status}})
    return {r: n for r, n in (requests or {}).items() if r not in served and isinstance(n, int)}


def _pod_requests_by_node(cluster_id: int, nodes: set[str] | None) -> dict[str, dict[str, int]]:
    pods = Pod.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True, accelerator=True).exclude(node_name="")
    pods = pods.exclude(phase__in=TERMINAL_PHASES)
    if nodes is not None:
        pods = pods.filter(node_name__in=nodes)
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for node_name, requests, claim_status in pods.values_list(
            "node_name", "extended_requests", F("raw__status__extendedResourceClaimStatus")):
        for resource, amount in _device_plugin_requests(requests, claim_status).items():
            totals[node_name][resource] += amount
    return totals


# ------------------------------------------------------------------------------------------------- DRA path


@dataclass
class _PoolState:
    driver: str
    pool: str
    generation: int | None
    expected: int
    current: list[dict[str, Any]]
    stale: list[dict[str, Any]]
    duplicates: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.current) >= self.expected > 0


def _pool_states(cluster_id: int, pools: set[PoolKey] | None) -> dict[PoolKey, _PoolState]:
    slices = ResourceSlice.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True)
    if pools is not None:
        condition = Q(pk__in=[])
        for driver, pool in pools:
            condition |= Q(driver=driver, pool_name=pool)
        slices = slices.filter(condition)
    grouped: dict[PoolKey, list[dict[str, Any]]] = defaultdict(list)
    for row in slices.values("name", "driver", "pool_name", "pool_generation", "pool_slice_count", "node_name", "raw"):
        grouped[(row["driver"], row["pool_name"])].append(row)
    states = {}
    for key, rows in grouped.items():
        generation = max((r["pool_generation"] for r in rows if r["pool_generation"] is not None), default=None)
        current = [r for r in rows if r["pool_generation"] == generation]
        stale = [r for r in rows if r["pool_generation"] != generation]
        expected = max((r["pool_slice_count"] or 0 for r in current), default=0)
        states[key] = _PoolState(key[0], key[1], generation, expected, sorted(current, key=lambda r: r["name"]),
                                 stale)
    return states


def _dra_devices(cluster_id: int, state: _PoolState, allocations: list[ClaimAllocation],
                 nodes: dict[str, dict[str, Any]]) -> list[Device]:
    driver, pool = state.driver, state.pool
    counters: dict[tuple[str, str], int] = {}
    devices: list[tuple[dict[str, Any], str]] = []
    seen: set[str] = set()
    for slice_row in state.current:
        spec = slice_row["raw"].get("spec") or {}
        for counter_set in spec.get("sharedCounters") or []:
            if not isinstance(counter_set, dict):
                continue
            for counter, value in (counter_set.get("counters") or {}).items():
                counters[(str(counter_set.get("name")), str(counter))] = _int((value or {}).get("value"))
        for device in spec.get("devices") or []:
            if isinstance(device, dict) and isinstance(device.get("name"), str):
                if device["name"] in seen:  # invalid pool; the first slice (by name) wins, a finding says so
                    state.duplicates.append(f"{device['name']} (again in {slice_row['name']})")
                    continue
                seen.add(device["name"])
                devices.append((device, str(device.get("nodeName") or slice_row["node_name"] or "")))

    by_device: dict[str, list[ClaimAllocation]] = defaultdict(list)
    for allocation in allocations:
        by_device[allocation.device].append(allocation)

    def consumption(device: dict[str, Any]) -> list[tuple[tuple[str, str], int]]:
        out = []
        for consumed in device.get("consumesCounters") or []:
            if isinstance(consumed, dict):
                for counter, value in (consumed.get("counters") or {}).items():
                    out.append(((str(consumed.get("counterSet")), str(counter)), _int((value or {}).get("value"))))
        return out

    remaining = dict(counters)
    consumers: dict[tuple[str, str], list[str]] = defaultdict(list)
    for device, _node in devices:
        if any(not a.admin_access for a in by_device.get(device["name"], [])):
            for counter_key, amount in consumption(device):
                remaining[counter_key] = remaining.get(counter_key, 0) - amount
                consumers[counter_key].append(device["name"])

    rows = []
    for device, node_name in devices:
        name = device["name"]
        attributes = as_dict(device.get("attributes"))
        capacities = as_dict(device.get("capacity"))
        holders = by_device.get(name, [])
        ordinary = [a for a in holders if not a.admin_access]
        holder = (ordinary or holders)[0] if (ordinary or holders) else None
        in_use = 1 if ordinary else 0
        taints = as_list(device.get("taints"))
        blocking = _blocking_taints(taints)
        blocked_by = ""
        if not in_use:
            for counter_key, amount in consumption(device):
                if remaining.get(counter_key, 0) < amount:
                    blocked_by = f"counter {counter_key[0]}/{counter_key[1]} used by {', '.join(consumers[counter_key])}"
                    break
        shared = _shared_capacity(driver, device, ordinary)
        room = shared.room if shared is not None else not in_use
        device_type = str(_attr(attributes, "type", driver) or "")
        parent = str(_attr(attributes, "parentUUID", driver) or "")
        profile = str(_attr(attributes, "profile", driver) or "")
        partition = device_type == "mig" or bool(parent) or bool(device.get("consumesCounters") and profile)
        node = nodes.get(node_name)
        if not state.complete:
            health, unhealthy, free = Health.UNKNOWN, 0, 0
        elif blocking:
            health, unhealthy, free = Health.UNHEALTHY, 1, 0
        else:
            health, unhealthy, free = Health.OK, 0, (1 if room and not blocked_by else 0)
        cc = str(_attr(attributes, "cudaComputeCapability", driver) or "")
        rows.append(Device(
            cluster_id=cluster_id, key=f"{driver}/{pool}/{name}"[:800], path=Path.DRA,
            mode=Mode.DRA_PARTITION if partition else Mode.DRA_DEVICE,
            unit=" ".join(x for x in (driver, device_type or "device", profile) if x)[:300],
            node_name=node_name[:253], node_pool=_node_pool(node["labels"] or {})[:253] if node else "",
            node_schedulable=bool(node and node["ready"] and not node["unschedulable"]),
            driver=driver[:253], pool=pool[:253], device_name=name[:253], pool_generation=state.generation,
            pool_complete=state.complete,
            model=re.sub(r"\s+", "-", str(_attr(attributes, "productName", driver) or "").strip())[:200],
            memory_mib=_mib(_capacity_value(capacities, "memory", driver)),
            architecture=str(_attr(attributes, "architecture", driver) or "")[:64],
            compute_capability=".".join(cc.split(".")[:2])[:16],
            driver_version=str(_attr(attributes, "driverVersion", driver) or "")[:64],
            cuda_version=str(_attr(attributes, "cudaDriverVersion", driver) or "")[:32],
            mig_profile=profile[:32], units_per_card=1, parent=parent[:300], cards=0.0 if partition else 1.0,
            capacity=1, allocatable=0 if blocking else 1, in_use=in_use, free=free, unhealthy=unhealthy,
            health=health, attributes=attributes, capacities=capacities,
            consumes_counters=device.get("consumesCounters") or [], taints=taints, blocked_by=blocked_by[:300],
            allow_multiple_allocations=device.get("allowMultipleAllocations") is True,
            claim_uid=holder.claim_uid if holder else "", claim_namespace=holder.namespace if holder else "",
            claim_name=holder.claim_name if holder else "", request_name=holder.request if holder else "",
            admin_access=bool(holder and holder.admin_access), share_id=holder.share_id if holder else "",
            reserved_for=holder.reserved_for if holder else [],
            sharing=ordinary[0].sharing if ordinary else "", sharing_detail=ordinary[0].sharing_detail if ordinary else "",
            holders=len({a.claim_uid for a in ordinary}),
            consumed_capacity=shared.summary if shared is not None else {},
            consumed_share=shared.share if shared is not None else float(in_use),
        ))
    return rows


@dataclass
class _SharedCapacity:
    summary: dict[str, Any]
    share: float
    room: bool


def _shared_capacity(driver: str, device: dict[str, Any], ordinary: list[ClaimAllocation]) -> _SharedCapacity | None:
    """For a device with allowMultipleAllocations: what its allocations consume of each capacity and whether another
    allocation could still fit. Results with a shareID consume their consumedCapacity; a result without one (an
    allocation made as exclusive) takes the whole device, as the scheduler's allocated state does."""
    if device.get("allowMultipleAllocations") is not True:
        return None
    capacities = consumable.device_capacities(driver, device.get("capacity"))
    if any(not a.share_id for a in ordinary):
        full = {name: capacity.value for name, capacity in capacities.items()}
        return _SharedCapacity(consumable.summary(driver, full, capacities), 1.0, False)
    consumed = consumable.total(consumable.consumed_amounts(a.driver, a.consumed_capacity) for a in ordinary)
    return _SharedCapacity(consumable.summary(driver, consumed, capacities),
                           round(consumable.dominant_share(consumed, capacities), 6),
                           consumable.room_left(consumed, capacities))


def _pool_findings(cluster_id: int, state: _PoolState, devices: list[Device]) -> list[Finding]:
    scope = f"pool/{state.driver}/{state.pool}"
    out = []
    if not state.complete:
        out.append(_finding(
            cluster_id, Finding.Kind.POOL_INCOMPLETE, Finding.Severity.WARNING, scope, scope, "",
            f"pool {state.driver}/{state.pool} generation {state.generation}: {len(state.current)} of "
            f"{state.expected} slices published; its devices are not counted as free",
            {"generation": state.generation, "resourceSliceCount": state.expected,
             "slices_seen": [r["name"] for r in state.current]},
        ))
    if state.stale:
        out.append(_finding(
            cluster_id, Finding.Kind.POOL_STALE_GENERATION, Finding.Severity.INFO, scope, f"{scope}/stale", "",
            f"pool {state.driver}/{state.pool} is being updated: generation {state.generation} is current, "
            f"{len(state.stale)} slice(s) of older generations are ignored",
            {"current_generation": state.generation,
             "stale_slices": sorted({f"{r['name']} (generation {r['pool_generation']})" for r in state.stale})},
        ))
    if state.duplicates:
        out.append(_finding(
            cluster_id, Finding.Kind.POOL_DUPLICATE_DEVICE, Finding.Severity.ERROR, scope, f"{scope}/duplicates", "",
            f"pool {state.driver}/{state.pool} generation {state.generation} publishes {len(state.duplicates)} "
            "device name(s) more than once; only the first is counted",
            {"duplicates": sorted(state.duplicates)},
        ))
    for device in devices:
        if device.taints:
            out.append(_finding(
                cluster_id, Finding.Kind.DEVICE_TAINTED,
                Finding.Severity.WARNING if _blocking_taints(device.taints) else Finding.Severity.INFO,
                scope, device.key, device.node_name, f"device {device.key} is tainted",
                {"taints": device.taints},
            ))
    return out


# ------------------------------------------------------------------------------------------------ node findings


def _node_findings(cluster_id: int, node: dict[str, Any], plugin: list[Device], dra: list[Device]) -> list[Finding]:
    name = node["name"]
    scope = f"node/{name}"
    labels = node["labels"] or {}
    capacity = node["capacity"] or {}
    out = []
    for device in plugin:
        if device.unhealthy:
            out.append(_finding(
                cluster_id, Finding.Kind.UNHEALTHY_DEVICES, Finding.Severity.WARNING, scope, device.key, name,
                f"{name}: {device.unhealthy} of {device.capacity} {device.resource_name} unhealthy "
                f"(allocatable {device.allocatable} < capacity {device.capacity})",
                {"resource": device.resource_name, "capacity": device.capacity, "allocatable": device.allocatable},
            ))
        if device.in_use > device.allocatable:
            out.append(_finding(
                cluster_id, Finding.Kind.OVERCOMMITTED, Finding.Severity.ERROR, scope, f"{device.key}/overcommitted",
                name, f"{name}: pods request {device.in_use} {device.resource_name}, allocatable is "
                f"{device.allocatable} (bound pods do not move when devices turn unhealthy)",
                {"resource": device.resource_name, "requested": device.in_use, "allocatable": device.allocatable},
            ))
    state = labels.get(MIG_CONFIG_STATE_LABEL)
    if state is not None and state != "success":
        config = labels.get(MIG_CONFIG_LABEL, "")
        failed = state == "failed"
        out.append(_finding(
            cluster_id, Finding.Kind.MIG_RECONFIGURING, Finding.Severity.ERROR if failed else Finding.Severity.WARNING,
            scope, f"{scope}/mig-config", name,
            f"{name}: MIG configuration {config or '(unnamed)'} "
            + ("failed to apply: the slices advertised may not be the ones asked for" if failed else
               f"is {state}: the node's MIG devices are being repartitioned, its capacity is changing"),
            {"config": config, "state": state, "strategy": labels.get(MIG_STRATEGY_LABEL, "")},
        ))
    gpu_labels = _gpu_labels(labels)
    has_gpu_labels = any(labels.get(k) for k in GPU_PRESENT_LABELS)
    nvidia_resources = {k: v for k, v in capacity.items() if k.startswith(GPU_LABEL_PREFIX)}
    nvidia_dra = [d for d in dra if d.driver == NVIDIA_DRA_DRIVER]
    if has_gpu_labels and not nvidia_resources and not nvidia_dra:
        out.append(_finding(
            cluster_id, Finding.Kind.PLUGIN_MISSING, Finding.Severity.ERROR, scope, f"{scope}/plugin", name,
            f"{name} has GPU labels but no nvidia.com/* resource in capacity: the device plugin is not registered "
            "(pods requesting GPUs will stay Pending)",
            {"gpu_labels": {k: gpu_labels[k] for k in sorted(gpu_labels) if k in GPU_PRESENT_LABELS},
             "capacity": sorted(capacity)},
        ))
    plugin_cards = {k: v for k, v in nvidia_resources.items() if _int(v) > 0 and not MIG_RESOURCE.match(k)}
    full_dra = [d for d in nvidia_dra if d.mode == Mode.DRA_DEVICE]
    if plugin_cards and full_dra:
        out.append(_finding(
            cluster_id, Finding.Kind.DOUBLE_COUNTING, Finding.Severity.ERROR, scope, f"{scope}/double", name,
            f"{name}: the device plugin advertises {', '.join(f'{k}={v}' for k, v in sorted(plugin_cards.items()))} "
            f"and the DRA driver publishes {len(full_dra)} GPU device(s) for the same cards: both can be allocated",
            {"device_plugin": plugin_cards, "dra_devices": sorted(d.key for d in full_dra)},
        ))
    if full_dra and has_gpu_labels:
        mismatches = _gfd_mismatches(labels, full_dra)
        if mismatches:
            out.append(_finding(
                cluster_id, Finding.Kind.GFD_DRA_MISMATCH, Finding.Severity.WARNING, scope, f"{scope}/gfd", name,
                f"{name}: GPU feature discovery labels disagree with DRA attributes ({', '.join(sorted(mismatches))})",
                {"mismatches": mismatches},
            ))
    return out


def _gfd_mismatches(labels: dict[str, str], devices: list[Device]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    product = labels.get("nvidia.com/gpu.product")
    models = sorted({d.model for d in devices if d.model})
    if product and models and all(_normalise_model(_model_from_product(product)) != _normalise_model(m)
                                  for m in models):
        out["model"] = {"label": product, "dra": models}
    # Under the MIG single strategy GFD describes one MIG device in gpu.memory and counts MIG devices in gpu.count.
    mig_single = labels.get(MIG_STRATEGY_LABEL) == "single" and bool(MIG_SINGLE_PRODUCT.search(product or ""))
    memory = None if mig_single else _label_int(labels, "nvidia.com/gpu.memory")
    memories = sorted({d.memory_mib for d in devices if d.memory_mib})
    if memory and memories and memory not in memories:
        out["memory_mib"] = {"label": memory, "dra": memories}
    major, minor = labels.get("nvidia.com/gpu.compute.major"), labels.get("nvidia.com/gpu.compute.minor")
    ccs = sorted({d.compute_capability for d in devices if d.compute_capability})
    if major and minor and ccs and f"{major}.{minor}" not in ccs:
        out["compute_capability"] = {"label": f"{major}.{minor}", "dra": ccs}
    driver = labels.get("nvidia.com/cuda.driver-version.full")
    drivers = sorted({d.driver_version for d in devices if d.driver_version})
    if driver and drivers and all(_version_tuple(driver) != _version_tuple(v) for v in drivers):
        out["driver_version"] = {"label": driver, "dra": drivers}
    gpu_count = None if mig_single else _label_int(labels, "nvidia.com/gpu.count")
    if gpu_count is not None and gpu_count != len(devices):
        out["gpu_count"] = {"label": gpu_count, "dra": len(devices)}
    return out


# --------------------------------------------------------------------------------------------------- intervals


def _pod_bound_at(raw: dict[str, Any]) -> datetime | None:
    status = as_dict(raw.get("status"))
    issues: list[str] = []
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            found = parse_time(condition.get("lastTransitionTime"), issues, "c")
            if found:
                return found
    metadata = raw.get("metadata") or {}
    return parse_time(status.get("startTime"), issues, "s") or parse_time(metadata.get("creationTimestamp"), issues, "m")


def _pod_ended_at(raw: dict[str, Any], phase: str, deleted_at: datetime | None) -> datetime | None:
    issues: list[str] = []
    status = as_dict(raw.get("status"))
    if phase in TERMINAL_PHASES:
        finished = []
        for container in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
            terminated = ((container or {}).get("state") or {}).get("terminated") if isinstance(container, dict) else None
            if isinstance(terminated, dict):
                found = parse_time(terminated.get("finishedAt"), issues, "f")
                if found:
                    finished.append(found)
        if finished:
            return max(finished)
    if deleted_at is not None or phase in TERMINAL_PHASES:
        metadata = raw.get("metadata") or {}
        return parse_time(metadata.get("deletionTimestamp"), issues, "d") or deleted_at or timezone.now()
    return None


def _upsert_intervals(cluster_id: int, holder_kind: str, holder_uids: set[str] | None,
                      rows: list[AllocationInterval]) -> None:
    existing = AllocationInterval.objects.filter(cluster_id=cluster_id, holder_kind=holder_kind)
    if holder_uids is not None:
        existing = existing.filter(holder_uid__in=holder_uids)
    keep = {(r.holder_uid, r.resource) for r in rows}
    stale = [pk for pk, uid, res in existing.values_list("pk", "holder_uid", "resource") if (uid, res) not in keep]
    if holder_kind == AllocationInterval.HolderKind.CLAIM and stale:
        # A claim deallocated (or reallocated elsewhere) while it still exists: the hold ended when we saw it.
        AllocationInterval.objects.filter(pk__in=stale, ended_at__isnull=True).update(ended_at=timezone.now())
    elif stale:
        AllocationInterval.objects.filter(pk__in=stale).delete()
    AllocationInterval.objects.bulk_create(
        rows, batch_size=1000, update_conflicts=True,
        unique_fields=["cluster", "holder_kind", "holder_uid", "resource"],
        update_fields=["namespace", "name", "node_name", "quantity", "share", "consumed_capacity", "admin_access",
                       "started_at", "ended_at", "updated_at"],
    )


def pod_intervals_derive(*, cluster_id: int, pod_uids: set[str] | None) -> None:
    """Intervals of pods holding extended resources, from the pods' own timestamps (tombstones included).

    An extended resource the scheduler satisfied with a generated DRA claim (DRAExtendedResource) gets no pod
    interval: the claim's intervals hold those units, one per allocated device, so they are counted and billed
    once and keep the device's identity (driver/pool/device). A pod the kubelet rejected at admission (e.g. the
    device plugin refused a request for more than one shared unit) held nothing and gets no interval."""
    pods = Pod.objects.filter(cluster_id=cluster_id, accelerator=True).exclude(node_name="")
    if pod_uids is not None:
        pods = pods.filter(uid__in=pod_uids)
    rows = []
    columns = ("uid", "namespace", "name", "node_name", "phase", "deleted_at", "extended_requests")
    # Only the parts of the pod the timestamps come from, not the whole spec.
    rows_iter = pods.values(*columns, status=F("raw__status"), metadata=F("raw__metadata")).iterator(chunk_size=2000)
    for pod in rows_iter:
        raw = {"status": pod["status"], "metadata": pod["metadata"] if isinstance(pod["metadata"], dict) else {}}
        started = _pod_bound_at(raw)
        if started is None or pod_rejected_at_admission(raw):
            continue
        ended = _pod_ended_at(raw, pod["phase"], pod["deleted_at"])
        if ended is not None and ended < started:
            ended = started
        plugin = _device_plugin_requests(pod["extended_requests"], pod["status"].get("extendedResourceClaimStatus")
                                         if isinstance(pod["status"], dict) else None)
        for resource, quantity in sorted(plugin.items()):
            if quantity > 0:
                rows.append(AllocationInterval(
                    cluster_id=cluster_id, holder_kind=AllocationInterval.HolderKind.POD, holder_uid=pod["uid"],
                    namespace=pod["namespace"], name=pod["name"], node_name=pod["node_name"], resource=resource[:300],
                    quantity=quantity, started_at=started, ended_at=ended,
                ))
    _upsert_intervals(cluster_id, AllocationInterval.HolderKind.POD, pod_uids, rows)


def claim_intervals_derive(*, cluster_id: int, claim_uids: set[str] | None) -> None:
    """Intervals of allocated claims per device: allocationTimestamp (or creation) to deletion."""
    claims = ResourceClaim.objects.filter(cluster_id=cluster_id)
    if claim_uids is not None:
        claims = claims.filter(uid__in=claim_uids)
    rows = []
    for claim in claims.values("uid", "namespace", "name", "deleted_at", "raw", "k8s_created_at").iterator(
        chunk_size=2000
    ):
        raw = claim["raw"]
        status = as_dict(raw.get("status"))
        allocation = as_dict(status.get("allocation"))
        if not allocation:
            continue
        issues: list[str] = []
        started = parse_time(allocation.get("allocationTimestamp"), issues, "a") or claim["k8s_created_at"]
        if started is None:
            continue
        ended = None
        if claim["deleted_at"] is not None:
            metadata = raw.get("metadata") or {}
            ended = parse_time(metadata.get("deletionTimestamp"), issues, "d") or claim["deleted_at"]
            ended = max(ended, started)
        node = ""
        selector = allocation.get("nodeSelector") or {}
        for term in selector.get("nodeSelectorTerms") or [] if isinstance(selector, dict) else []:
            for match in (term or {}).get("matchFields") or []:
                if isinstance(match, dict) and match.get("key") == "metadata.name" and match.get("values"):
                    node = str(match["values"][0])
        for allocated in _claim_allocation_rows(cluster_id, claim):
            rows.append(AllocationInterval(
                cluster_id=cluster_id, holder_kind=AllocationInterval.HolderKind.CLAIM, holder_uid=claim["uid"],
                namespace=claim["namespace"], name=claim["name"], node_name=node[:253],
                resource=f"{allocated.driver}/{allocated.pool}/{allocated.device}"[:300], quantity=1,
                admin_access=allocated.admin_access, started_at=started, ended_at=ended,
                consumed_capacity=allocated.consumed_capacity if allocated.share_id else {}, share=1.0,
            ))
    _share_of_devices(cluster_id, rows)
    _upsert_intervals(cluster_id, AllocationInterval.HolderKind.CLAIM, claim_uids, rows)


def _share_of_devices(cluster_id: int, rows: list[AllocationInterval]) -> None:
    """Billing by consumed capacity: an interval on a shared device (a result with consumedCapacity) holds the
    largest fraction of any of the device's capacities it consumes; every other interval holds the whole device."""
    wanted = [r for r in rows if r.consumed_capacity]
    if not wanted:
        return
    keys = {tuple(r.resource.split("/", 2)) for r in wanted}
    states = _pool_states(cluster_id, {(k[0], k[1]) for k in keys if len(k) == 3})
    capacities: dict[str, dict[str, consumable.Capacity]] = {}
    for state in states.values():
        for slice_row in state.current:
            for device in (slice_row["raw"].get("spec") or {}).get("devices") or []:
                key = f"{state.driver}/{state.pool}/{device.get('name')}" if isinstance(device, dict) else ""
                if key and key not in capacities and device.get("allowMultipleAllocations") is True:
                    capacities[key] = consumable.device_capacities(state.driver, device.get("capacity"))
    for row in wanted:
        found = capacities.get(row.resource)
        driver = row.resource.split("/", 1)[0]
        if found:
            row.share = round(consumable.dominant_share(
                consumable.consumed_amounts(driver, row.consumed_capacity), found), 6)


def _claims_with_shares(cluster_id: int, pools: set[PoolKey] | None) -> set[str]:
    """Claims holding shares of devices in these pools: their intervals' shares depend on the devices' capacities."""
    query = ClaimAllocation.objects.filter(cluster_id=cluster_id).exclude(consumed_capacity={})
    if pools is not None:
        condition = Q(pk__in=[])
        for driver, pool in pools:
            condition |= Q(driver=driver, pool=pool)
        query = query.filter(condition)
    return set(query.values_list("claim_uid", flat=True))


# ------------------------------------------------------------------------------------------------ entry points


def _replace(model: type[Device] | type[Finding], cluster_id: int, scope_filter: Q, rows: list[Any],
             unique: list[str], keep_fields: set[str], write: list[Any] | None = None) -> None:
    """Make the rows of `scope_filter` exactly `rows`: upsert them (or only `write`, the changed ones), delete
    the others."""
    keys = {tuple(getattr(r, f) for f in unique if f != "cluster") for r in rows}
    rows = rows if write is None else write
    existing = model.objects.filter(Q(cluster_id=cluster_id) & scope_filter)
    gone = [pk for pk, *key in existing.values_list("pk", *[f for f in unique if f != "cluster"])
            if tuple(key) not in keys]
    if gone:
        model.objects.filter(pk__in=gone).delete()
    if rows:
        fields = [f.name for f in model._meta.concrete_fields
                  if f.name not in {"id", "cluster", *unique, *keep_fields}]
        model.objects.bulk_create(rows, batch_size=1000, update_conflicts=True, unique_fields=unique,
                                  update_fields=fields)


def derive_scope(*, cluster_id: int, scope: Scope | None) -> None:
    """Recompute every derived row that depends on `scope` (None: the whole cluster). Bounded query count."""
    scope = Scope.everything() if scope is None else scope
    nodes, pools = scope.nodes, scope.pools
    if scope.claim_uids is None or scope.claim_uids:
        touched = claim_allocations_rebuild(cluster_id=cluster_id, claim_uids=scope.claim_uids)
        if pools is not None:
            pools = pools | touched
        claim_intervals_derive(cluster_id=cluster_id, claim_uids=scope.claim_uids)
    if scope.claim_uids is not None and (scope.pools is None or scope.pools):
        # The shares of claims on consumable-capacity devices depend on the devices' published capacities: when a
        # pool's slices change, re-derive the intervals of the claims holding shares there.
        shared = _claims_with_shares(cluster_id, scope.pools) - scope.claim_uids
        if shared:
            claim_intervals_derive(cluster_id=cluster_id, claim_uids=shared)
    if scope.pod_uids is None or scope.pod_uids:
        pod_intervals_derive(cluster_id=cluster_id, pod_uids=scope.pod_uids)

    if nodes is None or pools is None:  # all devices: node and pool rows depend on each other
        _derive_pools(cluster_id, None, _pool_states(cluster_id, None))
        _derive_nodes(cluster_id, None)
        return
    nodes, pools = set(nodes), set(pools)
    if nodes:  # DRA devices carry their node's schedulability
        pools |= set(ResourceSlice.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True, node_name__in=nodes)
                     .values_list("driver", "pool_name").distinct())
    if pools:
        states = _pool_states(cluster_id, pools)
        for state in states.values():  # node findings look at the node's DRA devices
            nodes |= {r["node_name"] for r in state.current + state.stale if r["node_name"]}
        _derive_pools(cluster_id, pools, states)
    if nodes:
        _derive_nodes(cluster_id, nodes)


def _node_rows(cluster_id: int, nodes: set[str] | None) -> dict[str, dict[str, Any]]:
    rows = Node.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True)
    if nodes is not None:
        rows = rows.filter(name__in=nodes)
    return {r["name"]: r for r in rows.values("name", "labels", "capacity", "allocatable", "ready", "unschedulable")}


def _derive_pools(cluster_id: int, pools: set[PoolKey] | None, states: dict[PoolKey, _PoolState]) -> None:
    allocations: dict[PoolKey, list[ClaimAllocation]] = defaultdict(list)
    query = ClaimAllocation.objects.filter(cluster_id=cluster_id)
    if pools is not None:
        condition = Q(pk__in=[])
        for driver, pool in pools:
            condition |= Q(driver=driver, pool=pool)
        query = query.filter(condition)
    for allocation in query.order_by("claim_uid", "request", "device"):
        allocations[(allocation.driver, allocation.pool)].append(allocation)
    node_names = {r["node_name"] for s in states.values() for r in s.current if r["node_name"]}
    per_device_nodes = {
        str(d.get("nodeName")) for s in states.values() for r in s.current
        for d in ((r["raw"].get("spec") or {}).get("devices") or []) if isinstance(d, dict) and d.get("nodeName")
    }
    nodes = _node_rows(cluster_id, node_names | per_device_nodes)
    devices: list[Device] = []
    findings: list[Finding] = []
    for key in sorted(states):
        pool_devices = _dra_devices(cluster_id, states[key], allocations.get(key, []), nodes)
        devices.extend(pool_devices)
        findings.extend(_pool_findings(cluster_id, states[key], pool_devices))
    if pools is None:
        device_scope, finding_scope = Q(path=Path.DRA), Q(scope__startswith="pool/")
    else:
        device_scope, finding_scope = Q(pk__in=[]), Q(pk__in=[])
        for driver, pool in pools:
            device_scope |= Q(path=Path.DRA, driver=driver, pool=pool)
            finding_scope |= Q(scope=f"pool/{driver}/{pool}")
    _replace_devices(cluster_id, device_scope, devices)
    _replace(Finding, cluster_id, finding_scope, findings, ["cluster", "kind", "subject"], {"first_seen_at"})


def _replace_devices(cluster_id: int, scope: Q, devices: list[Device]) -> None:
    """Replace the devices of `scope`, writing only rows whose content changed (most rows of a batch do not), and
    the change-feed events of the rows whose CMDB snapshot changed."""
    now = timezone.now()
    current: dict[str, str] = {}
    feed_hashes: dict[str, str] = {}
    for key, content_hash, feed_hash in (Device.objects.filter(Q(cluster_id=cluster_id) & scope)
                                         .values_list("key", "content_hash", "feed_hash")):
        current[key], feed_hashes[key] = content_hash, feed_hash
    changed = []
    for device in devices:
        device.content_hash = device_content_hash(device)
        if current.get(device.key) == device.content_hash:
            continue
        device.updated_at = now
        device.api_document, device.api_document_redacted = device_documents(device)
        changed.append(device)
    keys = {d.key for d in devices}
    # The events first: generating them sets each rewritten row's feed_hash, which the replacement then stores.
    changes_record(cluster_id=cluster_id, object_type=ChangeEvent.ObjectType.DEVICE,
                   changes=device_changes(previous=feed_hashes, rewritten=changed, kept=keys))
    _replace(Device, cluster_id, scope, devices, ["cluster", "key"], set(), write=changed)
    if changed or set(current) - keys:
        _announce(cluster_id)


def _derive_nodes(cluster_id: int, nodes: set[str] | None) -> None:
    node_rows = _node_rows(cluster_id, nodes)
    requested = _pod_requests_by_node(cluster_id, nodes)
    dra_by_node: dict[str, list[Device]] = defaultdict(list)
    dra = Device.objects.filter(cluster_id=cluster_id, path=Path.DRA)
    if nodes is not None:
        dra = dra.filter(node_name__in=nodes)
    for device in dra.only("key", "driver", "mode", "model", "memory_mib", "compute_capability", "driver_version",
                           "node_name"):
        dra_by_node[device.node_name].append(device)
    devices: list[Device] = []
    findings: list[Finding] = []
    for name in sorted(node_rows):
        node = node_rows[name]
        plugin = _plugin_devices(cluster_id, node, requested.get(name, {}))
        devices.extend(plugin)
        findings.extend(_node_findings(cluster_id, node, plugin, dra_by_node.get(name, [])))
    if nodes is None:
        device_scope, finding_scope = Q(path=Path.DEVICE_PLUGIN), Q(scope__startswith="node/")
    else:
        device_scope = Q(path=Path.DEVICE_PLUGIN, node_name__in=nodes)
        finding_scope = Q(scope__in=[f"node/{n}" for n in nodes])
    _replace_devices(cluster_id, device_scope, devices)
    _replace(Finding, cluster_id, finding_scope, findings, ["cluster", "kind", "subject"], {"first_seen_at"})


def _announce(cluster_id: int) -> None:
    """Tell listeners (the catalog's capacity refresh) after the commit. Robust: a listener's failure (Redis down) is
    logged by Django and never propagates into the sync batch whose commit ran it, so it cannot end a watcher."""
    transaction.on_commit(lambda: devices_changed.send(sender=Device, cluster_id=cluster_id), robust=True)


def derive_cluster(*, cluster_id: int) -> None:
    """Recompute every derived row of the cluster from scratch."""
    derive_scope(cluster_id=cluster_id, scope=None)


def scope_for_listing(kind: str) -> Scope:
    """After a complete listing of `kind`, everything that depends on that kind."""
    return {
        "nodes": Scope(nodes=None),
        "pods": Scope(nodes=None, pod_uids=None),
        "resourceslices": Scope(nodes=None, pools=None),
        "resourceclaims": Scope(pools=None, claim_uids=None),
    }.get(kind, Scope())


def scope_for_rows(kind: str, rows: Iterable[dict[str, Any]]) -> Scope:
    """Which derived rows depend on these mirrored rows (old or new versions)."""
    nodes: set[str] = set()
    pools: set[PoolKey] = set()
    pod_uids: set[str] = set()
    claim_uids: set[str] = set()
    for row in rows:
        if kind == "nodes":
            nodes.add(row["name"])
        elif kind == "pods":
            if row.get("node_name"):
                nodes.add(row["node_name"])
            pod_uids.add(row["uid"])
        elif kind == "resourceslices":
            pools.add((row.get("driver", ""), row.get("pool_name", "")))
            if row.get("node_name"):
                nodes.add(row["node_name"])
        elif kind == "resourceclaims":
            claim_uids.add(row["uid"])
    return Scope(nodes=nodes, pools=pools, pod_uids=pod_uids, claim_uids=claim_uids)

SCOPE_COLUMNS = {
    "nodes": ("uid", "name"),
    "pods": ("uid", "node_name"),
    "resourceslices": ("uid", "driver", "pool_name", "node_name"),
    "resourceclaims": ("uid",),
}
