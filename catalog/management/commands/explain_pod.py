"""Explain, before submission, whether a pod will schedule and why not (kube-scheduler's Filter phase + DRA).

    python manage.py explain_pod --pod pod.yaml --nodes cluster.json [--pods pods.json] [--format json|text]
    python manage.py explain_pod --pod pod.yaml --cluster prod-east
    python manage.py explain_pod --gang [--replicas N] [--topology KEY] --pod job.yaml --nodes cluster.json

`--gang`: can all the pods of the workload start at once (a Job's parallelism, a JobSet, a training job's replicas,
a Pod repeated --replicas times, or several Pods; docs/feasibility.md, "Gangs")? `--topology` keeps them within
one value of a node label (e.g. nvidia.com/gpu.clique). Kueue's topology annotations on the pod template are
honoured with the levels of the Kueue `Topology` objects in the `--nodes`/`--pods` files (or synced for `--cluster`).

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
from catalog.feasibility.gang import explain_gang, gang_pods
from catalog.feasibility.manifests import group_by_kind
from catalog.management.commands._inventory import require_inventory
from inventory.k8s.semantics import as_dict as _dict
from inventory.k8s.semantics import as_str as _str
from inventory.k8s.semantics import is_qualified_name
from inventory.k8s.semantics.kueue import topology_levels

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
        parser.add_argument("--gang", action="store_true", help="Can all pods of the workload start at once?")
        parser.add_argument("--replicas", type=int, help="--gang with one Pod: this many identical pods.")
        parser.add_argument("--topology", default="", help="--gang: a node label all pods must share a value of.")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["gang"]:
            self._gang(options)
            return
        if options["replicas"] is not None or options["topology"]:
            raise CommandError("--replicas and --topology go with --gang")
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

    def _gang(self, options: dict[str, Any]) -> None:
        if options["topology"] and not is_qualified_name(options["topology"]):
            raise CommandError(f"--topology: {options['topology'][:80]!r} is not a label key")
        try:
            pods, claims, templates, notes = gang_pods(load_objects(Path(options["pod"])),
                                                       replicas=options["replicas"])
        except ManifestError as exc:
            raise CommandError(f"--pod: {exc}") from None
        snapshot, topologies = self._load(options)
        gang = explain_gang(pods, snapshot, extra_claims=claims, extra_claim_templates=templates,
                            topology=options["topology"], topology_levels=topologies)
        gang.notes[:0] = notes
        if options["format"] == "json":
            self.stdout.write(json.dumps(gang.as_json(), indent=2))
            return
        lines = [gang.message, ""]
        lines += [f"{pod} -> {node}" for pod, node in gang.placements[:MAX_TEXT_NODES]]
        if gang.failure is not None:
            lines += ["", f"{gang.first_failure}:"] + [
                f"  {node.name}: {'; '.join(node.reasons)}  [{node.plugin}]"
                for node in [n for n in gang.failure.nodes if not n.fits][:MAX_TEXT_NODES]]
        for title, items in (("hints", gang.hints), ("notes", gang.notes)):
            if items:
                lines += ["", f"{title}:"] + [f"  - {item}" for item in items]
        self.stdout.write("\n".join(lines))

    def _snapshot(self, options: dict[str, Any]) -> ClusterSnapshot:
        return self._load(options)[0]

    def _load(self, options: dict[str, Any]) -> tuple[ClusterSnapshot, dict[str, list[str]] | None]:
        """The snapshot, and Kueue's Topologies (name → levels, widest first; None when the files hold none or
        the cluster does not serve them)."""
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
            topologies = {_str(_dict(t.get("metadata")).get("name")): topology_levels(t.get("spec"), [])
                          for t in grouped.get("Topology", [])} or None
            return snapshot_from_objects(
                nodes=grouped.get("Node", []),
                pods=grouped.get("Pod", []),
                resource_slices=grouped.get("ResourceSlice", []),
                device_classes=grouped.get("DeviceClass", []),
                resource_claims=grouped.get("ResourceClaim", []),
                resource_claim_templates=grouped.get("ResourceClaimTemplate", []),
            ), topologies
        if options["pods"]:
            raise CommandError("--pods needs --nodes (or use --cluster for the inventory)")
        require_inventory("without --nodes, explain_pod", instead="give the cluster's objects with --nodes FILE")
        from catalog.services.queues import kueue_topologies  # only when the database is used
        from inventory.models import Cluster

        name = options["cluster"]
        if not name:
            names = list(Cluster.objects.values_list("name", flat=True)[:2])
            if len(names) != 1:
                raise CommandError("give --nodes FILE or --cluster NAME" + (
                    "" if names else " (no cluster is registered)"))
            name = names[0]
        try:
            cluster = Cluster.objects.get(name=name)
        except Cluster.DoesNotExist:
            raise CommandError(f"--cluster: no cluster named {name!r}") from None
        return snapshot_for_cluster(cluster), kueue_topologies(cluster)

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
