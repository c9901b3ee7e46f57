"""Template filters of the portal's own pages (quota, access, chargeback)."""

from __future__ import annotations

import datetime as dt

from django import template

from portal.formatting import duration_text

register = template.Library()


@register.filter
def duration(value: dt.timedelta | None) -> str:
    """``{{ ar.window|duration }}`` → ``4 h`` (portal.formatting.duration_text)."""
    return duration_text(value)
