"""Register (or update) a cluster from the command line: `manage.py cluster_add NAME --kubeconfig FILE`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.errors import ClusterError
from inventory.services.clusters import cluster_register


class Command(BaseCommand):
    help = ("Register a cluster. The kubeconfig content is stored (never printed); --reference keeps only its path, "
            "which must lie under PORTAL_KUBECONFIG_DIR. Kubeconfigs must carry inline credentials (no exec plugin, "
            "auth-provider or file paths).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--kubeconfig", help="kubeconfig file whose content is stored in the database")
        source.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
        parser.add_argument("--reference", action="store_true",
                            help="store the kubeconfig path (under PORTAL_KUBECONFIG_DIR), not its content")
        parser.add_argument("--context", default="", help="kubeconfig context (default: current-context)")
        parser.add_argument("--description", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        kwargs: dict[str, Any] = {"name": options["name"], "context": options["context"],
                                  "description": options["description"]}
        if options["in_cluster"]:
            kwargs["in_cluster"] = True
        elif options["reference"]:
            # Absolute but not resolved: a mounted Secret's file is a symlink into a directory the kubelet replaces
            # on every update (and names differently in every pod); the check under PORTAL_KUBECONFIG_DIR resolves.
            kwargs["kubeconfig_path"] = os.path.abspath(options["kubeconfig"])
        else:
            try:
                kwargs["kubeconfig"] = Path(options["kubeconfig"]).read_text()
            except OSError as exc:
                raise CommandError(f"cannot read kubeconfig: {exc.strerror}") from None
        try:
            cluster = cluster_register(**kwargs)
        except ClusterError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"cluster {cluster.name} registered (id {cluster.pk}, {cluster.get_connection_display()})")
