"""Celery tasks of access exceptions: the reconcile beat (expiry, confirmation against the sync, violations)."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="portal.access_reconcile", ignore_result=True)  # type: ignore[untyped-decorator]
def access_reconcile_task() -> dict[str, dict[str, int]]:
    """Beat: expire due requests and grants, confirm applies against the sync, re-apply drift, detect violations."""
    from portal.access.services import access_expire_due
    from portal.enforcement.services import grants_confirm
    from portal.enforcement.violations import violations_scan

    return {"expired": access_expire_due(), "confirmed": grants_confirm(), "violations": violations_scan()}
