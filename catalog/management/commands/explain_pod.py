"""Explain, before submission, whether a pod will schedule and why not (kube-scheduler's Filter phase + DRA).

    python manage.py explain_pod --pod pod.yaml --nodes cluster.json [--pods pods.json] [--format json|text]
    python manage.py explain_pod --pod pod.yaml --cluster prod-east

`--pod` holds the Pod (or a Job/Deployment/StatefulSet/ReplicaSet/CronJob, whose pod template is used) and may
carry the ResourceClaims and ResourceClaimTemplates submitted with it. `--nodes`/`--pods` are JSON or YAML files
with one object, a list, or a `kind: List` (e.g. `kubectl get nodes,pods,resourceslices,deviceclasses,
resourceclaims,resourceclaimtemplates -A -o json`); their objects are grouped by kind, whichever file they are in.
Without `--nodes` the snapshot comes from the inventory database (`--cluster`, or the only registered cluster).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalog.feasibility import (
    ClusterSnapshot,
    Explanation,
    ManifestError,
    explain_pod,
    load_objects,
    snapshot_for_cluster,
    snapshot_from_objects,
    split_pod_manifest,
)
from catalog.feasibility.manifests import group_by_kind
from catalog.management.commands._inventory import require_inventory

MAX_TEXT_NODES = 20


class Command(BaseCommand):
    help = "Explain whether a pod will schedule (kube-scheduler filters and DRA allocation) and why not."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pod", required=True, help="Pod (or workload) manifest, JSON or YAML; may include claims.")
        parser.add_argument("--nodes", help="Nodes (and optionally any other kinds) as JSON/YAML.")
        parser.add_argument("--pods", help="Pods bound to the nodes (and optionally other kinds) as JSON/YAML.")
        parser.add_argument("--cluster", help="Inventory cluster name (used when --nodes is not given).")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.add_argument("--all-nodes", action="store_true", help="Text format: list every node, not 20.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            pod, claims, templates, manifest_notes = split_pod_manifest(load_objects(Path(options["pod"])))
        except ManifestError as exc:
            raise CommandError(f"--pod: {exc}") from None
        snapshot = self._snapshot(options)
        explanation = explain_pod(pod, snapshot, extra_claims=claims, extra_claim_templates=templates)
        explanation.notes[:0] = manifest_notes
        if options["format"] == "json":
            self.stdout.write(json.dumps(explanation.as_json(), indent=2))
        else:
            self.stdout.write(self._text(explanation, everything=options["all_nodes"]))

    def _snapshot(self, options: dict[str, Any]) -> ClusterSnapshot:
        if options["nodes"]:
            objects: list[dict[str, Any]] = []
            for flag in ("nodes", "pods"):
                if options[flag]:
                    try:
                        objects += load_objects(Path(options[flag]))
                    except ManifestError as exc:
                        raise CommandError(f"--{flag}: {exc}") from None
            grouped = group_by_kind(objects)
            if not grouped.get("Node"):
                raise CommandError("--nodes: no objects of kind Node found")
            return snapshot_from_objects(
                nodes=grouped.get("Node", []),
                pods=grouped.get("Pod", []),
                resource_slices=grouped.get("ResourceSlice", []),
                device_classes=grouped.get("DeviceClass", []),
                resource_claims=grouped.get("ResourceClaim", []),
                resource_claim_templates=grouped.get("ResourceClaimTemplate", []),
            )
        if options["pods"]:
            raise CommandError("--pods needs --nodes (or use --cluster for the inventory)")
        require_inventory("without --nodes, explain_pod", instead="give the cluster's objects with --nodes FILE")
        from inventory.models import Cluster  # only when the database is used

        name = options["cluster"]
        if not name:
            names = list(Cluster.objects.values_list("name", flat=True)[:2])
            if len(names) != 1:
                raise CommandError("give --nodes FILE or --cluster NAME" + (
                    "" if names else " (no cluster is registered)"))
            name = names[0]
        try:
            return snapshot_for_cluster(Cluster.objects.get(name=name))
        except Cluster.DoesNotExist:
            raise CommandError(f"--cluster: no cluster named {name!r}") from None

    @staticmethod
    def _text(explanation: Explanation, *, everything: bool) -> str:
        lines = [explanation.message, ""]
        failing = [node for node in explanation.nodes if not node.fits]
        if explanation.fitting_nodes:
            lines.append(f"fits on: {', '.join(explanation.fitting_nodes)}")
        shown = failing if everything else failing[:MAX_TEXT_NODES]
        for node in shown:
            lines.append(f"{node.name}: {'; '.join(node.reasons)}  [{node.plugin}]")
            lines.extend(f"    {detail}" for detail in node.details)
        if len(shown) < len(failing):
            lines.append(f"… {len(failing) - len(shown)} more failing nodes (--all-nodes or --format json)")
        if explanation.hints:
            lines += ["", "hints:"] + [f"  - {hint}" for hint in explanation.hints]
        if explanation.notes:
            lines += ["", "notes:"] + [f"  - {note}" for note in explanation.notes]
        return "\n".join(lines)
