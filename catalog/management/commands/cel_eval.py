"""Evaluate a DRA CEL selector against one device of a ResourceSlice, as the scheduler would.

    python manage.py cel_eval --expression EXPR --driver DRIVER --device DEVICE.json

DEVICE.json is one entry of a ResourceSlice's `spec.devices[]` (name, attributes, capacity, …), DRIVER the slice's
`spec.driver`. Prints `{"result": true|false}` or `{"error": {"kind": "compile"|"runtime", "message": …}}`; the exit
code is 0 for a result, 1 for a CEL error, 2 for unusable input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog import cel
from inventory.untrusted_text import UntrustedTextError, load_documents

MAX_DEVICE_BYTES = 1 << 20


class Command(BaseCommand):
    help = "Evaluate a DRA CEL selector against one ResourceSlice device (prints JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--expression", required=True)
        parser.add_argument("--driver", required=True, help="The ResourceSlice's spec.driver.")
        parser.add_argument("--device", required=True, help="JSON/YAML file with one spec.devices[] entry ('-': stdin).")

    def handle(self, *args: Any, **options: Any) -> None:
        device = self._device(options["device"])
        try:
            selector = cel.compile_selector(options["expression"])
        except cel.CelError as exc:
            self._emit({"error": {"kind": "compile", "message": str(exc)}}, code=1)
            return
        prepared = cel.device_input(
            driver=options["driver"], attributes=device.get("attributes"), capacity=device.get("capacity"),
            allow_multiple_allocations=device.get("allowMultipleAllocations") is True,
        )
        try:
            result = selector.evaluate(prepared)
        except cel.CelError as exc:
            self._emit({"error": {"kind": "runtime", "message": str(exc)}}, code=1)
            return
        self._emit({"result": bool(result)}, code=0)

    def _device(self, path: str) -> dict[str, Any]:
        try:
            text = sys.stdin.read(MAX_DEVICE_BYTES + 1) if path == "-" else Path(path).read_text()[: MAX_DEVICE_BYTES + 1]
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}", returncode=2) from None
        if len(text) > MAX_DEVICE_BYTES:
            raise CommandError("the device file is larger than 1 MiB", returncode=2)
        try:
            documents = load_documents(text, max_bytes=MAX_DEVICE_BYTES, max_documents=1)
        except UntrustedTextError as exc:
            raise CommandError(f"{path} is not JSON or YAML: {str(exc)[:200]}", returncode=2) from None
        data = documents[0] if documents else None
        if not isinstance(data, dict):
            raise CommandError(f"{path} must hold one device object (an entry of spec.devices[])", returncode=2)
        return data

    def _emit(self, payload: dict[str, Any], *, code: int) -> None:
        self.stdout.write(json.dumps(payload))
        if code:
            sys.exit(code)
