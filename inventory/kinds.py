"""Which model mirrors which Kubernetes kind. The sync engine has one code path for all of them."""

from __future__ import annotations

from inventory import models
from inventory.k8s.types import KINDS, KindRef

MODELS: dict[str, type[models.KubeObject]] = {
    "namespaces": models.Namespace,
    "nodes": models.Node,
    "pods": models.Pod,
    "resourcequotas": models.ResourceQuota,
    "limitranges": models.LimitRange,
    "events": models.Event,
    "resourceslices": models.ResourceSlice,
    "deviceclasses": models.DeviceClass,
    "resourceclaims": models.ResourceClaim,
    "resourceclaimtemplates": models.ResourceClaimTemplate,
    "configmaps": models.ConfigMap,
    "validatingadmissionpolicies": models.AdmissionPolicy,
    "validatingadmissionpolicybindings": models.AdmissionPolicyBinding,
    "topologies": models.Topology,
    "resourceflavors": models.ResourceFlavor,
    "cohorts": models.Cohort,
    "clusterqueues": models.ClusterQueue,
    "localqueues": models.LocalQueue,
    "workloads": models.Workload,
}
SYNCED_KINDS: tuple[str, ...] = tuple(KINDS)
if set(MODELS) != set(KINDS):  # pragma: no cover - a programming error caught at import
    raise ImportError("every synced kind needs a model")


def kind_ref(key: str) -> KindRef:
    try:
        return KINDS[key]
    except KeyError:
        raise ValueError(f"unknown kind {key!r}; known: {', '.join(KINDS)}") from None
