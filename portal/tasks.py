"""Celery tasks of the portal: keep label-mapped tenant namespaces in step with the mirrored namespaces."""

from __future__ import annotations

from celery import shared_task

from inventory.errors import ClusterUnreachableError


def _on_enforcement_failure(self, exc, task_id, args, kwargs, einfo) -> None:
    from portal.enforcement import enforcement_apply_failed

    cluster_id, namespace = args
    enforcement_apply_failed(cluster_id=cluster_id, namespace=namespace, error=f"{type(exc).__name__}: {exc}"[:500])


@shared_task(
    name="portal.enforcement_apply", bind=True, acks_late=True, ignore_result=True,
    autoretry_for=(ClusterUnreachableError,), retry_backoff=5, retry_backoff_max=300, retry_jitter=True,
    max_retries=5, on_failure=_on_enforcement_failure,
)
def enforcement_apply_task(self, cluster_id: int, namespace: str) -> str:
    """Bring an exception scope to its desired state in the cluster (adminAccess namespace label, or the privileged
    policy, binding and exception object when `namespace` is empty). Idempotent."""
    from portal.enforcement import enforcement_apply

    return enforcement_apply(cluster_id=cluster_id, namespace=namespace)


@shared_task(name="portal.access_reconcile", ignore_result=True)
def access_reconcile_task() -> dict[str, dict[str, int]]:
    """Beat: expire due requests and grants, confirm applies against the sync, re-apply drift, detect violations."""
    from portal.access import access_expire_due
    from portal.enforcement import grants_confirm
    from portal.violations import violations_scan

    return {"expired": access_expire_due(), "confirmed": grants_confirm(), "violations": violations_scan()}


@shared_task(name="portal.telemetry_refresh", ignore_result=True)
def telemetry_refresh_task() -> dict[str, int]:
    """Beat: fan out one telemetry rollup per cluster."""
    from portal.telemetry import telemetry_refresh

    return telemetry_refresh()


@shared_task(name="portal.telemetry_cluster_refresh", ignore_result=True, soft_time_limit=600, time_limit=660)
def telemetry_cluster_refresh_task(cluster_id: int) -> dict:
    """Roll up a cluster's finished hours and refresh its telemetry findings (Prometheus trouble is a state)."""
    from inventory.models import Cluster
    from portal.telemetry import telemetry_refresh_cluster

    cluster = Cluster.objects.filter(pk=cluster_id).first()
    return telemetry_refresh_cluster(cluster) if cluster else {"state": "gone"}
