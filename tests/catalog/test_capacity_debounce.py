"""The capacity recomputation after sync batches is debounced, adaptively: never more than ~20% of a worker."""

from __future__ import annotations

from django.core.cache import cache

from catalog.tasks import capacity_refresh_delay


def test_delay_is_the_minimum_or_four_times_the_last_run(settings) -> None:
    settings.PORTAL_CAPACITY_DEBOUNCE_SECONDS = 10
    cache.delete("catalog:capacity-seconds:7")
    assert capacity_refresh_delay(7) == 10.0  # never measured: the configured minimum
    cache.set("catalog:capacity-seconds:7", 1.5)
    assert capacity_refresh_delay(7) == 10.0  # a quick cluster keeps the minimum
    cache.set("catalog:capacity-seconds:7", 4.0)
    assert capacity_refresh_delay(7) == 16.0  # a big one backs off to 4x its duration
