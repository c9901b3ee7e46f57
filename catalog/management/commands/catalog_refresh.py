"""Run discovery and/or recompute the catalog's capacity now (what the Celery tasks do), with timings."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from catalog.models import Offering
from catalog.services.capacity import capacity_refresh
from catalog.services.discovery import discovery_run


class Command(BaseCommand):
    help = "Propose offerings from the inventory (--discover) and recompute every offering's capacity."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--discover", action="store_true", help="Run discovery first.")
        parser.add_argument("--no-capacity", action="store_true", help="Skip the capacity recomputation.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["discover"]:
            started = time.perf_counter()
            counts = discovery_run()
            self.stdout.write(f"discovery: {counts} in {time.perf_counter() - started:.2f}s")
        if not options["no_capacity"]:
            started = time.perf_counter()
            rows = capacity_refresh()
            self.stdout.write(
                f"capacity: {rows} (offering, cluster) rows for {Offering.objects.count()} offerings "
                f"in {time.perf_counter() - started:.2f}s"
            )
