"""Quota grants on Kueue ClusterQueues: where a tenant's work is admitted through Kueue (its `quota_target`), an
approved request raises the nominal quota of one (flavor, resource) cell of the ClusterQueue its namespace's
LocalQueue feeds, instead of a ResourceQuota. The request's life (approval, thresholds, expiry, audit) is the same
as for ResourceQuotas (portal/quota/services.py); this module is its cluster side for queues.

Which cell: the namespace's LocalQueues name ClusterQueues; the offering's flavors are those whose nodes hold the
offering's devices (catalog/services/queues.py); the resource is the offering's extended resource. A ClusterQueue
fed from namespaces of another tenant is refused (its quota is not this tenant's alone), as is a flavor whose nodes
hold several offerings of the same resource (the grant would not say which card).

What is applied: per cell, the nominal quota before the portal managed it (`baselines`, recorded once from the
sync) plus the granted units of unexpired requests, so applying twice, or after an expiry, gives the same result and
an ended grant gives the baseline back. Kueue declares `spec.resourceGroups` an atomic list: a server-side apply
owns it whole, so the portal reads the live ClusterQueue, changes only its cells' `nominalQuota`, and applies the
whole list guarded by the live resourceVersion (a concurrent edit makes the apply retry on the new object, never
overwrite it). Whoever applied the list before owns it: taking it over needs the tenant's quota ownership policy
(forced apply); otherwise the apply is refused with the reason and a fix. A request becomes active when the sync
shows the nominal quota, and the confirm beat re-applies drift with backoff (`ClusterQueueQuotaState`).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from catalog.models import Offering
from catalog.services.queues import DRA_NOTE, flavor_mappings
from inventory.k8s.semantics import format_quantity
from inventory.k8s.semantics.kueue import (
    FlavorQuota,
    cluster_queue_quotas,
    quotas_from_json,
    usage_from_json,
    with_nominal_quotas,
)
from inventory.models import Cluster, ClusterQueue, LocalQueue
from inventory.selectors import cluster_discovery
from portal.notifications.selectors import approvers
from portal.notifications.services import notify
from portal.quota.models import (
    GRANTED,
    ClusterQueueQuotaState,
    QuotaNamespaceState,
    QuotaOwnership,
    QuotaRequest,
    unexpired,
)
from portal.tenancy.models import QuotaTarget, TenantNamespace

if TYPE_CHECKING:
    from inventory.services.clients import ClientFactory

State = QuotaRequest.State
Status = QuotaNamespaceState.Status
FIELD_MANAGER = "accelerator-portal"  # the same field manager as the ResourceQuota appliers (services.FIELD_MANAGER)
STALE_RETRIES = 3  # re-reads when the ClusterQueue changed between our read and our apply


class QueueTargetError(ValueError):
    """No ClusterQueue cell can take the grant (the message says why and what to do)."""


@dataclass(frozen=True, slots=True)
class QueueTarget:
    """One (ClusterQueue, flavor, resource) cell a grant can raise, with what an approver weighs."""

    cluster_queue: str
    flavor: str
    resource: str
    cohort: str
    nominal: Fraction
    borrowing_limit: Fraction | None
    lending_limit: Fraction | None
    used: Fraction
    local_queues: tuple[str, ...]  # namespace/name

    @property
    def cell(self) -> str:
        return cell_key(self.flavor, self.resource)

    def to_json(self) -> dict[str, Any]:
        return {"cluster_queue": self.cluster_queue, "flavor": self.flavor, "resource": self.resource,
                "cohort": self.cohort, "nominal": format_quantity(self.nominal),
                "borrowing_limit": _optional(self.borrowing_limit), "lending_limit": _optional(self.lending_limit),
                "used": format_quantity(self.used), "local_queues": list(self.local_queues)}


def _optional(value: Fraction | None) -> str | None:
    return None if value is None else format_quantity(value)


def cell_key(flavor: str, resource: str) -> str:
    return f"{flavor}/{resource}"


def _split(cell: str) -> tuple[str, str]:
    flavor, _, resource = cell.partition("/")
    return flavor, resource


def queue_targets(cluster: Cluster, namespace: str, offering: Offering) -> tuple[list[QueueTarget], list[str]]:
    """Every ClusterQueue cell a grant of `offering` in `namespace` can raise, and why others cannot."""
    problems: list[str] = []
    if offering.is_dra:
        return [], [DRA_NOTE]
    local = list(LocalQueue.objects.live().filter(cluster=cluster, namespace=namespace).order_by("name")
                 .values_list("name", "cluster_queue"))
    if not local:
        return [], [f"Namespace {namespace} has no LocalQueue in cluster {cluster.name}: Kueue admits none of its "
                    "work, so no ClusterQueue quota can be granted for it."]
    mappings = {name: m for name, m in flavor_mappings(cluster, [offering]).items() if offering.slug in m.offerings}
    if not mappings:
        return [], [f"No ResourceFlavor of cluster {cluster.name} stands for the nodes of {offering.name}."]
    owner = TenantNamespace.objects.filter(cluster=cluster, namespace=namespace).values_list("tenant_id", flat=True)
    tenant_id = owner.first()
    feeders: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for ns, name, target in LocalQueue.objects.live().filter(cluster=cluster).values_list(
            "namespace", "name", "cluster_queue"):
        feeders[target].append((ns, name))
    tenants = dict(TenantNamespace.objects.filter(cluster=cluster).values_list("namespace", "tenant_id"))
    targets: list[QueueTarget] = []
    for queue_name in sorted({cq for _, cq in local}):
        queue = ClusterQueue.objects.live().filter(cluster=cluster, name=queue_name).first()
        if queue is None:
            problems.append(f"ClusterQueue {queue_name} (named by a LocalQueue of {namespace}) does not exist.")
            continue
        others = sorted({ns for ns, _ in feeders[queue_name] if tenants.get(ns) != tenant_id})
        if others:
            problems.append(f"ClusterQueue {queue_name} also admits work from namespace{'s' if len(others) > 1 else ''} "
                            f"{', '.join(others)} (not this tenant's): its nominal quota is not this tenant's alone. "
                            "A platform admin changes it, or gives the tenant a ClusterQueue of its own.")
            continue
        usage = usage_from_json(queue.usage)
        for quota in quotas_from_json(queue.quotas):
            if quota.resource != offering.resource_name or quota.flavor not in mappings:
                continue
            ambiguous = [p for p in mappings[quota.flavor].problems if "offerings serving" in p]
            if ambiguous:
                problems.append(f"ClusterQueue {queue_name}: {ambiguous[0]}; a grant there is not a grant of "
                                f"{offering.name} alone.")
                continue
            targets.append(_target(queue, quota, usage, feeders[queue_name]))
    if not targets and not problems:
        problems.append(f"The ClusterQueues of {namespace} ({', '.join(sorted({cq for _, cq in local}))}) hold no "
                        f"quota for {offering.resource_name} in a flavor of {offering.name}.")
    return targets, problems


def _target(queue: ClusterQueue, quota: FlavorQuota, usage: dict[tuple[str, str], Fraction],
            feeders: Iterable[tuple[str, str]]) -> QueueTarget:
    return QueueTarget(queue.name, quota.flavor, quota.resource, queue.cohort, quota.nominal, quota.borrowing_limit,
                       quota.lending_limit, usage.get((quota.flavor, quota.resource), Fraction(0)),
                       tuple(sorted(f"{ns}/{name}" for ns, name in feeders)))


def resolve_target(cluster: Cluster, namespace: str, offering: Offering, *, cluster_queue: str = "",
                   flavor: str = "") -> QueueTarget:
    """The one cell a request raises: the only candidate, or the one named. Raises QueueTargetError otherwise."""
    targets, problems = queue_targets(cluster, namespace, offering)
    chosen = [t for t in targets if (not cluster_queue or t.cluster_queue == cluster_queue)
              and (not flavor or t.flavor == flavor)]
    if len(chosen) == 1:
        return chosen[0]
    options = ", ".join(f"{t.cluster_queue} / {t.flavor}" for t in targets)
    if not targets:
        raise QueueTargetError(" ".join(problems))
    if not chosen:
        raise QueueTargetError(f"{cluster_queue or '(any)'} / {flavor or '(any)'} is not a ClusterQueue and flavor "
                               f"of {namespace} for {offering.name}; choose one of: {options}.")
    raise QueueTargetError(f"Several ClusterQueue cells can take {offering.name} in {namespace}; choose one of: "
                           f"{options}.")


def targets_for_requests(requests: Iterable[QuotaRequest]) -> dict[int, QueueTarget | None]:
    """Each ClusterQueue request's cell as the sync shows it now (None: the queue or the cell is gone), in two
    queries however many requests (the approvers' queue and the API list many)."""
    wanted = [r for r in requests if r.target == QuotaTarget.CLUSTER_QUEUE]
    if not wanted:
        return {}
    names = {(r.cluster_id, r.cluster_queue) for r in wanted}
    clusters = {c for c, _ in names}
    queues = {(q.cluster_id, q.name): q for q in ClusterQueue.objects.live().filter(
        cluster_id__in=clusters, name__in={n for _, n in names}) if (q.cluster_id, q.name) in names}
    feeders: dict[tuple[int, str], list[tuple[str, str]]] = defaultdict(list)
    for cluster_id, namespace, name, target in LocalQueue.objects.live().filter(
            cluster_id__in=clusters, cluster_queue__in={n for _, n in names}).values_list(
            "cluster_id", "namespace", "name", "cluster_queue"):
        feeders[(cluster_id, target)].append((namespace, name))
    out: dict[int, QueueTarget | None] = {}
    for request in wanted:
        queue = queues.get((request.cluster_id, request.cluster_queue))
        quota = None if queue is None else next(
            (q for q in quotas_from_json(queue.quotas) if (q.flavor, q.resource) == (request.flavor, request.resource)),
            None)
        out[request.pk] = None if queue is None or quota is None else _target(
            queue, quota, usage_from_json(queue.usage), feeders[(request.cluster_id, request.cluster_queue)])
    return out


# ------------------------------------------------------------------------------------------------ cluster side


def queue_granted(cluster_id: int, cluster_queue: str, *, now: dt.datetime | None = None) -> dict[str, int]:
    """Per flavor/resource cell, the granted units of unexpired requests on this ClusterQueue."""
    now = now or timezone.now()
    totals: dict[str, int] = defaultdict(int)
    for flavor, resource, units in QuotaRequest.objects.filter(
            cluster_id=cluster_id, target=QuotaTarget.CLUSTER_QUEUE, cluster_queue=cluster_queue,
            state__in=GRANTED).filter(unexpired(now)).values_list("flavor", "resource", "units"):
        totals[cell_key(flavor, resource)] += units
    return dict(sorted(totals.items()))


@dataclass
class QueuePlan:
    """Per cell: granted units, the nominal quota before the portal managed it, and the nominal to apply."""

    granted: dict[str, int]
    baselines: dict[str, str]
    targets: dict[str, str]


def _mirrored_nominal(cluster_id: int, cluster_queue: str) -> dict[str, Fraction] | None:
    row = ClusterQueue.objects.live().filter(cluster_id=cluster_id, name=cluster_queue).values("quotas").first()
    if row is None:
        return None
    return {cell_key(q.flavor, q.resource): q.nominal for q in quotas_from_json(row["quotas"])}


def queue_plan(cluster_id: int, cluster_queue: str, *, now: dt.datetime | None = None,
               current: dict[str, Fraction] | None = None) -> QueuePlan:
    """What the portal applies on a ClusterQueue: every cell it grants or granted gets baseline + granted. A cell's
    baseline is recorded once, from `current` (the live object at apply time) or else the sync."""
    granted = queue_granted(cluster_id, cluster_queue, now=now)
    cells = set(granted) | {cell_key(f, r) for f, r in QuotaRequest.objects.filter(
        cluster_id=cluster_id, target=QuotaTarget.CLUSTER_QUEUE, cluster_queue=cluster_queue,
        state__in=(*GRANTED, State.EXPIRED)).values_list("flavor", "resource").distinct()}
    stored = ClusterQueueQuotaState.objects.filter(cluster_id=cluster_id, cluster_queue=cluster_queue).values_list(
        "baselines", flat=True).first() or {}
    nominal = current if current is not None else (_mirrored_nominal(cluster_id, cluster_queue) or {})
    baselines: dict[str, str] = {}
    targets: dict[str, str] = {}
    for cell in sorted(cells):
        if cell in stored:
            baselines[cell] = str(stored[cell])
        elif cell in nominal:
            baselines[cell] = format_quantity(nominal[cell])
        else:
            continue  # the queue does not carry the cell (yet): nothing to raise
        targets[cell] = format_quantity(Fraction(baselines[cell]) + granted.get(cell, 0))
    return QueuePlan(granted, baselines, targets)


def queue_owns(cluster_id: int, cluster_queue: str) -> bool:
    """May the portal take the ClusterQueue's resourceGroups over from another field manager? The quota ownership
    policy of the tenant whose namespaces feed it (every one must say so)."""
    tenants = set(QuotaRequest.objects.filter(cluster_id=cluster_id, target=QuotaTarget.CLUSTER_QUEUE,
                                              cluster_queue=cluster_queue).values_list("tenant_id", flat=True))
    rows = {row.tenant_id: row.portal_owns_accelerator_keys
            for row in QuotaOwnership.objects.filter(tenant_id__in=tenants)}
    return bool(tenants) and all(rows.get(tenant, False) for tenant in tenants)


def _api_version(cluster: Cluster) -> str:
    found = cluster_discovery(cluster)
    availability = found.availability("clusterqueues") if found is not None else None
    if availability is None or availability.ref is None:
        return ""
    return availability.ref.api_version


def _conflict_message(cluster_queue: str, message: str, targets: dict[str, str]) -> str:
    wanted = ", ".join(f"{cell} nominalQuota={value}" for cell, value in sorted(targets.items()))
    return (f"ClusterQueue {cluster_queue}: {message} Kueue's resourceGroups is one atomic list, owned whole by "
            "whoever applied it; the portal does not take it over without the tenant's quota ownership policy. Fix: "
            f"have that manager set {wanted}, or ask a platform admin to let the portal own the tenant's quota "
            "(admin: quota ownership policies), then retry.")


def _cells_of(spec: Any) -> dict[str, Fraction]:
    return {cell_key(q.flavor, q.resource): q.nominal for q in cluster_queue_quotas(spec, [])}


def queue_apply(*, cluster_id: int, cluster_queue: str, client_factory: ClientFactory | None = None) -> str:
    """Apply the ClusterQueue's plan against the live object (outside any transaction), then record the answer.

    Returns "applied", "conflict" or "refused"; raises ClusterUnreachableError for retryable failures."""
    from inventory.services.clients import client_for

    cluster = Cluster.objects.get(pk=cluster_id)
    api_version = _api_version(cluster)
    client = (client_factory or client_for)(cluster)
    outcome, message, entry = "refused", "", None
    plan = queue_plan(cluster_id, cluster_queue)
    try:
        if not api_version:
            message = f"cluster {cluster.name} does not serve Kueue's ClusterQueue (discovery)"
        for _ in range(STALE_RETRIES):
            if not api_version:
                break
            live = client.get(api_version, "ClusterQueue", namespace="", name=cluster_queue)
            if live is None:
                outcome, message = "refused", f"ClusterQueue {cluster_queue} no longer exists"
                break
            before = _cells_of(live.get("spec"))
            plan = queue_plan(cluster_id, cluster_queue, current=before)
            _remember(cluster_id, cluster_queue, plan)  # before the apply: a baseline never includes our grant
            wanted = {_split(cell): Fraction(value) for cell, value in plan.targets.items()}
            groups, missing = with_nominal_quotas(live.get("spec"), wanted)
            if missing:
                outcome = "refused"
                message = (f"ClusterQueue {cluster_queue} no longer has "
                           f"{', '.join(cell_key(*cell) for cell in missing)} in its resourceGroups")
                break
            entry = {"before": {c: format_quantity(before[c]) for c in plan.targets if c in before},
                     "applied": plan.targets, "forced": False}
            if all(before.get(cell) == Fraction(value) for cell, value in plan.targets.items()):
                outcome = "applied"  # the live object already carries the plan: nothing to write
                break
            document = queue_document(api_version, cluster_queue, groups,
                                      resource_version=str((live.get("metadata") or {}).get("resourceVersion") or ""))
            result = client.apply(document, field_manager=FIELD_MANAGER)
            if result.conflict and _stale(result.message):
                continue  # changed since we read it: read again, never overwrite
            if result.conflict and queue_owns(cluster_id, cluster_queue):
                result = client.apply(document, field_manager=FIELD_MANAGER, force=True)
                entry["forced"] = True
                if result.conflict and _stale(result.message):
                    continue
            if result.applied:
                outcome, message = "applied", ""
            elif result.conflict:
                outcome, message = "conflict", _conflict_message(cluster_queue, result.message, plan.targets)
            else:
                outcome, message = "refused", f"ClusterQueue {cluster_queue}: {result.message}"
            break
        else:
            message = f"ClusterQueue {cluster_queue} kept changing while the portal applied ({STALE_RETRIES} tries)"
    finally:
        client.close()
    _record(cluster_id, cluster_queue, plan, outcome, message, entry)
    return outcome


def queue_document(api_version: str, cluster_queue: str, groups: list[dict[str, Any]], *,
                   resource_version: str) -> dict[str, Any]:
    """What the portal applies on a ClusterQueue: its whole resourceGroups (an atomic list), nothing else, guarded
    by the resourceVersion it was read at (a changed object refuses the apply instead of being overwritten)."""
    return {"apiVersion": api_version, "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue, "resourceVersion": resource_version},
            "spec": {"resourceGroups": groups}}


def _stale(message: str) -> bool:
    """A 409 for a changed object (resourceVersion precondition), not for another manager's field."""
    return "has been modified" in message


@transaction.atomic
def _remember(cluster_id: int, cluster_queue: str, plan: QueuePlan) -> None:
    state, _ = ClusterQueueQuotaState.objects.select_for_update().get_or_create(cluster_id=cluster_id,
                                                                                 cluster_queue=cluster_queue)
    state.baselines = {**(state.baselines or {}), **plan.baselines}
    state.save(update_fields=["baselines"])


def _url(request: QuotaRequest) -> str:
    from django.urls import reverse

    return reverse("portal:quota_request_detail", kwargs={"pk": request.pk})


@transaction.atomic
def _record(cluster_id: int, cluster_queue: str, plan: QueuePlan, outcome: str, message: str,
            entry: dict[str, Any] | None) -> None:
    now = timezone.now()
    requests = list(QuotaRequest.objects.select_for_update().filter(
        cluster_id=cluster_id, target=QuotaTarget.CLUSTER_QUEUE, cluster_queue=cluster_queue,
        state__in=(State.APPLYING, State.FAILED)).select_related("requested_by"))
    reviewers = approvers() if outcome != "applied" and requests else []
    error = (f"{'Field manager conflict' if outcome == 'conflict' else 'The cluster refused'}: {message}")[:2000]
    hard = {f"{cluster_queue}/{cell}": value for cell, value in plan.targets.items()}
    for request in requests:
        request.apply_attempts += 1
        request.apply_attempted_at = now
        request.applied_hard = hard
        if outcome == "applied":
            request.apply_error = ""
            request.state = State.APPLYING
        else:
            request.state = State.FAILED
            request.apply_error = error
            notify(users=[request.requested_by, *reviewers], subject=f"Quota request #{request.pk}: apply failed",
                   body=error[:1000], url=_url(request))
        request.save()
        audit_record(actor=None, verb=f"quota_request.apply_{outcome}", target=request,
                     after={"cluster_queue": cluster_queue, "nominal": plan.targets, "message": message[:500]})
    state, _ = ClusterQueueQuotaState.objects.select_for_update().get_or_create(cluster_id=cluster_id,
                                                                                 cluster_queue=cluster_queue)
    if entry is not None:
        audit_record(actor=None, verb=f"cluster_queue_quota.{'applied' if outcome == 'applied' else 'failed'}",
                     target=state, before={"cluster_queue": cluster_queue, "nominal": entry["before"]},
                     after={"cluster_queue": cluster_queue, "nominal": entry["applied"] if outcome == "applied"
                            else entry["before"], "forced": entry["forced"]},
                     data={"field_manager": FIELD_MANAGER, "message": message[:500]})
    before = state.status
    state.attempted_at = now
    state.desired = {cell: str(units) for cell, units in plan.granted.items()}
    if outcome == "applied":
        state.status, state.failures, state.last_error = Status.APPLYING, 0, ""
    else:
        state.status, state.last_error = Status.FAILED, error
        state.failures += 1
    state.save()
    if state.status != before:
        audit_record(actor=None, verb=f"cluster_queue_quota.{state.status}", target=state,
                     before={"status": before}, after=_snapshot(state))


def queue_apply_failed(*, cluster_id: int, cluster_queue: str, error: str) -> None:
    """Retries are exhausted: the requests become failed with the error; the reconcile tries again after a
    backoff."""
    _record(cluster_id, cluster_queue, queue_plan(cluster_id, cluster_queue), "refused", error, None)


def _snapshot(state: ClusterQueueQuotaState) -> dict[str, Any]:
    return {"cluster_queue": state.cluster_queue, "status": state.status, "desired": state.desired,
            "observed": state.observed, "error": state.last_error[:500]}


def _shows(plan: QueuePlan, mirrored: dict[str, Fraction] | None) -> bool:
    if mirrored is None:
        return not plan.targets
    return all(mirrored.get(cell) == Fraction(value) for cell, value in plan.targets.items())


def queue_shows(cluster_id: int, cluster_queue: str, *, now: dt.datetime | None = None) -> bool:
    """Does the sync show every planned nominal quota on the ClusterQueue?"""
    return _shows(queue_plan(cluster_id, cluster_queue, now=now), _mirrored_nominal(cluster_id, cluster_queue))


def queues_reconcile(*, now: dt.datetime, skip: set[tuple[int, str]], backoff: Any,
                     ) -> set[tuple[int, str]]:
    """Compare every ClusterQueue where the portal grants (or granted) with the sync, record the status, and return
    the queues whose drift is due for a re-apply (`backoff(failures)`; `skip`: already enqueued)."""
    due: set[tuple[int, str]] = set()
    scopes = set(QuotaRequest.objects.filter(target=QuotaTarget.CLUSTER_QUEUE, state__in=(*GRANTED, State.EXPIRED))
                 .values_list("cluster_id", "cluster_queue").distinct())
    scopes |= set(ClusterQueueQuotaState.objects.values_list("cluster_id", "cluster_queue"))
    for cluster_id, cluster_queue in sorted(scopes):
        plan = queue_plan(cluster_id, cluster_queue, now=now)
        mirrored = _mirrored_nominal(cluster_id, cluster_queue)
        observed = {cell: format_quantity((mirrored or {}).get(cell, Fraction(0)) - Fraction(base))
                    for cell, base in plan.baselines.items() if mirrored and cell in mirrored}
        applying = QuotaRequest.objects.filter(cluster_id=cluster_id, target=QuotaTarget.CLUSTER_QUEUE,
                                               cluster_queue=cluster_queue, state=State.APPLYING).exists()
        with transaction.atomic():
            state, _ = ClusterQueueQuotaState.objects.select_for_update().get_or_create(
                cluster_id=cluster_id, cluster_queue=cluster_queue, defaults={"status": Status.IN_SYNC})
            before = state.status
            state.desired = {cell: str(units) for cell, units in plan.granted.items()}
            state.observed, state.checked_at = observed, now
            if state.observe(shows=_shows(plan, mirrored), applying=applying, now=now,
                             backoff=backoff(state.failures)) and (cluster_id, cluster_queue) not in skip:
                due.add((cluster_id, cluster_queue))
            state.save()
            if state.status != before:
                audit_record(actor=None, verb=f"cluster_queue_quota.{state.status}", target=state,
                             before={"status": before}, after=_snapshot(state))
    return due


def enqueue_queue(cluster_id: int, cluster_queue: str) -> None:
    from portal.quota.tasks import queue_apply_task

    transaction.on_commit(lambda: queue_apply_task.delay(cluster_id, cluster_queue))
