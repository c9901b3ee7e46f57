"""Celery tasks of the tenancy: keep label-mapped tenant namespaces in step with the mirrored namespaces."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="portal.tenant_namespaces_sync", ignore_result=True)  # type: ignore[untyped-decorator]
def tenant_namespaces_sync_task() -> dict[str, int]:
    from portal.tenancy.services import tenant_namespaces_sync

    return tenant_namespaces_sync()
