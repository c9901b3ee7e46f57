"""`manage.py kubesim --scenario demo --port 6443`: run the Kubernetes simulator in the foreground."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Run the Kubernetes API simulator (see docs/kubesim-scenarios.md). Options as `python -m kubesim`."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs="*")
        parser.add_argument("--scenario", default="demo")
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", default="6443")
        parser.add_argument("--write-kubeconfig", default=None)
        parser.add_argument("--churn", default=None)
        parser.add_argument("--seed", default=None)
        parser.add_argument("--api", default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        from kubesim.__main__ import main

        argv = ["--scenario", options["scenario"], "--host", options["host"], "--port", str(options["port"])]
        for flag in ("write_kubeconfig", "churn", "seed", "api"):
            if options[flag] is not None:
                argv += [f"--{flag.replace('_', '-')}", str(options[flag])]
        sys.exit(main(argv))
