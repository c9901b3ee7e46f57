"""Celery tasks of quota: apply a namespace's desired quota or a ClusterQueue's nominal quota (after commit), and the
confirm beat."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from inventory.errors import ClusterUnreachableError


def _on_apply_failure(self: Any, exc: BaseException, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                      einfo: Any) -> None:
    from portal.quota.services import quota_apply_failed

    cluster_id, namespace = args
    quota_apply_failed(cluster_id=cluster_id, namespace=namespace, error=f"{type(exc).__name__}: {exc}"[:500])


@shared_task(
    name="portal.quota_apply", bind=True, acks_late=True, ignore_result=True,
    autoretry_for=(ClusterUnreachableError,), retry_backoff=5, retry_backoff_max=300, retry_jitter=True,
    max_retries=5, on_failure=_on_apply_failure,
)  # type: ignore[untyped-decorator]
def quota_apply_task(self: Any, cluster_id: int, namespace: str) -> str:
    """Apply a namespace's desired quota; safe to run twice (server-side apply of the same desired state)."""
    from portal.quota.services import quota_apply

    return quota_apply(cluster_id=cluster_id, namespace=namespace)


@shared_task(name="portal.quota_confirm", ignore_result=True)  # type: ignore[untyped-decorator]
def quota_confirm_task() -> dict[str, int]:
    from portal.quota.services import quota_requests_confirm

    return quota_requests_confirm()


def _on_queue_apply_failure(self: Any, exc: BaseException, task_id: str, args: tuple[Any, ...],
                            kwargs: dict[str, Any], einfo: Any) -> None:
    from portal.quota.kueue import queue_apply_failed

    cluster_id, cluster_queue = args
    queue_apply_failed(cluster_id=cluster_id, cluster_queue=cluster_queue, error=f"{type(exc).__name__}: {exc}"[:500])


@shared_task(
    name="portal.quota_queue_apply", bind=True, acks_late=True, ignore_result=True,
    autoretry_for=(ClusterUnreachableError,), retry_backoff=5, retry_backoff_max=300, retry_jitter=True,
    max_retries=5, on_failure=_on_queue_apply_failure,
)  # type: ignore[untyped-decorator]
def queue_apply_task(self: Any, cluster_id: int, cluster_queue: str) -> str:
    """Apply a ClusterQueue's granted nominal quota; safe to run twice (the same plan against the live object)."""
    from portal.quota.kueue import queue_apply

    return queue_apply(cluster_id=cluster_id, cluster_queue=cluster_queue)
