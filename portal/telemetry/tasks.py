"""Celery tasks of telemetry: the refresh beat fans out one rollup per cluster."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(name="portal.telemetry_refresh", ignore_result=True)  # type: ignore[untyped-decorator]
def telemetry_refresh_task() -> dict[str, int]:
    """Beat: fan out one telemetry rollup per cluster."""
    from portal.telemetry.services import telemetry_refresh

    return telemetry_refresh()


@shared_task(name="portal.telemetry_cluster_refresh", ignore_result=True, soft_time_limit=600,  # type: ignore[untyped-decorator]
             time_limit=660)
def telemetry_cluster_refresh_task(cluster_id: int) -> dict[str, Any]:
    """Roll up a cluster's finished hours and refresh its telemetry findings (Prometheus trouble is a state)."""
    from inventory.models import Cluster
    from portal.telemetry.services import telemetry_refresh_cluster

    cluster = Cluster.objects.filter(pk=cluster_id).first()
    return telemetry_refresh_cluster(cluster) if cluster else {"state": "gone"}
