"""Celery tasks of the catalog: capacity recomputation (after sync, debounced, and hourly for the history),
retirement of deprecated offerings on their date, and discovery. Thin wrappers around services."""

from __future__ import annotations

import contextlib
import logging
import time

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from inventory.models import Cluster

logger = logging.getLogger(__name__)


@shared_task(name="catalog.capacity_refresh", ignore_result=True, acks_late=True)  # type: ignore[untyped-decorator]
def capacity_refresh_task(cluster_id: int | None = None) -> int:
    from catalog.services.capacity import capacity_refresh

    if cluster_id is not None:
        cache.delete(f"catalog:capacity-refresh:{cluster_id}")
    clusters = None if cluster_id is None else list(Cluster.objects.filter(pk=cluster_id))
    started = time.monotonic()
    written = capacity_refresh(clusters=clusters)
    for cluster in clusters or Cluster.objects.all():
        cache.set(f"catalog:capacity-seconds:{cluster.pk}", time.monotonic() - started, timeout=24 * 3600)
    return written


@shared_task(name="catalog.offerings_retire_due", ignore_result=True)  # type: ignore[untyped-decorator]
def offerings_retire_due_task() -> int:
    from catalog.services.offerings import offerings_retire_due

    return offerings_retire_due()


@shared_task(name="catalog.discovery_run", ignore_result=True)  # type: ignore[untyped-decorator]
def discovery_run_task() -> dict[str, int]:
    from catalog.services.discovery import discovery_run

    return discovery_run()


def capacity_refresh_delay(cluster_id: int) -> float:
    """The debounce window: the configured minimum, or 4x the last recomputation's duration for this cluster, so a
    big cluster under constant churn spends at most ~20% of one worker on capacity (and never starves watchers)."""
    last = cache.get(f"catalog:capacity-seconds:{cluster_id}") or 0.0
    return max(float(settings.PORTAL_CAPACITY_DEBOUNCE_SECONDS), 4.0 * float(last))


def capacity_refresh_soon(cluster_id: int) -> None:
    """Enqueue one recomputation per cluster per debounce window, however many sync batches arrive meanwhile.

    Runs after a sync batch commits: a cache or broker outage (Redis down or flushed) is logged and skipped, never
    raised into the watcher; beat's periodic refresh catches up."""
    key = f"catalog:capacity-refresh:{cluster_id}"
    try:
        delay = capacity_refresh_delay(cluster_id)
        if not cache.add(key, "1", timeout=int(delay * 4 + 30)):
            return
    except Exception as exc:  # noqa: BLE001 - the cache backend's connection errors are not one class
        logger.warning("capacity refresh for cluster %s skipped: cache unavailable (%s)", cluster_id,
                       type(exc).__name__)
        return
    try:
        capacity_refresh_task.apply_async((cluster_id,), countdown=delay)
    except Exception:  # a broker outage must never break the sync that triggered us; beat catches up
        with contextlib.suppress(Exception):
            cache.delete(key)
        logger.warning("could not enqueue capacity refresh for cluster %s", cluster_id, exc_info=True)
