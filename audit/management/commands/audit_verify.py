"""manage.py audit_verify: recompute the audit chain (and check signed checkpoints); exit 0 intact, 1 broken."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.checkpoints import CheckpointResult, checkpoints_verify_lines, checkpoints_verify_stored, verification_keys
from audit.errors import CheckpointKeyMissingError
from audit.services import audit_verify

EXIT_BROKEN = 1
EXIT_UNVERIFIABLE = 2


class Command(BaseCommand):
    help = ("Recompute the audit hash chain and report edited, deleted and reordered rows with their ids. With "
            "--checkpoints FILE, also verify exported checkpoints (HMAC and chain head). Exit 0 intact, 1 broken, "
            "2 could not verify.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=["text", "json"], default="text")
        parser.add_argument("--checkpoints", metavar="FILE", action="append", default=[],
                            help="JSON-lines file written by audit_checkpoint --output (repeatable).")
        parser.add_argument("--no-stored-checkpoints", action="store_true",
                            help="Do not check the checkpoint rows stored in the database.")

    def handle(self, *args: Any, **options: Any) -> None:
        files = [Path(name) for name in options["checkpoints"]]
        keys: list[bytes] = []
        try:
            keys = verification_keys()
        except CheckpointKeyMissingError as exc:
            if files:
                raise CommandError(str(exc), returncode=EXIT_UNVERIFIABLE) from exc
        for path in files:
            if not path.is_file():
                raise CommandError(f"No such checkpoint file: {path}", returncode=EXIT_UNVERIFIABLE)

        report = audit_verify()
        results: list[CheckpointResult] = []
        if keys and not options["no_stored_checkpoints"]:
            results += checkpoints_verify_stored(keys=keys)
        for path in files:
            with path.open(encoding="utf-8") as stream:
                results += checkpoints_verify_lines(stream, keys=keys, name=str(path))
        intact = report.intact and all(r.ok for r in results)

        if options["format"] == "json":
            out = {**report.as_dict(), "intact": intact, "chain_intact": report.intact,
                   "checkpoints": [r.as_dict() for r in results], "checkpoints_checked": bool(keys)}
            self.stdout.write(orjson.dumps(out).decode())
        else:
            self._text(report, results, bool(keys))
        if not intact:
            raise CommandError("The audit log failed verification.", returncode=EXIT_BROKEN)

    def _text(self, report: Any, results: list[CheckpointResult], keyed: bool) -> None:
        head = f"#{report.head_id} {report.head_hash[:16]}…" if report.head_id is not None else "(empty)"
        self.stdout.write(f"Chain: {report.checked} rows checked, head {head}")
        for problem in report.problems:
            self.stdout.write(f"  row {problem.event_id}: {problem.kind}: {problem.detail}")
        if report.truncated:
            self.stdout.write("  (more problems not shown)")
        if not keyed:
            self.stdout.write("Checkpoints: not checked (PORTAL_AUDIT_CHECKPOINT_KEY is not set)")
        for result in results:
            state = "ok" if result.ok else f"FAILED: {result.problem}"
            self.stdout.write(f"Checkpoint {result.source} (head #{result.last_id}): {state}")
        intact = report.intact and all(r.ok for r in results)
        self.stdout.write(self.style.SUCCESS("INTACT") if intact else self.style.ERROR("BROKEN"))
