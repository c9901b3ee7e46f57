"""What a cluster serves, from its discovery documents, and the version each synced kind is read at.

Pure: the client fetches `/version`, `/apis`, `/api/v1` and `/apis/<group>/<version>` of the groups the portal reads
(`KubernetesClusterClient.discover`); this module decides. A kind the cluster does not serve is a *state* with a
reason the pages show ("DRA not available on this cluster (Kubernetes 1.31)"), never an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from inventory.k8s.semantics.values import as_dict
from inventory.k8s.types import KINDS, KUEUE_GROUP, KindRef
from inventory.k8s.visibility import PENDING_WORKLOADS, VISIBILITY_GROUP, VISIBILITY_VERSIONS

RESOURCE_GROUP = "resource.k8s.io"
ADMISSION_GROUP = "admissionregistration.k8s.io"
EVENTS_GROUP = "events.k8s.io"
# Groups whose resource lists discovery fetches (core/v1 is always fetched).
DISCOVERED_GROUPS = (RESOURCE_GROUP, ADMISSION_GROUP, EVENTS_GROUP, KUEUE_GROUP, VISIBILITY_GROUP)
# Groups whose subresources are recorded too (the visibility API is nothing but `*/pendingworkloads`).
SUBRESOURCE_GROUPS = (VISIBILITY_GROUP,)
# Versions the portal can read, best first. DRA: v1 (1.34+), v1beta2 (1.33), v1beta1 (1.32); the conversion module
# (inventory/k8s/conversion.py) turns the older shapes into v1.
DRA_VERSIONS = ("v1", "v1beta2", "v1beta1")
# Kueue: v1beta2 (Kueue 0.15+; 0.20 serves nothing else), v1beta1 before it (inventory/k8s/conversion.py).
KUEUE_VERSIONS = ("v1beta2", "v1beta1")
_GROUP_VERSIONS = {RESOURCE_GROUP: DRA_VERSIONS, KUEUE_GROUP: KUEUE_VERSIONS}
# Kueue's Topology was served only as v1alpha1 before Kueue 0.14 (its levels have the same shape in every version).
_KIND_VERSIONS = {"topologies": (*KUEUE_VERSIONS, "v1alpha1")}
READABLE_VERSIONS: dict[str, tuple[str, ...]] = {
    key: _KIND_VERSIONS.get(key) or _GROUP_VERSIONS.get(ref.group, (ref.version,)) for key, ref in KINDS.items()
}
KUEUE_KINDS = tuple(key for key, ref in KINDS.items() if ref.group == KUEUE_GROUP)
DRA_KINDS = tuple(key for key, ref in KINDS.items() if ref.group == RESOURCE_GROUP)
VAP_KINDS = ("validatingadmissionpolicies", "validatingadmissionpolicybindings")
_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


def kubernetes_minor(git_version: str) -> str:
    """`v1.31.4` → `1.31` (empty when the server did not say)."""
    match = _VERSION.match(git_version or "")
    return f"{match.group(1)}.{match.group(2)}" if match else ""


@dataclass(frozen=True, slots=True)
class KindAvailability:
    """Whether and how one synced kind is served: `ref` at the best readable version, or None with `reason`."""

    key: str
    ref: KindRef | None
    reason: str = ""  # why it is not synced (empty when served)
    note: str = ""  # how it is served when that matters ("ResourceSlice served as v1beta1")

    @property
    def served(self) -> bool:
        return self.ref is not None

    @property
    def version(self) -> str:
        return self.ref.version if self.ref else ""


@dataclass(frozen=True, slots=True)
class ApiDiscovery:
    """The discovery documents that matter to the portal, as plain data (stored as JSON on the cluster)."""

    git_version: str = ""
    groups: dict[str, list[str]] = field(default_factory=dict)  # served named group → versions, preferred first
    resources: dict[str, list[str]] = field(default_factory=dict)  # "group/version" ("v1" for core) → plurals

    @property
    def kubernetes(self) -> str:
        return kubernetes_minor(self.git_version)

    def _where(self) -> str:
        return f" (Kubernetes {self.kubernetes})" if self.kubernetes else ""

    def to_json(self) -> dict[str, Any]:
        return {"gitVersion": self.git_version, "groups": self.groups, "resources": self.resources}

    @classmethod
    def from_json(cls, data: Any) -> ApiDiscovery | None:
        """None when nothing (valid) was stored yet."""
        if not isinstance(data, dict) or not isinstance(data.get("resources"), dict):
            return None
        groups = as_dict(data.get("groups"))
        return cls(
            git_version=str(data.get("gitVersion") or ""),
            groups={str(g): [str(v) for v in vs] for g, vs in groups.items() if isinstance(vs, list)},
            resources={str(gv): [str(p) for p in ps] for gv, ps in data["resources"].items() if isinstance(ps, list)},
        )

    def serves(self, group: str, version: str, plural: str) -> bool:
        return plural in self.resources.get(f"{group}/{version}" if group else version, [])

    def availability(self, key: str) -> KindAvailability:
        base = KINDS[key]
        for version in READABLE_VERSIONS[key]:
            if self.serves(base.group, version, key):
                ref = replace(base, version=version)
                note = f"{base.kind} served as {version}" if version != base.version else ""
                return KindAvailability(key, ref, note=note)
        return KindAvailability(key, None, reason=self._unserved_reason(base))

    def _unserved_reason(self, base: KindRef) -> str:
        readable = READABLE_VERSIONS[base.key]
        served = self.groups.get(base.group, [])
        if base.group == RESOURCE_GROUP:
            if not served:
                return f"DRA not available on this cluster{self._where()}"
            return (f"DRA served only as {', '.join(f'{base.group}/{v}' for v in served)}{self._where()}; the portal "
                    f"reads {', '.join(readable)}")
        if base.group == KUEUE_GROUP:
            if not served:
                return f"Kueue is not installed on this cluster (no {KUEUE_GROUP} API)"
            if any(self.serves(base.group, v, base.key) for v in served):
                return (f"Kueue served only as {', '.join(f'{base.group}/{v}' for v in served)}; the portal reads "
                        f"{', '.join(readable)}")
            return f"{base.kind} not served by this cluster's Kueue ({', '.join(served)})"
        if base.group == ADMISSION_GROUP:
            return (f"{base.kind} {base.api_version} not served on this cluster{self._where()}; it needs Kubernetes "
                    "1.30 or newer")
        return f"{base.kind} {base.api_version} not served on this cluster{self._where()}"

    def pending_workloads_version(self) -> str:
        """The best visibility.kueue.x-k8s.io version serving ClusterQueues' pending workloads ("" when none)."""
        return next((v for v in VISIBILITY_VERSIONS if self.serves(VISIBILITY_GROUP, v, PENDING_WORKLOADS)), "")

    def pending_workloads_reason(self) -> str:
        """Why Kueue's queue positions cannot be read here (empty when they can): the portal estimates them then."""
        if self.pending_workloads_version():
            return ""
        served = self.groups.get(VISIBILITY_GROUP, [])
        if KUEUE_GROUP not in self.groups:
            return f"Kueue is not installed on this cluster (no {KUEUE_GROUP} API)"
        if not served:
            return (f"Kueue's visibility API ({VISIBILITY_GROUP}) is not served: Kueue runs without it "
                    "(VisibilityOnDemand off, or its APIService not registered)")
        if not any(f"{VISIBILITY_GROUP}/{v}" in self.resources for v in served):
            return f"{VISIBILITY_GROUP} is registered but did not answer discovery (its APIService is unavailable)"
        return (f"{VISIBILITY_GROUP} served only as {', '.join(served)}; the portal reads "
                f"{', '.join(VISIBILITY_VERSIONS)} (clusterqueues/pendingworkloads)")

    def events_api(self) -> str:
        """How Events are read: always core/v1 (every version serves it); says whether events.k8s.io exists too."""
        if EVENTS_GROUP in self.groups:
            return ""
        return f"events.k8s.io not served on this cluster{self._where()}; Events are read from core/v1"
