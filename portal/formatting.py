"""How the portal's pages and messages write durations and amounts for people (not for machines)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.utils.formats import number_format

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


def money_text(value: Decimal | float | int, currency: str = "", *, places: int = 2) -> str:
    """``1794.05`` → ``1,794.05 EUR`` in English, ``1.794,05 EUR`` in German: grouped, with the separators of the
    active language (Django's locale formats), the ISO currency code after the amount."""
    text = number_format(Decimal(value).quantize(Decimal(1).scaleb(-places)), decimal_pos=places,
                         use_l10n=True, force_grouping=True)
    return f"{text} {currency}" if currency else text
