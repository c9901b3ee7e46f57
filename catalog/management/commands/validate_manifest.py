"""Validate a manifest from a file or stdin, e.g. in a tenant's CI. Reads the inventory only; creates nothing.

    python manage.py validate_manifest job.yaml --cluster prod-east          # against the inventory database
    python manage.py validate_manifest job.yaml --snapshot cluster.json     # against a snapshot file, no database

The snapshot is what `kubectl get namespaces,nodes,pods,resourcequotas,deviceclasses,resourceslices,resourceclaims
-A -o json` prints (JSON or YAML, one object, a list or a `kind: List`): the cluster-aware layers and feasibility run
against it exactly as against the inventory. What only the portal's catalog knows (time-sliced pools whose device
plugin refuses more than one replica per container, failRequestsGreaterThanOne) is read from the database when the
command has one; without it, only MPS pools (their node labels say so) are checked for that rule.

Exit codes: 0 no errors, 1 the manifest has errors, 2 usage error (unreadable file, unknown cluster, bad version).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from catalog.feasibility import ManifestError, load_objects, snapshot_from_objects
from catalog.feasibility.manifests import group_by_kind
from catalog.management.commands._inventory import require_inventory
from catalog.services.manifests import snapshot_feasibility, snapshot_gang_feasibility, validation_context
from catalog.validation import (
    MAX_BYTES,
    ValidationContext,
    ValidationFinding,
    ValidationReport,
    context_from_objects,
    format_text,
    validate_manifest,
)
from catalog.validation.context import catalog_single_unit_pools
from inventory.k8s.semantics import kubernetes_version
from inventory.models import Cluster


class Command(BaseCommand):
    help = (
        "Validate a Pod/Job/ResourceClaim/ResourceClaimTemplate manifest (FILE or - for stdin). Without --cluster "
        "or --snapshot only schema, semantics and policy run; with one, namespaces, resources, classes, quotas and "
        "feasibility are checked against the inventory or the snapshot file. Exit code 0 = no errors, 1 = errors, "
        "2 = usage error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE", help="Manifest file (YAML or JSON), or - for stdin.")
        target = parser.add_mutually_exclusive_group()
        target.add_argument("--cluster", help="Name of a registered cluster to validate against.")
        target.add_argument("--snapshot", metavar="FILE",
                            help="The cluster's objects as JSON/YAML (kubectl get … -A -o json); needs no database.")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.add_argument("--kubernetes-version", help="Schema version, e.g. 1.35 (default: the cluster's).")

    def handle(self, *args: Any, **options: Any) -> None:
        text = self._read(options["file"])
        context = ValidationContext()
        if options["snapshot"]:
            context = self._snapshot_context(options["snapshot"])
        elif options["cluster"]:
            require_inventory("--cluster", instead="give the cluster's objects with --snapshot FILE")
            try:
                cluster = Cluster.objects.filter(name=options["cluster"]).first()
                if cluster is None:
                    raise CommandError(f"unknown cluster {options['cluster']!r}", returncode=2)
                context = validation_context(cluster)  # the pages' context: inventory + feasibility
            except DatabaseError as exc:
                raise CommandError(f"cannot read the inventory: {exc.__class__.__name__}", returncode=2) from None
        version = options["kubernetes_version"]
        if version:
            if not re.fullmatch(r"v?\d{1,3}\.\d{1,3}(?:\.\d{1,5})?", version) or kubernetes_version(version) is None:
                raise CommandError(f"--kubernetes-version {version!r} is not a version such as 1.35", returncode=2)
            context = replace(context, kubernetes_version=version)
        report = text if isinstance(text, ValidationReport) else validate_manifest(text, context)
        if options["format"] == "json":
            self.stdout.write(json.dumps(report.as_json(), indent=2, ensure_ascii=True))
        else:
            self.stdout.write(format_text(report), ending="")
        if not report.ok:
            raise SystemExit(1)

    @staticmethod
    def _snapshot_context(name: str) -> ValidationContext:
        try:
            objects = load_objects(Path(name))
        except ManifestError as exc:
            raise CommandError(f"--snapshot: {exc}", returncode=2) from None
        grouped = group_by_kind(objects)
        if not grouped.get("Node"):
            raise CommandError("--snapshot: no objects of kind Node found", returncode=2)
        context = context_from_objects(objects, single_unit_pools=Command._catalog_pools())
        snapshot = snapshot_from_objects(
            nodes=grouped.get("Node", []),
            pods=grouped.get("Pod", []),
            resource_slices=grouped.get("ResourceSlice", []),
            device_classes=grouped.get("DeviceClass", []),
            resource_claims=grouped.get("ResourceClaim", []),
            resource_claim_templates=grouped.get("ResourceClaimTemplate", []),
        )
        context.feasibility = snapshot_feasibility(snapshot)
        context.gang_feasibility = snapshot_gang_feasibility(snapshot)
        return context

    @staticmethod
    def _catalog_pools() -> list[tuple[str, dict[str, Any]]]:
        """The catalog's single-unit time-sliced pools, when this command runs with a database."""
        if getattr(settings, "PORTAL_OFFLINE", False):
            return []
        try:
            return catalog_single_unit_pools()
        except DatabaseError:
            return []

    def _read(self, name: str) -> str | ValidationReport:
        try:
            if name == "-":
                data = sys.stdin.buffer.read(MAX_BYTES + 1) if hasattr(sys.stdin, "buffer") else \
                    sys.stdin.read(MAX_BYTES + 1).encode("utf-8", "surrogatepass")
            else:
                path = Path(name)
                if not path.is_file():
                    raise CommandError(f"{name!r} is not a readable file", returncode=2)
                with path.open("rb") as handle:
                    data = handle.read(MAX_BYTES + 1)
        except OSError as exc:
            raise CommandError(f"cannot read {name!r}: {exc.strerror or exc}", returncode=2) from None
        if len(data) > MAX_BYTES:
            return ValidationReport(findings=[ValidationFinding(
                "parse", "error", "", f"the manifest is larger than {MAX_BYTES:,} bytes", "split it into several "
                "manifests", "manifest-too-large")])
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return ValidationReport(findings=[ValidationFinding(
                "parse", "error", "", f"the manifest is not UTF-8 text (byte {exc.start})", "save it as UTF-8",
                "not-utf8")])
