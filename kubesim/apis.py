"""API profiles: which group versions a simulated API server serves, and the older shapes it serves them in.

The store always holds objects in their storage version (``resource.k8s.io/v1``, core/v1 Events); a profile says
which versions the server offers (discovery, routes, ``/version``), and the converters below turn a stored object into
the shape of a served version and back, as kube-apiserver's conversion functions do
(``pkg/apis/resource/v1beta1/conversion.go``: v1beta1 nests a device's fields under ``basic`` and keeps a request's
fields flat where v1beta2/v1 put them under ``exactly``; v1beta2 has the v1 shape).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

RESOURCE_GROUP = "resource.k8s.io"
ADMISSION_GROUP = "admissionregistration.k8s.io"
EVENTS_GROUP = "events.k8s.io"
KUEUE_GROUP = "kueue.x-k8s.io"  # Kueue's CRDs; v1beta2 is its storage version (Kueue 0.15+), v1beta1 the older one
KUEUE_STORAGE_VERSION = "v1beta2"
# Kueue's visibility API: an aggregated API (served by Kueue's controller, not stored) answering which Workloads wait
# in a queue and in which order (clusterqueues/<name>/pendingworkloads, namespaces/<ns>/localqueues/<name>/...).
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")  # newest first, as kube-apiserver lists them


@dataclass(frozen=True)
class ApiProfile:
    """What one simulated API server serves."""

    name: str
    git_version: str  # /version gitVersion, e.g. v1.32.5
    resource_versions: tuple[str, ...]  # served resource.k8s.io versions, preferred first; () = no DRA group
    events_api: bool = True  # events.k8s.io/v1
    admission_policies: bool = True  # admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy(+Binding)
    kueue_versions: tuple[str, ...] = ()  # served kueue.x-k8s.io versions (Kueue installed), preferred first
    # served visibility.kueue.x-k8s.io versions, preferred first; () = Kueue without its visibility API (the
    # VisibilityOnDemand feature gate off, or the APIService not registered)
    kueue_visibility: tuple[str, ...] = ()

    @property
    def minor(self) -> str:
        return self.git_version.lstrip("v").split(".")[1]

    def group_versions(self) -> dict[str, tuple[str, ...]]:
        """Served named groups → versions (preferred first), in discovery order."""
        groups: dict[str, tuple[str, ...]] = {}
        if self.resource_versions:
            groups[RESOURCE_GROUP] = self.resource_versions
        if self.admission_policies:
            groups[ADMISSION_GROUP] = ("v1",)
        if self.events_api:
            groups[EVENTS_GROUP] = ("v1",)
        if self.kueue_versions:
            groups[KUEUE_GROUP] = self.kueue_versions
        if self.kueue_versions and self.kueue_visibility:
            groups[VISIBILITY_GROUP] = self.kueue_visibility
        return groups


PROFILES: dict[str, ApiProfile] = {
    p.name: p
    for p in (
        ApiProfile("current", "v1.35.0", ("v1",)),
        ApiProfile("no-dra", "v1.31.4", ()),
        ApiProfile("dra-v1beta1", "v1.32.5", ("v1beta1",)),
        ApiProfile("dra-v1beta2", "v1.33.2", ("v1beta2",)),
        ApiProfile("no-events", "v1.35.0", ("v1",), events_api=False),
        ApiProfile("no-admission-policies", "v1.29.10", (), admission_policies=False),
        ApiProfile("kueue", "v1.35.0", ("v1",), kueue_versions=("v1beta2", "v1beta1"),
                   kueue_visibility=("v1beta2", "v1beta1")),
        ApiProfile("kueue-v1beta1", "v1.33.2", ("v1beta2",), kueue_versions=("v1beta1",), kueue_visibility=("v1beta1",)),
        # Kueue installed without its visibility API: the portal estimates queue positions itself.
        ApiProfile("kueue-no-visibility", "v1.35.0", ("v1",), kueue_versions=("v1beta2", "v1beta1")),
    )
}


def profile(name: str | None) -> ApiProfile:
    try:
        return PROFILES[name or "current"]
    except KeyError:
        raise ValueError(f"unknown API profile {name!r}: one of {', '.join(PROFILES)}") from None


# ----------------------------------------------------------------------------------------------- resource.k8s.io
_BASIC_FIELDS = (
    "attributes",
    "capacity",
    "consumesCounters",
    "nodeName",
    "nodeSelector",
    "allNodes",
    "taints",
    "bindsToNode",
    "bindingConditions",
    "bindingFailureConditions",
    "allowMultipleAllocations",
)
_EXACT_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity")


def _claim_spec_requests(obj: dict[str, Any], kind: str) -> list[Any] | None:
    spec = obj.get("spec")
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") if isinstance(spec, dict) else None
    devices = spec.get("devices") if isinstance(spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    return requests if isinstance(requests, list) else None


def _as_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{RESOURCE_GROUP}/{version}"
    return out


def _devices(obj: dict[str, Any]) -> list[Any]:
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    return devices if isinstance(devices, list) else []


def dra_from_v1(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """A stored v1 DRA object in the shape of `version` (a copy; v1 returns the object itself)."""
    if version == "v1":
        return obj
    out = _as_version(obj, version)
    if version != "v1beta1":
        return out
    kind = out.get("kind")
    if kind == "ResourceSlice":
        for device in _devices(out):
            if isinstance(device, dict):
                basic = {k: device.pop(k) for k in _BASIC_FIELDS if k in device}
                device["basic"] = basic
    elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
        for request in _claim_spec_requests(out, kind) or []:
            if isinstance(request, dict) and isinstance(request.get("exactly"), dict):
                request.update(request.pop("exactly"))
    return out


def dra_to_v1(obj: dict[str, Any]) -> dict[str, Any]:
    """An object written at an older resource.k8s.io version, in the v1 storage shape (a copy)."""
    version = str(obj.get("apiVersion", "")).rpartition("/")[2]
    if version == "v1":
        return obj
    out = _as_version(obj, "v1")
    if version != "v1beta1":
        return out
    kind = out.get("kind")
    if kind == "ResourceSlice":
        for device in _devices(out):
            if isinstance(device, dict) and isinstance(device.get("basic"), dict):
                device.update(device.pop("basic"))
    elif kind in ("ResourceClaim", "ResourceClaimTemplate"):
        for request in _claim_spec_requests(out, kind) or []:
            if isinstance(request, dict):
                exact = {k: request.pop(k) for k in _EXACT_FIELDS if k in request}
                if exact:
                    request["exactly"] = exact
    return out


# ----------------------------------------------------------------------------------------------- events.k8s.io
_EVENT_RENAMES = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("count", "deprecatedCount"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("source", "deprecatedSource"),
    ("reportingComponent", "reportingController"),
)


def event_from_core(obj: dict[str, Any]) -> dict[str, Any]:
    """A stored core/v1 Event as events.k8s.io/v1 shows it (the field renames of k8s.io/api/events/v1)."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{EVENTS_GROUP}/v1"
    for core, new in _EVENT_RENAMES:
        if core in out:
            out[new] = out.pop(core)
    return out


