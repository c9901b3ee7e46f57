"""Celery tasks of chargeback: the beat keeps the hourly rollups current (portal/chargeback/rollups.py)."""

from __future__ import annotations

from typing import Any

from celery import shared_task


@shared_task(name="portal.chargeback_rollups_refresh", ignore_result=True, soft_time_limit=1800,  # type: ignore[untyped-decorator]
             time_limit=1860)
def chargeback_rollups_refresh_task() -> dict[str, Any]:
    """Rebuild what changed, roll up the hours that passed and the current hour as of now."""
    import datetime as dt

    from portal.chargeback.rollups import refresh

    state = refresh(max_age=dt.timedelta(0))
    return {"until": state.until.isoformat(), "as_of": state.as_of.isoformat()}
