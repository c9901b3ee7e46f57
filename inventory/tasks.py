"""Celery tasks: thin wrappers that take primary keys, hold a lease and call the sync service.

Beat runs `watchers_ensure` every few seconds; it enqueues a `watch_window` for every (cluster, kind) whose lease
nobody holds. A window lists if needed, watches for PORTAL_WATCH_WINDOW_SECONDS, saves its resourceVersion,
releases the lease and enqueues its successor, so a killed worker loses at most one window and no data.

Kueue's queue positions are read on their own beat (`queue_positions_due`, every PORTAL_QUEUE_POSITIONS_SECONDS),
not after each Workload batch: positions also move when no Workload of the reader's changes, a busy cluster writes
Workload batches several times a second (one visibility request per ClusterQueue each time would load Kueue's
aggregated API, which Kueue puts behind its own API Priority and Fairness limits), and a fixed period bounds the
age of a shown position (PORTAL_QUEUE_POSITION_FRESH_SECONDS).
"""

from __future__ import annotations

import logging

import redis
from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from inventory.errors import ClusterConfigError, ClusterError, LeaseLostError
from inventory.k8s.discovery import ApiDiscovery
from inventory.k8s.types import KUEUE_GROUP
from inventory.kinds import SYNCED_KINDS
from inventory.leases import lease_backend
from inventory.models import Cluster, SyncState
from inventory.services.clients import client_for
from inventory.services.sync import (
    kind_sync_window,
    sync_lease_lost_record,
    sync_state_error_record,
    sync_state_for,
)

logger = logging.getLogger(__name__)


def _claim_enqueue(state: SyncState) -> bool:
    """Atomic "enqueue once" marker so beat does not pile up windows while a worker is busy starting one."""
    key = f"portal:watch-enqueued:{state.pk}"
    ttl = max(5, int(settings.PORTAL_WATCH_LEASE_SECONDS))
    if settings.PORTAL_LEASE_BACKEND == "redis":
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
        return bool(client.set(key, "1", nx=True, ex=ttl))
    return cache.add(key, "1", timeout=ttl)


def _clear_enqueue(state_id: int) -> None:
    key = f"portal:watch-enqueued:{state_id}"
    if settings.PORTAL_LEASE_BACKEND == "redis":
        redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5).delete(key)
    else:
        cache.delete(key)


@shared_task(name="inventory.watchers_ensure", ignore_result=True)  # type: ignore[untyped-decorator]
def watchers_ensure_task() -> int:
    """Keep one watcher per (cluster, kind) alive. Returns how many windows it enqueued."""
    backend = lease_backend()
    started = 0
    for cluster_id in Cluster.objects.enabled().values_list("pk", flat=True):
        for kind in SYNCED_KINDS:
            state = sync_state_for(cluster_id=cluster_id, kind=kind)
            if backend.is_held(state) or not _claim_enqueue(state):
                continue
            watch_window_task.delay(cluster_id, kind)
            started += 1
    return started


@shared_task(name="inventory.watch_window", ignore_result=True, acks_late=True)  # type: ignore[untyped-decorator]
def watch_window_task(cluster_id: int, kind: str) -> str:
    """One bounded list/watch window under the (cluster, kind) lease; hands over to a successor at the end."""
    state = sync_state_for(cluster_id=cluster_id, kind=kind)
    _clear_enqueue(state.pk)
    cluster = Cluster.objects.filter(pk=cluster_id, sync_enabled=True).first()
    if cluster is None:
        return "cluster disabled or gone"
    lease = lease_backend().acquire(state, settings.PORTAL_WATCH_LEASE_SECONDS)
    if lease is None:
        return "lease held by another watcher"
    handover = True
    try:
        client = client_for(cluster)
        try:
            result = kind_sync_window(
                cluster_id=cluster_id, kind=kind, client=client, lease=lease,
                window_seconds=settings.PORTAL_WATCH_WINDOW_SECONDS,
            )
        finally:
            client.close()
        outcome = f"{result.events} events, {len(result.lists)} lists, {result.relists} relists"
    except LeaseLostError as exc:
        handover = False  # whoever holds it now carries on; beat covers the case where nobody does
        outcome = f"lease lost: {exc}"
        sync_lease_lost_record(cluster_id=cluster_id, kind=kind, state_id=state.pk, message=str(exc))
    except ClusterConfigError as exc:
        handover = False  # permanent until an admin fixes the cluster; beat retries
        sync_state_error_record(state.pk, str(exc))
        outcome = f"config error: {exc}"
    except ClusterError as exc:
        handover = False
        sync_state_error_record(state.pk, str(exc))
        outcome = f"cluster error: {exc}"
    finally:
        lease.release()
    if handover and _claim_enqueue(state):
        watch_window_task.delay(cluster_id, kind)
    logger.info("watch window %s/%s: %s", cluster.name, kind, outcome)
    return outcome


@shared_task(name="inventory.queue_positions_due", ignore_result=True)  # type: ignore[untyped-decorator]
def queue_positions_due_task() -> int:
    """Beat: one position read per enabled cluster whose discovery shows Kueue (the read itself decides whether the
    visibility API is served, and records why not). Returns how many it enqueued."""
    from inventory.services.queue_positions import queue_positions_state

    backend = lease_backend()
    started = 0
    for cluster_id, discovery in Cluster.objects.enabled().values_list("pk", "api_discovery"):
        found = ApiDiscovery.from_json(discovery)
        if found is None or KUEUE_GROUP not in found.groups:
            continue
        state = queue_positions_state(cluster_id=cluster_id)
        if backend.is_held(state) or not _claim_enqueue(state):
            continue
        queue_positions_sync_task.delay(cluster_id)
        started += 1
    return started


@shared_task(name="inventory.queue_positions_sync", ignore_result=True)  # type: ignore[untyped-decorator]
def queue_positions_sync_task(cluster_id: int) -> str:
    """Read a cluster's queue positions from Kueue's visibility API under the cluster's `queuepositions` lease.
    Errors are recorded on that sync state; the next beat tries again (stored positions keep their timestamp)."""
    from inventory.services.queue_positions import queue_positions_state, queue_positions_sync

    state = queue_positions_state(cluster_id=cluster_id)
    _clear_enqueue(state.pk)
    cluster = Cluster.objects.filter(pk=cluster_id, sync_enabled=True).first()
    if cluster is None:
        return "cluster disabled or gone"
    lease = lease_backend().acquire(state, settings.PORTAL_WATCH_LEASE_SECONDS)
    if lease is None:
        return "lease held by another reader"
    try:
        client = client_for(cluster)
        try:
            result = queue_positions_sync(cluster_id=cluster_id, client=client, lease=lease)
        finally:
            client.close()
        outcome = (f"{result.queues} queues, {result.positioned} positioned, {result.cleared} cleared"
                   + (f", refused: {', '.join(result.refused)}" if result.refused else "")
                   if result.served else f"not served: {result.reason}")
    except LeaseLostError as exc:
        outcome = f"lease lost: {exc}"
    except ClusterError as exc:  # unreachable (positions stay, with their timestamps) or misconfigured
        sync_state_error_record(state.pk, str(exc))
        outcome = f"cluster error: {exc}"
    finally:
        lease.release()
    logger.info("queue positions %s: %s", cluster.name, outcome)
    return outcome


@shared_task(name="inventory.change_events_prune", ignore_result=True)  # type: ignore[untyped-decorator]
def change_events_prune_task() -> int:
    """Beat (daily): drop change-feed events older than PORTAL_CHANGE_RETENTION_DAYS, keeping each object's latest."""
    from inventory.services.changes import change_events_prune

    return change_events_prune().deleted
