"""Plain types crossing the adapter boundary: no `kubernetes` objects leak past inventory.k8s."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class KindRef:
    """One synced Kubernetes kind: how to address it and which client call lists it."""

    key: str  # our stable name, e.g. "pods"
    kind: str
    group: str  # "" for core
    version: str
    namespaced: bool
    api: str  # "core", "resource", "admission" or "custom" (a CRD: listed by group, version and plural)
    list_method: str  # method on the typed API class ("" for custom resources)
    namespace: str = ""  # only this namespace (namespaced kinds the portal reads from its own namespace)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


# The namespace where the portal keeps its enforcement objects in each cluster (the privileged-exception
# ConfigMap); the only namespace whose ConfigMaps are synced.
PORTAL_SYSTEM_NAMESPACE = "accelerator-portal-system"
# Kueue's API group (a CRD group: synced only where the cluster serves it) and the version the portal stores.
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"

KINDS: dict[str, KindRef] = {
    ref.key: ref
    for ref in (
        KindRef("namespaces", "Namespace", "", "v1", False, "core", "list_namespace"),
        KindRef("nodes", "Node", "", "v1", False, "core", "list_node"),
        KindRef("pods", "Pod", "", "v1", True, "core", "list_pod_for_all_namespaces"),
        KindRef("resourcequotas", "ResourceQuota", "", "v1", True, "core", "list_resource_quota_for_all_namespaces"),
        KindRef("limitranges", "LimitRange", "", "v1", True, "core", "list_limit_range_for_all_namespaces"),
        KindRef("events", "Event", "", "v1", True, "core", "list_event_for_all_namespaces"),
        KindRef("resourceslices", "ResourceSlice", "resource.k8s.io", "v1", False, "resource", "list_resource_slice"),
        KindRef("deviceclasses", "DeviceClass", "resource.k8s.io", "v1", False, "resource", "list_device_class"),
        KindRef(
            "resourceclaims", "ResourceClaim", "resource.k8s.io", "v1", True, "resource",
            "list_resource_claim_for_all_namespaces",
        ),
        KindRef(
            "resourceclaimtemplates", "ResourceClaimTemplate", "resource.k8s.io", "v1", True, "resource",
            "list_resource_claim_template_for_all_namespaces",
        ),
        KindRef(
            "configmaps", "ConfigMap", "", "v1", True, "core", "list_namespaced_config_map",
            namespace=PORTAL_SYSTEM_NAMESPACE,
        ),
        KindRef(
            "validatingadmissionpolicies", "ValidatingAdmissionPolicy", "admissionregistration.k8s.io", "v1", False,
            "admission", "list_validating_admission_policy",
        ),
        KindRef(
            "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", "admissionregistration.k8s.io", "v1",
            False, "admission", "list_validating_admission_policy_binding",
        ),
        KindRef("topologies", "Topology", KUEUE_GROUP, KUEUE_VERSION, False, "custom", ""),
        KindRef("resourceflavors", "ResourceFlavor", KUEUE_GROUP, KUEUE_VERSION, False, "custom", ""),
        KindRef("cohorts", "Cohort", KUEUE_GROUP, KUEUE_VERSION, False, "custom", ""),
        KindRef("clusterqueues", "ClusterQueue", KUEUE_GROUP, KUEUE_VERSION, False, "custom", ""),
        KindRef("localqueues", "LocalQueue", KUEUE_GROUP, KUEUE_VERSION, True, "custom", ""),
        KindRef("workloads", "Workload", KUEUE_GROUP, KUEUE_VERSION, True, "custom", ""),
    )
}


@dataclass(slots=True)
class ListPage:
    """One page of a paginated list; `items` are raw object dicts."""

    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str | None
    remaining: int | None = None


@dataclass(slots=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK
    object: dict[str, Any] = field(default_factory=dict)

    @property
    def resource_version(self) -> str:
        meta = self.object.get("metadata")
        return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


@dataclass(frozen=True, slots=True)
class DryRunResult:
    """The API server's answer to a create with `dryRun=All` (nothing is persisted)."""

    accepted: bool
    status: int
    reason: str = ""
    message: str = ""
    causes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


# Collection paths of the kinds the portal may dry-run: (apiVersion, kind) → (path prefix, plural).
DRY_RUN_KINDS: dict[tuple[str, str], tuple[str, str]] = {
    ("v1", "Pod"): ("/api/v1", "pods"),
    ("batch/v1", "Job"): ("/apis/batch/v1", "jobs"),
    **{
        (f"resource.k8s.io/{version}", kind): (f"/apis/resource.k8s.io/{version}", plural)
        for version in ("v1", "v1beta2", "v1beta1")
        for kind, plural in (("ResourceClaim", "resourceclaims"), ("ResourceClaimTemplate", "resourceclaimtemplates"))
    },
}


# Kinds the portal writes (server-side apply, delete): (apiVersion, kind) → (path prefix, plural, namespaced).
WRITE_KINDS: dict[tuple[str, str], tuple[str, str, bool]] = {
    ("v1", "Namespace"): ("/api/v1", "namespaces", False),
    ("v1", "ConfigMap"): ("/api/v1", "configmaps", True),
    ("v1", "ResourceQuota"): ("/api/v1", "resourcequotas", True),
    ("resource.k8s.io/v1", "ResourceClaim"): ("/apis/resource.k8s.io/v1", "resourceclaims", True),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"):
        ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"):
        ("/apis/admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", False),
    # Kueue's ClusterQueue at either served version: quota requests that target its nominal quota
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): ("/apis/kueue.x-k8s.io/v1beta2", "clusterqueues", False),
    ("kueue.x-k8s.io/v1beta1", "ClusterQueue"): ("/apis/kueue.x-k8s.io/v1beta1", "clusterqueues", False),
}


def object_path(api_version: str, kind: str, namespace: str, name: str) -> str:
    """The URL path of one object of a kind the portal writes (names are quoted)."""
    from urllib.parse import quote

    try:
        prefix, plural, namespaced = WRITE_KINDS[(api_version, kind)]
    except KeyError:
        raise ValueError(f"the portal does not write {kind or 'unknown kind'} ({api_version})") from None
    scope = f"/namespaces/{quote(namespace, safe='')}" if namespaced else ""
    return f"{prefix}{scope}/{plural}/{quote(name, safe='')}"


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """The API server's answer to a server-side apply (PATCH application/apply-patch+yaml)."""

    applied: bool
    status: int
    conflict: bool = False  # another field manager owns a field we set (HTTP 409)
    message: str = ""
    object: dict[str, Any] = field(default_factory=dict)
