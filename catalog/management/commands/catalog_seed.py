"""Load curated offerings (with a price and, optionally, a deprecation) from a YAML file through the services.

Idempotent: offerings whose slug exists are left alone. Used by `make demo` with the demo scenario's offerings.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from catalog.errors import OfferingValidationError
from catalog.models import Offering, OfferingPrice
from catalog.services.offerings import offering_create, offering_lifecycle_change, price_set
from inventory.untrusted_text import UntrustedTextError, load_documents

DEMO = Path(__file__).resolve().parents[2] / "fixtures" / "demo_offerings.yaml"


class Command(BaseCommand):
    help = "Create curated offerings from a YAML list (default: the demo scenario's)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--file", type=Path, default=DEMO)
        parser.add_argument(
            "--prices-from", type=dt.date.fromisoformat, default=None,
            help="Start the first price of each offering this command creates on this date (default: January 1 of "
                 "this year), so the demo's simulated history is priced. Only new offerings: no charge is rewritten.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:  # an operator's file: a larger size limit, the same hardened reader
            documents = load_documents(options["file"].read_text(), max_bytes=64 * 1024 * 1024, max_documents=1)
        except UntrustedTextError as exc:
            raise CommandError(f"{options['file']}: {exc}") from None
        entries = documents[0] if documents else None
        if not isinstance(entries, list):
            raise CommandError(f"{options['file']}: expected a list of offerings")
        created = 0
        deprecations = []
        for entry in entries:
            entry = dict(entry)
            price = entry.pop("price", None)
            deprecate = entry.pop("deprecate", None)
            if Offering.objects.filter(slug=entry.get("slug")).exists():
                continue
            try:
                offering = offering_create(actor=None, data=entry)
            except OfferingValidationError as exc:
                raise CommandError(f"{entry.get('slug')}: {exc}") from exc
            if price:
                first = price_set(actor=None, offering_id=offering.pk, **price)
                # The offering was created a moment ago, so nothing was charged at any price yet: its first price
                # may cover the past the simulator invents (price_set itself refuses past starts for changes).
                since = options["prices_from"] or timezone.localdate().replace(month=1, day=1)
                start = dt.datetime.combine(since, dt.time.min, tzinfo=dt.UTC)
                with transaction.atomic():
                    OfferingPrice.objects.filter(pk=first.pk).update(effective_from=start)
                    audit_record(actor=None, verb="offering.price_backdated", target=offering,
                                 before={"effective_from": first.effective_from.isoformat()},
                                 after={"effective_from": start.isoformat()},
                                 reason="seeded catalog: the first price covers the demo's simulated history")
            if deprecate:
                deprecations.append((offering, deprecate))
            created += 1
        for offering, deprecate in deprecations:
            replacement = Offering.objects.get(slug=deprecate["replacement"])
            offering_lifecycle_change(
                actor=None, offering_id=offering.pk, lifecycle="deprecated", replacement_id=replacement.pk,
                retire_on=timezone.localdate() + dt.timedelta(days=int(deprecate["retire_in_days"])),
            )
        self.stdout.write(f"{created} offerings created")
