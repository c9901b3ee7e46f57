"""Backfill the demo's capacity history: a fresh demo has one hourly sample, so the offering page's 14-day chart is a
dot. This writes plausible hourly samples for the past days (a working-day curve around today's use) for every
offering's current figures. Demo settings only; never overwrites an hour that has a real sample."""

from __future__ import annotations

import datetime as dt
import math
import random
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from catalog.models import CapacitySample, OfferingCapacity

COPIED = ("matched_devices", "feasible_nodes", "total_units", "allocatable", "cards", "quota_capacity",
          "granted_quota", "capacity_changing")


def utilisation(hour: dt.datetime, base: float, rng: random.Random) -> float:
    """Share of allocatable units held at `hour`: today's share, higher in working hours, lower at weekends."""
    daytime = math.sin(math.pi * (hour.hour - 6) / 14) if 6 <= hour.hour <= 20 else -0.35
    weekend = -0.15 if hour.weekday() >= 5 else 0.0
    return min(1.0, max(0.0, base + 0.22 * daytime + weekend + rng.uniform(-0.05, 0.05)))


def backfill(*, days: int, now: dt.datetime | None = None) -> int:
    """Samples written: one per (offering, cluster) and past hour that has none (bulk, conflicts ignored)."""
    current_hour = (now or timezone.now()).replace(minute=0, second=0, microsecond=0)
    samples = []
    for row in OfferingCapacity.objects.select_related("offering"):
        rng = random.Random(f"{row.offering.slug}@{row.cluster_id}")  # noqa: S311 - a demo curve, the same every run
        base = row.held / row.allocatable if row.allocatable else 0.0
        copied = {field: getattr(row, field) for field in COPIED}
        for back in range(days * 24, 0, -1):
            hour = current_hour - dt.timedelta(hours=back)
            held = round(row.allocatable * utilisation(hour, base, rng))
            free = max(row.allocatable - held - row.unknown, 0)
            samples.append(CapacitySample(
                offering_id=row.offering_id, cluster_id=row.cluster_id, hour=hour, held=held, free=free,
                unknown=row.unknown, largest_placeable=min(row.largest_placeable, free),
                free_by_node={}, **copied))
    CapacitySample.objects.bulk_create(samples, ignore_conflicts=True, batch_size=2000)
    return len(samples)


class Command(BaseCommand):
    help = "Backfill the demo's hourly capacity history (default 14 days). Demo settings only."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=14)

    def handle(self, *args: Any, **options: Any) -> None:
        if not getattr(settings, "PORTAL_DEMO", False):
            raise CommandError("synthetic history belongs to the demo only (portal.settings.demo)")
        if not 1 <= options["days"] <= 60:
            raise CommandError("--days must be between 1 and 60")
        written = backfill(days=options["days"])
        self.stdout.write(f"capacity history: {written} hourly samples over {options['days']} days (demo backfill)")
