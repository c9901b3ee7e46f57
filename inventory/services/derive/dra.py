"""The DRA path: devices of ResourceSlice pools (highest generation only), their claim holders, shared counters
and consumable capacity, and the pool findings."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from inventory.k8s import consumable
from inventory.k8s.semantics.values import as_dict, as_list
from inventory.models import (
    ClaimAllocation,
    Device,
    Finding,
    Health,
    Mode,
    Path,
    ResourceSlice,
)
from inventory.services.derive.common import (
    PoolKey,
    blocking_taints,
    capacity_value,
    dra_attribute,
    finding_row,
    mib,
    node_pool,
    pool_scope,
    pools_q,
    quantity_int,
)


@dataclass
class PoolState:
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


def pool_states(cluster_id: int, pools: set[PoolKey] | None) -> dict[PoolKey, PoolState]:
    slices = ResourceSlice.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True)
    if pools is not None:
        slices = slices.filter(pools_q(pools, pool="pool_name"))
    grouped: dict[PoolKey, list[dict[str, Any]]] = defaultdict(list)
    for row in slices.values("name", "driver", "pool_name", "pool_generation", "pool_slice_count", "node_name", "raw"):
        grouped[(row["driver"], row["pool_name"])].append(row)
    states = {}
    for key, rows in grouped.items():
        generation = max((r["pool_generation"] for r in rows if r["pool_generation"] is not None), default=None)
        current = [r for r in rows if r["pool_generation"] == generation]
        stale = [r for r in rows if r["pool_generation"] != generation]
        expected = max((r["pool_slice_count"] or 0 for r in current), default=0)
        states[key] = PoolState(key[0], key[1], generation, expected, sorted(current, key=lambda r: r["name"]),
                                stale)
    return states


CounterKey = tuple[str, str]  # (counter set, counter)


def dra_devices(cluster_id: int, state: PoolState, allocations: list[ClaimAllocation],
                nodes: dict[str, dict[str, Any]]) -> list[Device]:
    counters, devices = _pool_contents(state)
    by_device: dict[str, list[ClaimAllocation]] = defaultdict(list)
    for allocation in allocations:
        by_device[allocation.device].append(allocation)
    remaining, consumers = _counters_left(counters, devices, by_device)
    return [
        _dra_device_row(cluster_id, state, device, node_name, by_device.get(device["name"], []), remaining, consumers,
                        nodes)
        for device, node_name in devices
    ]


def _pool_contents(state: PoolState) -> tuple[dict[CounterKey, int], list[tuple[dict[str, Any], str]]]:
    """The shared counters and the devices (with their node) of a pool's current slices. A device name published
    twice is an invalid pool: the first slice (by name) wins and `state.duplicates` records the others."""
    counters: dict[CounterKey, int] = {}
    devices: list[tuple[dict[str, Any], str]] = []
    seen: set[str] = set()
    for slice_row in state.current:
        spec = slice_row["raw"].get("spec") or {}
        for counter_set in spec.get("sharedCounters") or []:
            if not isinstance(counter_set, dict):
                continue
            for counter, value in (counter_set.get("counters") or {}).items():
                counters[(str(counter_set.get("name")), str(counter))] = quantity_int((value or {}).get("value"))
        for device in spec.get("devices") or []:
            if isinstance(device, dict) and isinstance(device.get("name"), str):
                if device["name"] in seen:  # invalid pool; the first slice (by name) wins, a finding says so
                    state.duplicates.append(f"{device['name']} (again in {slice_row['name']})")
                    continue
                seen.add(device["name"])
                devices.append((device, str(device.get("nodeName") or slice_row["node_name"] or "")))
    return counters, devices


def _consumption(device: dict[str, Any]) -> list[tuple[CounterKey, int]]:
    """What the device consumes of its pool's shared counters when allocated."""
    out = []
    for consumed in device.get("consumesCounters") or []:
        if isinstance(consumed, dict):
            for counter, value in (consumed.get("counters") or {}).items():
                out.append(((str(consumed.get("counterSet")), str(counter)), quantity_int((value or {}).get("value"))))
    return out


def _counters_left(
    counters: dict[CounterKey, int], devices: list[tuple[dict[str, Any], str]],
    by_device: dict[str, list[ClaimAllocation]],
) -> tuple[dict[CounterKey, int], dict[CounterKey, list[str]]]:
    """What is left of each shared counter after the allocated devices (admin access consumes nothing), and which
    devices consume it."""
    remaining = dict(counters)
    consumers: dict[CounterKey, list[str]] = defaultdict(list)
    for device, _node in devices:
        if any(not a.admin_access for a in by_device.get(device["name"], [])):
            for counter_key, amount in _consumption(device):
                remaining[counter_key] = remaining.get(counter_key, 0) - amount
                consumers[counter_key].append(device["name"])
    return remaining, consumers


def _blocked_by_counters(device: dict[str, Any], remaining: dict[CounterKey, int],
                         consumers: dict[CounterKey, list[str]]) -> str:
    """Which shared counter leaves too little for this free device, and who uses it ("" if none)."""
    for counter_key, amount in _consumption(device):
        if remaining.get(counter_key, 0) < amount:
            return f"counter {counter_key[0]}/{counter_key[1]} used by {', '.join(consumers[counter_key])}"
    return ""


