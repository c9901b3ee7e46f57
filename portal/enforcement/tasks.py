"""Celery tasks of enforcement: bring an exception scope to its desired state in the cluster (after commit)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from inventory.errors import ClusterUnreachableError


def _on_enforcement_failure(self: Any, exc: BaseException, task_id: str, args: tuple[Any, ...],
                            kwargs: dict[str, Any], einfo: Any) -> None:
    from portal.enforcement.services import enforcement_apply_failed

    cluster_id, namespace = args
    enforcement_apply_failed(cluster_id=cluster_id, namespace=namespace, error=f"{type(exc).__name__}: {exc}"[:500])


@shared_task(
    name="portal.enforcement_apply", bind=True, acks_late=True, ignore_result=True,
    autoretry_for=(ClusterUnreachableError,), retry_backoff=5, retry_backoff_max=300, retry_jitter=True,
    max_retries=5, on_failure=_on_enforcement_failure,
)  # type: ignore[untyped-decorator]
def enforcement_apply_task(self: Any, cluster_id: int, namespace: str) -> str:
    """Bring an exception scope to its desired state in the cluster (adminAccess namespace label, or the privileged
    policy, binding and exception object when `namespace` is empty). Idempotent."""
    from portal.enforcement.services import enforcement_apply

    return enforcement_apply(cluster_id=cluster_id, namespace=namespace)
