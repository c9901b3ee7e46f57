"""Durations as people write them: the access window reads "4 h", never "4:00:00"."""

from __future__ import annotations

import datetime as dt

import pytest

from portal.formatting import duration_text


@pytest.mark.parametrize(("value", "text"), [
    (dt.timedelta(hours=4), "4 h"), (dt.timedelta(days=7), "7 d"), (dt.timedelta(hours=36), "1 d 12 h"),
    (dt.timedelta(minutes=90), "1 h 30 min"), (dt.timedelta(minutes=6), "6 min"), (dt.timedelta(seconds=30), "30 s"),
    (dt.timedelta(0), "0 min"), (None, "—"), (dt.timedelta(days=1, hours=2, minutes=3), "1 d 2 h"),
])
def test_duration_text(value: dt.timedelta | None, text: str) -> None:
    assert duration_text(value) == text


def test_money_is_grouped_in_the_active_language() -> None:
    from decimal import Decimal

    from django.utils import translation

    from portal.formatting import money_text

    assert money_text(Decimal("1794.05"), "EUR") == "1,794.05 EUR"
    assert money_text(1234567, "") == "1,234,567.00"
    assert money_text(Decimal("0.004"), "USD") == "0.00 USD"
    with translation.override("de"):
        assert money_text(Decimal("1794.05"), "EUR") == "1.794,05 EUR"
