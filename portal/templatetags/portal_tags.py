"""Template filters of the portal's own pages (quota, access, chargeback)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django import template

from portal.formatting import duration_text, money_text

register = template.Library()


@register.filter
def duration(value: dt.timedelta | None) -> str:
    """``{{ ar.window|duration }}`` → ``4 h`` (portal.formatting.duration_text)."""
    return duration_text(value)


@register.filter
def money(value: Decimal | float | int | None, currency: str = "") -> str:
    """``{{ row.cost|money:row.currency }}`` → ``1,794.05 EUR`` (portal.formatting.money_text)."""
    return money_text(value or 0, currency)
