"""Older served versions of the DRA kinds → the resource.k8s.io/v1 shape the rest of the portal reads.

The one place that knows the field renames between versions (kube-apiserver's
`pkg/apis/resource/v1beta1/conversion.go`): in v1beta1 a ResourceSlice device keeps only `name` and nests every other
field under `basic`, and a ResourceClaim(Template) request holds the exact-request fields flat where v1beta2 and v1
put them under `exactly`. v1beta2 already has the v1 shape. Conversion is total: a malformed object is converted as
far as it can be and keeps whatever it had, so the extractor can still flag it (never raises).
"""

from __future__ import annotations

import copy
from typing import Any

RESOURCE_GROUP = "resource.k8s.io"
# Fields of a v1beta1 `BasicDevice` (v1 has them directly on the Device).
BASIC_DEVICE_FIELDS = (
    "attributes", "capacity", "consumesCounters", "nodeName", "nodeSelector", "allNodes", "taints", "bindsToNode",
    "bindingConditions", "bindingFailureConditions", "allowMultipleAllocations",
)
# Fields of a v1beta1 `DeviceRequest` that v1 moved into `ExactDeviceRequest` (`exactly`).
EXACT_REQUEST_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations",
                        "capacity")


def _requests(obj: dict[str, Any]) -> list[Any]:
    spec = obj.get("spec")
    if obj.get("kind") == "ResourceClaimTemplate":
        spec = spec.get("spec") if isinstance(spec, dict) else None
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    return requests if isinstance(requests, list) else []


def _devices(obj: dict[str, Any]) -> list[Any]:
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    return devices if isinstance(devices, list) else []


def _as_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{RESOURCE_GROUP}/{version}"
    return out


def dra_to_v1(obj: Any, version: str) -> Any:
    """`obj` as served at resource.k8s.io/`version`, in the v1 shape (a copy; v1 objects are returned as they are)."""
    if version == "v1" or not isinstance(obj, dict):
        return obj
    out = _as_version(obj, "v1")
    if version != "v1beta1":
        return out
    if out.get("kind") == "ResourceSlice":
        for device in _devices(out):
            if isinstance(device, dict) and isinstance(device.get("basic"), dict):
                basic = device.pop("basic")
                device.update({k: v for k, v in basic.items() if k not in device})
    elif out.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"):
        for request in _requests(out):
            if isinstance(request, dict) and "exactly" not in request:
                exact = {k: request.pop(k) for k in EXACT_REQUEST_FIELDS if k in request}
                if exact:
                    request["exactly"] = exact
    return out


def dra_from_v1(obj: Any, version: str) -> Any:
    """A v1 DRA object written for a cluster that serves resource.k8s.io/`version` (the generator's templates)."""
    if version == "v1" or not isinstance(obj, dict) or not str(obj.get("apiVersion", "")).startswith(RESOURCE_GROUP):
        return obj
    out = _as_version(obj, version)
    if version != "v1beta1":
        return out
    if out.get("kind") == "ResourceSlice":
        for device in _devices(out):
            if isinstance(device, dict):
                device["basic"] = {k: device.pop(k) for k in BASIC_DEVICE_FIELDS if k in device}
    elif out.get("kind") in ("ResourceClaim", "ResourceClaimTemplate"):
        for request in _requests(out):
            if isinstance(request, dict) and isinstance(request.get("exactly"), dict):
                request.update(request.pop("exactly"))
    return out


def served_dra_version(obj: Any) -> str:
    """The resource.k8s.io version of an object ("" for other groups)."""
    group, _, version = str(obj.get("apiVersion", "") if isinstance(obj, dict) else "").rpartition("/")
    return version if group == RESOURCE_GROUP else ""


# ----------------------------------------------------------------------------------------------- kueue.x-k8s.io
# Kueue v1beta1 → v1beta2 (Kueue's apis/kueue/v1beta1/*_conversion.go), the fields the portal reads: a ClusterQueue's
# `cohort` became `cohortName`, a LocalQueue's `status.flavorUsage` became `flavorsUsage`, a Workload's
# `priorityClassName` (+ `priorityClassSource`) became `priorityClassRef`.
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_STORED_VERSION = "v1beta2"


def _rename(container: Any, old: str, new: str) -> None:
    if isinstance(container, dict) and old in container and new not in container:
        container[new] = container.pop(old)


def kueue_to_v1beta2(obj: Any, version: str) -> Any:
    """`obj` as served at kueue.x-k8s.io/`version`, in the v1beta2 shape (a copy; v1beta2 objects as they are)."""
    if version == KUEUE_STORED_VERSION or not isinstance(obj, dict):
        return obj
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{KUEUE_GROUP}/{KUEUE_STORED_VERSION}"
    kind, spec = out.get("kind"), out.get("spec")
    if kind == "ClusterQueue":
        _rename(spec, "cohort", "cohortName")
    elif kind == "LocalQueue":
        _rename(out.get("status"), "flavorUsage", "flavorsUsage")
    elif kind == "Workload" and isinstance(spec, dict) and isinstance(spec.get("priorityClassName"), str):
        source = spec.pop("priorityClassSource", "")
        name = spec.pop("priorityClassName")
        if name and "priorityClassRef" not in spec:
            pod_class = source == "scheduling.k8s.io/priorityclass"
            spec["priorityClassRef"] = {
                "group": "scheduling.k8s.io" if pod_class else KUEUE_GROUP,
                "kind": "PriorityClass" if pod_class else "WorkloadPriorityClass",
                "name": name,
            }
    return out


def to_stored_shape(obj: Any, group: str, version: str) -> Any:
    """An object as a cluster served it, in the shape the portal stores and reads (the newest it understands)."""
    if group == RESOURCE_GROUP:
        return dra_to_v1(obj, version)
    if group == KUEUE_GROUP:
        return kueue_to_v1beta2(obj, version)
    return obj


def converted_on_read(group: str, version: str) -> bool:
    """Whether objects served at this group version are stored in another shape (the served one kept beside)."""
    return (group == RESOURCE_GROUP and version != "v1") or (group == KUEUE_GROUP and version != KUEUE_STORED_VERSION)