def _dra_device_row(cluster_id: int, state: PoolState, device: dict[str, Any], node_name: str,
                    holders: list[ClaimAllocation], remaining: dict[CounterKey, int],
                    consumers: dict[CounterKey, list[str]], nodes: dict[str, dict[str, Any]]) -> Device:
    driver, pool = state.driver, state.pool
    name = device["name"]
    attributes = as_dict(device.get("attributes"))
    capacities = as_dict(device.get("capacity"))
    ordinary = [a for a in holders if not a.admin_access]
    holder = (ordinary or holders)[0] if (ordinary or holders) else None
    in_use = 1 if ordinary else 0
    taints = as_list(device.get("taints"))
    blocking = blocking_taints(taints)
    blocked_by = "" if in_use else _blocked_by_counters(device, remaining, consumers)
    shared = _shared_capacity(driver, device, ordinary)
    room = shared.room if shared is not None else not in_use
    device_type = str(dra_attribute(attributes, "type", driver) or "")
    parent = str(dra_attribute(attributes, "parentUUID", driver) or "")
    profile = str(dra_attribute(attributes, "profile", driver) or "")
    partition = device_type == "mig" or bool(parent) or bool(device.get("consumesCounters") and profile)
    node = nodes.get(node_name)
    if not state.complete:
        health, unhealthy, free = Health.UNKNOWN, 0, 0
    elif blocking:
        health, unhealthy, free = Health.UNHEALTHY, 1, 0
    else:
        health, unhealthy, free = Health.OK, 0, (1 if room and not blocked_by else 0)
    cc = str(dra_attribute(attributes, "cudaComputeCapability", driver) or "")
    return Device(
        cluster_id=cluster_id, key=f"{driver}/{pool}/{name}"[:800], path=Path.DRA,
        mode=Mode.DRA_PARTITION if partition else Mode.DRA_DEVICE,
        unit=" ".join(x for x in (driver, device_type or "device", profile) if x)[:300],
        node_name=node_name[:253], node_pool=node_pool(node["labels"] or {})[:253] if node else "",
        node_schedulable=bool(node and node["ready"] and not node["unschedulable"]),
        driver=driver[:253], pool=pool[:253], device_name=name[:253], pool_generation=state.generation,
        pool_complete=state.complete,
        model=re.sub(r"\s+", "-", str(dra_attribute(attributes, "productName", driver) or "").strip())[:200],
        memory_mib=mib(capacity_value(capacities, "memory", driver)),
        architecture=str(dra_attribute(attributes, "architecture", driver) or "")[:64],
        compute_capability=".".join(cc.split(".")[:2])[:16],
        driver_version=str(dra_attribute(attributes, "driverVersion", driver) or "")[:64],
        cuda_version=str(dra_attribute(attributes, "cudaDriverVersion", driver) or "")[:32],
        mig_profile=profile[:32], units_per_card=1, parent=parent[:300], cards=0.0 if partition else 1.0,
        capacity=1, allocatable=0 if blocking else 1, in_use=in_use, free=free, unhealthy=unhealthy,
        health=health, attributes=attributes, capacities=capacities,
        consumes_counters=device.get("consumesCounters") or [], taints=taints, blocked_by=blocked_by[:300],
        allow_multiple_allocations=device.get("allowMultipleAllocations") is True,
        **_holder_fields(holder, ordinary),
        consumed_capacity=shared.summary if shared is not None else {},
        consumed_share=shared.share if shared is not None else float(in_use),
    )


def _holder_fields(holder: ClaimAllocation | None, ordinary: list[ClaimAllocation]) -> dict[str, Any]:
    """The Device fields that name the claim holding it (the first ordinary holder, else an admin-access one)."""
    return {
        "claim_uid": holder.claim_uid if holder else "", "claim_namespace": holder.namespace if holder else "",
        "claim_name": holder.claim_name if holder else "", "request_name": holder.request if holder else "",
        "admin_access": bool(holder and holder.admin_access), "share_id": holder.share_id if holder else "",
        "reserved_for": holder.reserved_for if holder else [],
        "sharing": ordinary[0].sharing if ordinary else "",
        "sharing_detail": ordinary[0].sharing_detail if ordinary else "",
        "holders": len({a.claim_uid for a in ordinary}),
    }


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


def pool_findings(cluster_id: int, state: PoolState, devices: list[Device]) -> list[Finding]:
    scope = pool_scope((state.driver, state.pool))
    out = []
    if not state.complete:
        out.append(finding_row(
            cluster_id, Finding.Kind.POOL_INCOMPLETE, Finding.Severity.WARNING, scope, scope, "",
            f"pool {state.driver}/{state.pool} generation {state.generation}: {len(state.current)} of "
            f"{state.expected} slices published; its devices are not counted as free",
            {"generation": state.generation, "resourceSliceCount": state.expected,
             "slices_seen": [r["name"] for r in state.current]},
        ))
    if state.stale:
        out.append(finding_row(
            cluster_id, Finding.Kind.POOL_STALE_GENERATION, Finding.Severity.INFO, scope, f"{scope}/stale", "",
            f"pool {state.driver}/{state.pool} is being updated: generation {state.generation} is current, "
            f"{len(state.stale)} slice(s) of older generations are ignored",
            {"current_generation": state.generation,
             "stale_slices": sorted({f"{r['name']} (generation {r['pool_generation']})" for r in state.stale})},
        ))
    if state.duplicates:
        out.append(finding_row(
            cluster_id, Finding.Kind.POOL_DUPLICATE_DEVICE, Finding.Severity.ERROR, scope, f"{scope}/duplicates", "",
            f"pool {state.driver}/{state.pool} generation {state.generation} publishes {len(state.duplicates)} "
            "device name(s) more than once; only the first is counted",
            {"duplicates": sorted(state.duplicates)},
        ))
    for device in devices:
        if device.taints:
            out.append(finding_row(
                cluster_id, Finding.Kind.DEVICE_TAINTED,
                Finding.Severity.WARNING if blocking_taints(device.taints) else Finding.Severity.INFO,
                scope, device.key, device.node_name, f"device {device.key} is tainted",
                {"taints": device.taints},
            ))
    return out
