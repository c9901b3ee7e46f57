"""How the portal's pages and messages write durations and amounts for people (not for machines)."""

from __future__ import annotations

import datetime as dt

_UNITS = ((86400, "d"), (3600, "h"), (60, "min"))


def duration_text(value: dt.timedelta | None) -> str:
    """``4 h``, ``7 d``, ``1 d 12 h``, ``90 min`` → ``1 h 30 min``; the two largest parts, never ``4:00:00``."""
    if value is None:
        return "—"
    seconds = int(value.total_seconds())
    if seconds <= 0:
        return "0 min"
    parts = []
    for size, unit in _UNITS:
        if seconds >= size:
            parts.append(f"{seconds // size} {unit}")
            seconds %= size
    return " ".join(parts[:2]) if parts else f"{seconds} s"
