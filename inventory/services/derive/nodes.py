"""Node findings: GPU nodes without devices, MIG repartitioning, and labels that disagree with the devices."""

from __future__ import annotations

from typing import Any

from inventory.models import (
    Device,
    Finding,
    Mode,
)
from inventory.services.derive.common import (
    GPU_LABEL_PREFIX,
    GPU_PRESENT_LABELS,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_RESOURCE,
    MIG_SINGLE_PRODUCT,
    MIG_STRATEGY_LABEL,
    NVIDIA_DRA_DRIVER,
    finding_row,
    label_int,
    model_from_product,
    normalise_model,
    nvidia_labels,
    quantity_int,
    version_tuple,
)

# All that node findings read of a node's DRA devices besides their keys: a pool's re-derivation that adds or removes
# no device of a node and changes none of these leaves the node's findings as they are.
NODE_FINDING_DEVICE_FIELDS = ("driver", "mode", "model", "memory_mib", "compute_capability", "driver_version",
                              "node_name")


def node_findings(cluster_id: int, node: dict[str, Any], plugin: list[Device], dra: list[Device]) -> list[Finding]:
    name = node["name"]
    scope = f"node/{name}"
    labels = node["labels"] or {}
    capacity = node["capacity"] or {}
    out = []
    for device in plugin:
        if device.unhealthy:
            out.append(finding_row(
                cluster_id, Finding.Kind.UNHEALTHY_DEVICES, Finding.Severity.WARNING, scope, device.key, name,
                f"{name}: {device.unhealthy} of {device.capacity} {device.resource_name} unhealthy "
                f"(allocatable {device.allocatable} < capacity {device.capacity})",
                {"resource": device.resource_name, "capacity": device.capacity, "allocatable": device.allocatable},
            ))
        if device.in_use > device.allocatable:
            out.append(finding_row(
                cluster_id, Finding.Kind.OVERCOMMITTED, Finding.Severity.ERROR, scope, f"{device.key}/overcommitted",
                name, f"{name}: pods request {device.in_use} {device.resource_name}, allocatable is "
                f"{device.allocatable} (bound pods do not move when devices turn unhealthy)",
                {"resource": device.resource_name, "requested": device.in_use, "allocatable": device.allocatable},
            ))
    state = labels.get(MIG_CONFIG_STATE_LABEL)
    if state is not None and state != "success":
        config = labels.get(MIG_CONFIG_LABEL, "")
        failed = state == "failed"
        out.append(finding_row(
            cluster_id, Finding.Kind.MIG_RECONFIGURING, Finding.Severity.ERROR if failed else Finding.Severity.WARNING,
            scope, f"{scope}/mig-config", name,
            f"{name}: MIG configuration {config or '(unnamed)'} "
            + ("failed to apply: the slices advertised may not be the ones asked for" if failed else
               f"is {state}: the node's MIG devices are being repartitioned, its capacity is changing"),
            {"config": config, "state": state, "strategy": labels.get(MIG_STRATEGY_LABEL, "")},
        ))
    gpu_labels = nvidia_labels(labels)
    has_gpu_labels = any(labels.get(k) for k in GPU_PRESENT_LABELS)
    nvidia_resources = {k: v for k, v in capacity.items() if k.startswith(GPU_LABEL_PREFIX)}
    nvidia_dra = [d for d in dra if d.driver == NVIDIA_DRA_DRIVER]
    if has_gpu_labels and not nvidia_resources and not nvidia_dra:
        out.append(finding_row(
            cluster_id, Finding.Kind.PLUGIN_MISSING, Finding.Severity.ERROR, scope, f"{scope}/plugin", name,
            f"{name} has GPU labels but no nvidia.com/* resource in capacity: the device plugin is not registered "
            "(pods requesting GPUs will stay Pending)",
            {"gpu_labels": {k: gpu_labels[k] for k in sorted(gpu_labels) if k in GPU_PRESENT_LABELS},
             "capacity": sorted(capacity)},
        ))
    plugin_cards = {k: v for k, v in nvidia_resources.items() if quantity_int(v) > 0 and not MIG_RESOURCE.match(k)}
    full_dra = [d for d in nvidia_dra if d.mode == Mode.DRA_DEVICE]
    if plugin_cards and full_dra:
        out.append(finding_row(
            cluster_id, Finding.Kind.DOUBLE_COUNTING, Finding.Severity.ERROR, scope, f"{scope}/double", name,
            f"{name}: the device plugin advertises {', '.join(f'{k}={v}' for k, v in sorted(plugin_cards.items()))} "
            f"and the DRA driver publishes {len(full_dra)} GPU device(s) for the same cards: both can be allocated",
            {"device_plugin": plugin_cards, "dra_devices": sorted(d.key for d in full_dra)},
        ))
    if full_dra and has_gpu_labels:
        mismatches = _gfd_mismatches(labels, full_dra)
        if mismatches:
            out.append(finding_row(
                cluster_id, Finding.Kind.GFD_DRA_MISMATCH, Finding.Severity.WARNING, scope, f"{scope}/gfd", name,
                f"{name}: GPU feature discovery labels disagree with DRA attributes ({', '.join(sorted(mismatches))})",
                {"mismatches": mismatches},
            ))
    return out


def _gfd_mismatches(labels: dict[str, str], devices: list[Device]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    product = labels.get("nvidia.com/gpu.product")
    models = sorted({d.model for d in devices if d.model})
    if product and models and all(normalise_model(model_from_product(product)) != normalise_model(m)
                                  for m in models):
        out["model"] = {"label": product, "dra": models}
    # Under the MIG single strategy GFD describes one MIG device in gpu.memory and counts MIG devices in gpu.count.
    mig_single = labels.get(MIG_STRATEGY_LABEL) == "single" and bool(MIG_SINGLE_PRODUCT.search(product or ""))
    memory = None if mig_single else label_int(labels, "nvidia.com/gpu.memory")
    memories = sorted({d.memory_mib for d in devices if d.memory_mib})
    if memory and memories and memory not in memories:
        out["memory_mib"] = {"label": memory, "dra": memories}
    major, minor = labels.get("nvidia.com/gpu.compute.major"), labels.get("nvidia.com/gpu.compute.minor")
    ccs = sorted({d.compute_capability for d in devices if d.compute_capability})
    if major and minor and ccs and f"{major}.{minor}" not in ccs:
        out["compute_capability"] = {"label": f"{major}.{minor}", "dra": ccs}
    driver = labels.get("nvidia.com/cuda.driver-version.full")
    drivers = sorted({d.driver_version for d in devices if d.driver_version})
    if driver and drivers and all(version_tuple(driver) != version_tuple(v) for v in drivers):
        out["driver_version"] = {"label": driver, "dra": drivers}
    gpu_count = None if mig_single else label_int(labels, "nvidia.com/gpu.count")
    if gpu_count is not None and gpu_count != len(devices):
        out["gpu_count"] = {"label": gpu_count, "dra": len(devices)}
    return out
