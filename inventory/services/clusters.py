"""Cluster registry writes."""

from __future__ import annotations

from django.db import transaction

from audit.services import audit_record
from core.types import RequestUser
from inventory.changefeed import cluster_snapshot, snapshot_text
from inventory.errors import ClusterConfigError
from inventory.models import Cluster
from inventory.services.changes import change_feed_lock, cluster_changes_record
from inventory.services.clients import cluster_connection_validate


@transaction.atomic(durable=True)
def cluster_register(
    *, name: str, kubeconfig: str = "", kubeconfig_path: str = "", in_cluster: bool = False, context: str = "",
    description: str = "", actor: RequestUser | None = None,
) -> Cluster:
    """Create or update a cluster's connection settings. Idempotent by name. Validates, never logs, the kubeconfig:
    it must be data with inline credentials (no command, no file, no unlisted proxy), and a path must lie under
    PORTAL_KUBECONFIG_DIR (inventory/services/clients.py)."""
    if sum(bool(x) for x in (kubeconfig, kubeconfig_path, in_cluster)) != 1:
        raise ClusterConfigError("give exactly one of kubeconfig content, kubeconfig path or in-cluster")
    if kubeconfig:
        connection = Cluster.ConnectionKind.KUBECONFIG
    elif kubeconfig_path:
        connection = Cluster.ConnectionKind.KUBECONFIG_PATH
    else:
        connection = Cluster.ConnectionKind.IN_CLUSTER
    cluster_connection_validate(connection=connection, kubeconfig=kubeconfig, kubeconfig_path=kubeconfig_path,
                                context=context)
    existing = Cluster.objects.filter(name=name).first()
    if existing is not None:
        change_feed_lock(cluster_id=existing.pk)  # before the first write, like every writer of the change feed
    previous = None
    if existing is not None:
        previous = {"connection": existing.connection, "kubeconfig_path": existing.kubeconfig_path,
                    "context": existing.context, "description": existing.description}
    cluster, created = Cluster.objects.update_or_create(
        name=name,
        defaults={
            "connection": connection, "kubeconfig": kubeconfig, "kubeconfig_path": kubeconfig_path,
            "context": context, "description": description, "sync_enabled": True,
        },
    )
    cluster_changes_record(cluster=cluster, before=snapshot_text(cluster_snapshot(existing)) if existing else None)
    # The kubeconfig is a secret: the audit records that it changed, never its content.
    after = {"connection": connection, "kubeconfig_path": kubeconfig_path, "context": context,
             "description": description}
    audit_record(actor=actor, verb="cluster.registered" if created else "cluster.updated", target=cluster,
                 before=previous, after=after)
    return cluster


@transaction.atomic(durable=True)
def cluster_delete(*, cluster_id: int, actor: RequestUser | None = None) -> None:
    """Delete a cluster and everything mirrored or derived from it; the change feed records the deletion of its
    nodes, devices and itself, and the audit log the deletion (never the kubeconfig)."""
    cluster_delete_in_transaction(cluster_id=cluster_id, actor=actor)


def cluster_delete_in_transaction(*, cluster_id: int, actor: RequestUser | None = None) -> None:
    """`cluster_delete` for a caller that already opened the transaction (the admin's delete views)."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("cluster_delete_in_transaction must run inside a transaction")
    change_feed_lock(cluster_id=cluster_id)
    cluster = Cluster.objects.select_for_update().get(pk=cluster_id)
    cluster_changes_record(cluster=cluster, before=None, deleted=True)
    audit_record(actor=actor, verb="cluster.deleted", target=cluster,
                 before={"name": cluster.name, "connection": cluster.connection, "context": cluster.context,
                         "description": cluster.description})
    cluster.delete()


def cluster_change_record(*, cluster: Cluster, before: Cluster | None) -> None:
    """After an edit outside `cluster_register` (the admin), inside its transaction: the change-feed event."""
    cluster_changes_record(cluster=cluster, before=snapshot_text(cluster_snapshot(before)) if before else None)
