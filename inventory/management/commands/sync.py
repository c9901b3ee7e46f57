"""`manage.py sync --cluster NAME --once`: list every kind once, print counts and timings, exit.

Kinds the cluster does not serve (read from its discovery documents first) are listed as skipped with the reason.
`--status` lists nothing: it prints each kind's listings, relists, lease losses and last activity (the watchers' record).
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.errors import ClusterError, LeaseLostError
from inventory.kinds import SYNCED_KINDS
from inventory.leases import lease_backend
from inventory.models import Cluster, SyncState
from inventory.services.clients import client_for
from inventory.services.sync import cluster_sync_once


class Command(BaseCommand):
    help = "Sync a cluster's objects into the database (full listing of every kind)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="cluster name")
        parser.add_argument("--once", action="store_true", help="list every kind once and exit (required for now)")
        parser.add_argument("--kind", action="append", choices=SYNCED_KINDS, help="limit to these kinds")
        parser.add_argument("--page-size", type=int, default=None)
        parser.add_argument("--status", action="store_true",
                            help="print every kind's listings, relists and lease losses so far; list nothing")

    def _status(self, cluster: Cluster, kinds: list[str]) -> None:
        for state in SyncState.objects.filter(cluster=cluster, kind__in=kinds).order_by("kind"):
            last = max((s for s in (state.last_event_at, state.last_success_at) if s is not None), default=None)
            self.stdout.write(
                f"{state.kind:<34} listings={state.list_id:<4} relists={state.relists:<4} "
                f"lease_losses={state.lease_losses:<4} phase={state.phase:<9} "
                f"last_activity={last.isoformat(timespec='seconds') if last else '-'}"
            )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["once"] and not options["status"]:
            raise CommandError("continuous sync runs in Celery (worker + beat); use --once for a single pass")
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {options['cluster']!r}")
        if options["status"]:
            self._status(cluster, options["kind"] or list(SYNCED_KINDS))
            return
        backend = lease_backend()
        started = time.monotonic()
        try:
            client = client_for(cluster)  # a refused kubeconfig is a ClusterConfigError, reported like any other
        except ClusterError as exc:
            raise CommandError(str(exc)) from None
        try:
            results = cluster_sync_once(
                cluster_id=cluster.pk, client=client, kinds=options["kind"] or SYNCED_KINDS,
                lease_for=lambda state: backend.acquire(state, max(60, settings.PORTAL_WATCH_LEASE_SECONDS)),
                page_size=options["page_size"],
            )
        except (ClusterError, LeaseLostError) as exc:
            raise CommandError(str(exc)) from None
        finally:
            client.close()
        total = 0
        for r in results:
            total += r.count
            self.stdout.write(
                f"{r.kind:<24} {r.count:>7} objects {r.pages:>4} pages {r.tombstoned:>6} tombstoned "
                f"{r.flagged:>5} flagged {r.seconds:8.2f}s  rv={r.resource_version}"
            )
        for skipped in results.skipped:  # a kind the cluster does not serve is a state: reported, exit status 0
            self.stdout.write(f"{skipped.kind:<24} skipped: {skipped.reason}")
        self.stdout.write(f"{'total':<24} {total:>7} objects in {time.monotonic() - started:.2f}s")
        self._status(cluster, [r.kind for r in results])
