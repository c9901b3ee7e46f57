"""Discovery per cluster: read the served API versions, keep them on the cluster, and answer "is this kind synced, at
which version, and if not, why" for the sync engine and every feature that needs a kind.

Discovery is re-read when it is older than PORTAL_DISCOVERY_SECONDS, after a 404 from a list or watch, and by a
watcher that sleeps on a kind the cluster does not serve, so an upgraded cluster starts syncing on its own.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from inventory.changefeed import cluster_snapshot, snapshot_text
from inventory.k8s.client import ClusterClient
from inventory.k8s.discovery import ApiDiscovery, KindAvailability
from inventory.models import Cluster, SyncState
from inventory.services.changes import change_feed_lock, cluster_changes_record


def discovery_refresh(*, cluster_id: int, client: ClusterClient) -> ApiDiscovery:
    """Read the cluster's discovery documents now and store them (and its version) on the cluster."""
    found = client.discover()
    version = found.git_version[:50]
    with transaction.atomic():
        change_feed_lock(cluster_id=cluster_id)
        cluster = Cluster.objects.select_for_update().defer("kubeconfig").get(pk=cluster_id)
        before = snapshot_text(cluster_snapshot(cluster))
        cluster.api_discovery, cluster.discovered_at = found.to_json(), timezone.now()
        cluster.server_version = version or cluster.server_version
        cluster.save(update_fields=["api_discovery", "discovered_at", "server_version"])
        # An upgrade seen by discovery is a CMDB change of the cluster like any other (the feed carries its version).
        cluster_changes_record(cluster=cluster, before=before)
    return found


def discovery_current(*, cluster_id: int, client: ClusterClient, force: bool = False) -> ApiDiscovery:
    """The stored discovery, re-read from the cluster when missing, stale or `force`d."""
    if not force:
        row = Cluster.objects.filter(pk=cluster_id).values("api_discovery", "discovered_at").first()
        stored = ApiDiscovery.from_json(row["api_discovery"]) if row else None
        max_age = timedelta(seconds=settings.PORTAL_DISCOVERY_SECONDS)
        if stored is not None and row is not None and row["discovered_at"] and timezone.now() - row["discovered_at"] < max_age:
            return stored
    return discovery_refresh(cluster_id=cluster_id, client=client)


def sync_state_availability_record(state_id: int, availability: KindAvailability) -> None:
    """Show on the (cluster, kind) state whether and at which version the kind is synced."""
    if availability.served and availability.ref is not None:
        SyncState.objects.filter(pk=state_id).exclude(phase=SyncState.Phase.UNSERVED).update(
            served_version=availability.ref.api_version, unavailable_reason="")
        SyncState.objects.filter(pk=state_id, phase=SyncState.Phase.UNSERVED).update(
            served_version=availability.ref.api_version, unavailable_reason="", phase=SyncState.Phase.IDLE)
    else:
        SyncState.objects.filter(pk=state_id).update(
            served_version="", unavailable_reason=availability.reason, phase=SyncState.Phase.UNSERVED)
