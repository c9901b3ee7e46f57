"""manage.py audit_checkpoint: sign and store a checkpoint of the chain head, print it as a JSON line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.checkpoints import checkpoint_create, checkpoint_export, checkpoint_line
from audit.errors import CheckpointKeyMissingError


class Command(BaseCommand):
    help = ("Write an HMAC-signed checkpoint of the audit chain head (last id, its hash, row count) to the database "
            "and print it as one JSON line; --output FILE also appends it there. Keep that file outside the "
            "database (WORM storage, another host): audit_verify --checkpoints FILE checks the chain against it.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", metavar="FILE", help="Append the checkpoint line to this file.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            checkpoint = checkpoint_create()
        except CheckpointKeyMissingError as exc:
            raise CommandError(str(exc)) from exc
        if options["output"]:
            with Path(options["output"]).open("a", encoding="utf-8") as stream:
                checkpoint_export(checkpoint, stream)
        self.stdout.write(checkpoint_line(checkpoint))