def event_to_core(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["apiVersion"] = "v1"
    for core, new in _EVENT_RENAMES:
        if new in out:
            out[core] = out.pop(new)
    return out


# ----------------------------------------------------------------------------------------------- kueue.x-k8s.io
# v1beta2 renamed a few fields of v1beta1 (Kueue's apis/kueue/v1beta1/*_conversion.go); the simulator converts the
# ones its scenarios use: a ClusterQueue's `cohort` became `cohortName`.
_KUEUE_SPEC_RENAMES = {"ClusterQueue": (("cohort", "cohortName"),)}


def _kueue_convert(obj: dict[str, Any], version: str, *, to_storage: bool) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{KUEUE_GROUP}/{KUEUE_STORAGE_VERSION if to_storage else version}"
    spec = out.get("spec")
    if isinstance(spec, dict) and version == "v1beta1":
        for old, new in _KUEUE_SPEC_RENAMES.get(str(out.get("kind")), ()):
            source, target = (old, new) if to_storage else (new, old)
            if source in spec:
                spec[target] = spec.pop(source)
    return out


# ----------------------------------------------------------------------------------------------- dispatch
def converts(group: str, version: str) -> bool:
    """Whether objects of this served group version differ from their stored form."""
    return (group == EVENTS_GROUP or (group == RESOURCE_GROUP and version != "v1")
            or (group == KUEUE_GROUP and version != KUEUE_STORAGE_VERSION))


def to_served(group: str, version: str, obj: dict[str, Any]) -> dict[str, Any]:
    if group == EVENTS_GROUP:
        return event_from_core(obj)
    if group == RESOURCE_GROUP:
        return dra_from_v1(obj, version)
    if group == KUEUE_GROUP:
        return _kueue_convert(obj, version, to_storage=False)
    return obj


def to_storage(group: str, obj: dict[str, Any]) -> dict[str, Any]:
    if group == EVENTS_GROUP:
        return event_to_core(obj)
    if group == RESOURCE_GROUP:
        return dra_to_v1(obj)
    if group == KUEUE_GROUP:
        return _kueue_convert(obj, str(obj.get("apiVersion", "")).rpartition("/")[2], to_storage=True)
    return obj
