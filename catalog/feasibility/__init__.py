"""Pod feasibility: a pure-Python reproduction of kube-scheduler's Filter phase (and DRA allocation) that explains,
before submission, whether a pod will schedule and why not. No database access here except in `inventory.py`
(`snapshot_for_cluster`), which is imported lazily. See docs/feasibility.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from catalog.feasibility.engine import Explanation, NodeVerdict, explain_pod
from catalog.feasibility.manifests import ManifestError, load_objects, split_pod_manifest
from catalog.feasibility.snapshot import ClusterSnapshot, scenario_snapshot, snapshot_from_objects

if TYPE_CHECKING:
    from inventory.models import Cluster

__all__ = [
    "ClusterSnapshot",
    "Explanation",
    "ManifestError",
    "NodeVerdict",
    "explain_pod",
    "load_objects",
    "scenario_snapshot",
    "snapshot_for_cluster",
    "snapshot_from_objects",
    "split_pod_manifest",
]


def snapshot_for_cluster(cluster: Cluster | int | str) -> ClusterSnapshot:
    """Build a snapshot from the inventory database (see catalog/feasibility/inventory.py)."""
    from catalog.feasibility.inventory import snapshot_for_cluster as load  # needs the Django app registry

    return load(cluster)
