"""`manage.py derive [--cluster NAME]`: recompute the derived inventory from the mirrored rows (e.g. after an upgrade
that changed a derivation rule)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from inventory.models import Cluster
from inventory.services.changes import change_feed_lock
from inventory.services.derive import derive_cluster


class Command(BaseCommand):
    help = "Recompute devices, findings and allocation intervals from the mirrored objects."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", help="cluster name (default: every cluster)")

    def handle(self, *args: Any, **options: Any) -> None:
        clusters = Cluster.objects.all()
        if options["cluster"]:
            clusters = clusters.filter(name=options["cluster"])
            if not clusters.exists():
                raise CommandError(f"no cluster named {options['cluster']!r}")
        for cluster in clusters:
            started = time.monotonic()
            with transaction.atomic():
                change_feed_lock(cluster_id=cluster.pk)
                derive_cluster(cluster_id=cluster.pk)
            self.stdout.write(f"{cluster.name}: derived in {time.monotonic() - started:.2f}s")
