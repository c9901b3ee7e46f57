"""Layer 4 (quota), Kueue part: a Pod or Job that names a LocalQueue (`kueue.x-k8s.io/queue-name`) is admitted by
Kueue, not started at once. Checked against the synced queues (inventory/k8s/semantics/kueue.py holds the rules):
- the LocalQueue exists in the namespace and points at a ClusterQueue that exists;
- the ClusterQueue covers every resource the pods request (else Kueue leaves it pending for ever: "resource …
  unavailable in ClusterQueue");
- whether it would be admitted now (every pod that starts together counted: a Job's parallelism) or wait, and for
  what ("ClusterQueue team-a lacks 4 nvidia.com/gpu in flavor h100 (nominal 16, used 12, borrowable 0)");
- a Job for Kueue should be created suspended (Kueue's webhook suspends it anyway);
- a workload without the label in a namespace that has LocalQueues is told which queue it could name.
Runs only where the cluster serves Kueue (context.kueue is None elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from catalog.validation.findings import ValidationFinding, document_path, join, show
from catalog.validation.objects import PodHolder, pod_resource_totals
from inventory.k8s.semantics import as_dict
from inventory.k8s.semantics.kueue import QUEUE_NAME_LABEL, QueueState, queue_fit


@dataclass
class KueueContext:
    """The cluster's queues: (namespace, LocalQueue) → ClusterQueue name, and the ClusterQueues by name."""

    local_queues: dict[tuple[str, str], str] = field(default_factory=dict)
    cluster_queues: dict[str, QueueState] = field(default_factory=dict)

    def queues_in(self, namespace: str) -> list[str]:
        return sorted(name for ns, name in self.local_queues if ns == namespace)


def _queue_label(holder: PodHolder) -> tuple[str, str]:
    """(queue name, path of the label): Kueue reads the Job's label (a Pod's own for plain pods)."""
    labels = as_dict(as_dict(holder.document.get("metadata")).get("labels"))
    path = join(document_path(holder.index), "metadata", "labels")
    value = labels.get(QUEUE_NAME_LABEL)
    return (value if isinstance(value, str) else ""), join(path, QUEUE_NAME_LABEL)


def _demand(holder: PodHolder) -> dict[str, Fraction]:
    requests, _limits = pod_resource_totals(holder.spec)
    return {name: amount * holder.pods for name, amount in requests.items() if amount > 0}


def check_queues(holders: list[PodHolder], kueue: KueueContext | None) -> list[ValidationFinding]:
    if kueue is None:
        return []
    findings: list[ValidationFinding] = []
    for holder in holders:
        queue, path = _queue_label(holder)
        available = kueue.queues_in(holder.namespace)
        if not queue:
            if available:
                findings.append(ValidationFinding(
                    "quota", "info", join(document_path(holder.index), "metadata", "labels"),
                    f"namespace {show(holder.namespace)} admits work through Kueue (LocalQueue "
                    f"{', '.join(available)}); without the {QUEUE_NAME_LABEL} label this "
                    f"{holder.kind} bypasses the queue (or waits for ever where Kueue manages every job)",
                    f"add the label {QUEUE_NAME_LABEL}: {available[0]}", "queue-label-missing"))
            continue
        findings += _check_named_queue(holder, queue, path, available, kueue)
    return findings


def _check_named_queue(holder: PodHolder, queue: str, path: str, available: list[str],
                       kueue: KueueContext) -> list[ValidationFinding]:
    target = kueue.local_queues.get((holder.namespace, queue))
    if target is None:
        fix = (f"use one of this namespace's LocalQueues: {', '.join(available)}" if available
               else "ask the platform team for a LocalQueue in this namespace")
        return [ValidationFinding("quota", "error", path, f"LocalQueue {show(queue)} does not exist in namespace "
                        f"{show(holder.namespace)}: Kueue never admits this {holder.kind}", fix, "queue-unknown")]
    cluster_queue = kueue.cluster_queues.get(target)
    if cluster_queue is None:
        return [ValidationFinding("quota", "error", path, f"LocalQueue {show(queue)} points at ClusterQueue {target}, "
                        "which does not exist: nothing in it is admitted", "ask the platform team to fix the queue",
                        "queue-target-missing")]
    findings: list[ValidationFinding] = []
    spec = as_dict(holder.document.get("spec"))
    if holder.kind == "Job" and spec.get("suspend") is not True:
        findings.append(ValidationFinding("quota", "info", join(document_path(holder.index), "spec", "suspend"),
                                "Kueue suspends a queued Job when it is created and starts it on admission; set "
                                "suspend: true so nothing starts before that", "suspend: true", "queue-not-suspended"))
    fit = queue_fit(cluster_queue, _demand(holder), list(kueue.cluster_queues.values()))
    pods = f"{holder.pods} pods" if holder.pods != 1 else "its pod"
    if fit.uncovered:
        findings.append(ValidationFinding("quota", "error", path, "; ".join(fit.reasons(target)[:len(fit.uncovered)])
                                + f": Kueue leaves this {holder.kind} pending for ever",
                                "request only resources the queue covers, or ask for the queue to cover them",
                                "queue-resource-not-covered"))
    elif fit.fits:
        flavors = ", ".join(f"{resource} in flavor {flavor}" for resource, flavor in sorted(fit.flavors.items()))
        findings.append(ValidationFinding("quota", "info", path, f"ClusterQueue {target} can admit {pods} now"
                                + (f" ({flavors})" if flavors else ""), "", "queue-admits"))
    else:
        findings.append(ValidationFinding("quota", "warning", path, f"queued, not admitted now for {pods}: "
                                + "; ".join(fit.reasons(target)),
                                "wait for running work to finish, ask for more nominal quota, or request less",
                                "queue-waits"))
    return findings
