"""Build a ClusterSnapshot from the inventory database (the mirrored objects' `raw` JSON).

Only pods that hold resources are read (bound to a node, not Succeeded/Failed), selected with the `node_name` and
`phase` columns so the 10,000s of finished or pending pods never leave the database.
"""

from __future__ import annotations

from typing import Any

from catalog.feasibility.snapshot import TERMINAL_PHASES, ClusterSnapshot, snapshot_from_objects
from inventory.k8s.semantics import kubernetes_version
from inventory.models import (
    Cluster,
    DeviceClass,
    Node,
    Pod,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

__all__ = ["snapshot_for_cluster"]

CHUNK = 2000


def _raw(queryset: Any) -> list[dict[str, Any]]:
    return list(queryset.values_list("raw", flat=True).iterator(chunk_size=CHUNK))


def snapshot_for_cluster(cluster: Cluster | int | str) -> ClusterSnapshot:
    """The live (non-tombstoned) objects of one cluster → `snapshot_from_objects`. `cluster`: row, pk or name."""
    if not isinstance(cluster, Cluster):
        lookup = {"pk": cluster} if isinstance(cluster, int) else {"name": cluster}
        cluster = Cluster.objects.get(**lookup)
    pods = Pod.objects.live().filter(cluster=cluster).exclude(node_name="").exclude(phase__in=TERMINAL_PHASES)
    return snapshot_from_objects(
        nodes=_raw(Node.objects.live().filter(cluster=cluster).order_by("name")),
        pods=_raw(pods),
        resource_slices=_raw(ResourceSlice.objects.live().filter(cluster=cluster)),
        device_classes=_raw(DeviceClass.objects.live().filter(cluster=cluster)),
        resource_claims=_raw(ResourceClaim.objects.live().filter(cluster=cluster)),
        resource_claim_templates=_raw(ResourceClaimTemplate.objects.live().filter(cluster=cluster)),
        kubernetes_version=kubernetes_version(cluster.server_version),
    )
