"""The device-plugin path: devices from node capacity (whole cards, time-slicing/MPS replicas, MIG slices) and
what pods request of them."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import F

from inventory.models import (
    Device,
    Health,
    Mode,
    Path,
    Pod,
)
from inventory.podstatus import pod_claim_served_resources
from inventory.services.derive.common import (
    MIG_PROFILE_MEMORY,
    MIG_RESOURCE,
    TERMINAL_PHASES,
    label_int,
    mig_single_profile,
    mig_slices_per_card,
    model_from_product,
    node_pool,
    quantity_int,
)


def _plugin_unit(resource: str, labels: dict[str, str]) -> dict[str, Any]:
    """What one unit of `resource` is on a node with these labels."""
    gpu_count = label_int(labels, "nvidia.com/gpu.count")
    card_memory = label_int(labels, "nvidia.com/gpu.memory")
    single = mig_single_profile(resource, labels)
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
        per_node = label_int(labels, f"{resource}.count")
        memory = label_int(labels, f"{resource}.memory")
        if memory is None and (gb := MIG_PROFILE_MEMORY.match(profile)):
            memory = int(gb.group("gb")) * 1024
        per_card = (per_node // gpu_count) if per_node and gpu_count else 0
        return {"mode": Mode.MIG, "mig_profile": profile, "memory_mib": memory, "units_per_card": per_card or 1,
                "cards_from_labels": gpu_count}
    if resource in ("nvidia.com/gpu", "nvidia.com/gpu.shared"):
        strategy = labels.get("nvidia.com/gpu.sharing-strategy", "none")
        replicas = label_int(labels, "nvidia.com/gpu.replicas") or 1
        if resource == "nvidia.com/gpu.shared" and strategy == "none":
            strategy = "time-slicing"
        if strategy in ("time-slicing", "mps") and replicas > 1:
            mode = Mode.TIME_SLICING if strategy == "time-slicing" else Mode.MPS
            return {"mode": mode, "mig_profile": "", "memory_mib": card_memory, "units_per_card": replicas,
                    "cards_from_labels": None}
        return {"mode": Mode.WHOLE, "mig_profile": "", "memory_mib": card_memory, "units_per_card": 1,
                "cards_from_labels": None}
    return {"mode": Mode.OTHER, "mig_profile": "", "memory_mib": None, "units_per_card": 1, "cards_from_labels": None}


def plugin_devices(cluster_id: int, node: dict[str, Any], requested: dict[str, int]) -> list[Device]:
    labels = node["labels"] or {}
    capacity, allocatable = node["capacity"] or {}, node["allocatable"] or {}
    product = labels.get("nvidia.com/gpu.product", "")
    common = {
        "cluster_id": cluster_id, "path": Path.DEVICE_PLUGIN, "node_name": node["name"],
        "node_pool": node_pool(labels)[:253], "node_schedulable": bool(node["ready"]) and not node["unschedulable"],
        "model": model_from_product(product)[:200] if product else "",
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
        cap = quantity_int(capacity.get(resource))
        alloc = quantity_int(allocatable.get(resource, 0))
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


def device_plugin_requests(requests: Any, claim_status: Any) -> dict[str, int]:
    """The pod's extended requests that a device plugin serves: without those the scheduler satisfied through a
    generated DRA claim (DRAExtendedResource), whose devices the claim's own allocation already counts."""
    served = pod_claim_served_resources({"status": {"extendedResourceClaimStatus": claim_status}})
    return {r: n for r, n in (requests or {}).items() if r not in served and isinstance(n, int)}


# The pod values `plugin_share` reads: Pod columns, and the one part of the raw object it needs.
SHARE_COLUMNS = ("node_name", "accelerator", "phase", "deleted_at", "extended_requests")
SHARE_RAW = {"claim_status": ("status", "extendedResourceClaimStatus")}


def plugin_share(pod: dict[str, Any]) -> tuple[str, tuple[tuple[str, int], ...]] | None:
    """What one pod adds to its node's device-plugin in-use counts: (node, its requests by resource), or None when it
    adds nothing (no accelerator, not bound, ended, gone, or every request served by a DRA claim). `pod` holds
    SHARE_COLUMNS and SHARE_RAW's values. The one rule behind `pod_requests_by_node`, and behind which nodes a pod
    batch re-derives (only those where some pod's share changed: a pod going Pending → Running changes none)."""
    if (not pod.get("accelerator") or not pod.get("node_name") or pod.get("deleted_at") is not None
            or pod.get("phase") in TERMINAL_PHASES):
        return None
    requests = device_plugin_requests(pod.get("extended_requests"), pod.get("claim_status"))
    return (str(pod["node_name"]), tuple(sorted(requests.items()))) if requests else None


def share_values(queryset: Any) -> Any:
    """`queryset` of pods as dicts of what `plugin_share` reads."""
    raw = {name: F("raw__" + "__".join(path)) for name, path in SHARE_RAW.items()}
    return queryset.values("uid", *SHARE_COLUMNS, **raw)


def written_share_values(pod: Pod) -> dict[str, Any]:
    """The same values of a Pod row about to be written."""
    values: dict[str, Any] = {"uid": pod.uid, **{column: getattr(pod, column) for column in SHARE_COLUMNS}}
    for name, path in SHARE_RAW.items():
        value: Any = pod.raw
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        values[name] = value
    return values


def pod_requests_by_node(cluster_id: int, nodes: set[str] | None) -> dict[str, dict[str, int]]:
    pods = Pod.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True, accelerator=True).exclude(node_name="")
    pods = pods.exclude(phase__in=TERMINAL_PHASES).order_by()
    if nodes is not None:
        pods = pods.filter(node_name__in=nodes)
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in share_values(pods):
        share = plugin_share(pod)
        if share is not None:
            for resource, amount in share[1]:
                totals[share[0]][resource] += amount
    return totals
