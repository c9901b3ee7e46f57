"""Reads shared by the pages and the API: sync-state tables, node facts and the node page's pods."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, F, Q, QuerySet
from django.utils import timezone

from core.types import RequestUser
from inventory.k8s.discovery import DRA_KINDS, VAP_KINDS, ApiDiscovery
from inventory.k8s.semantics import BLOCKING_TAINT_EFFECTS, parse_quantity
from inventory.k8s.semantics.kueue import QueueState, queue_fit, quotas_from_json, usage_from_json
from inventory.kinds import MODELS, SYNCED_KINDS
from inventory.models import Cluster, ClusterQueue, Event, LocalQueue, Node, Pod, SyncState, Workload

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True, slots=True)
class KindSyncRow:
    """One line of a cluster's sync table: the kind's SyncState (None before its first sync) and object counts."""

    kind: str
    state: SyncState | None
    live: int
    tombstoned: int

    @property
    def phase(self) -> str:
        return self.state.phase if self.state else "never"

    @property
    def listing(self) -> bool:
        return self.state is not None and self.state.phase == SyncState.Phase.LISTING

    @property
    def last_activity_at(self) -> datetime | None:
        if self.state is None:
            return None
        stamps = [s for s in (self.state.last_event_at, self.state.last_success_at) if s is not None]
        return max(stamps, default=None)

    @property
    def stale(self) -> bool:
        """No watcher has applied an event or bookmark, or finished a step, for longer than PORTAL_SYNC_STALE_SECONDS
        (a listing counts from its start): the rows of this kind may no longer be current. A kind the cluster does not
        serve has no rows to be current about (its sleeping watcher re-reads discovery instead)."""
        if self.state is None or self.state.phase == SyncState.Phase.UNSERVED:
            return False
        stamps = [s for s in (self.last_activity_at, self.state.last_list_started_at) if s is not None]
        last = max(stamps, default=None)
        return last is not None and (timezone.now() - last).total_seconds() > settings.PORTAL_SYNC_STALE_SECONDS

    @property
    def lag_seconds(self) -> int | None:
        """Seconds since the last applied watch event or successful sync step."""
        last = self.last_activity_at
        return None if last is None else max(0, int((timezone.now() - last).total_seconds()))


@dataclass(frozen=True, slots=True)
class ClusterSync:
    cluster: Cluster
    rows: list[KindSyncRow]

    @property
    def listing(self) -> bool:
        return any(row.listing for row in self.rows)

    @property
    def stale_rows(self) -> list[KindSyncRow]:
        return [row for row in self.rows if row.stale] if self.cluster.sync_enabled else []


def _object_counts(cluster_ids: list[int]) -> dict[tuple[int, str], tuple[int, int]]:
    """(cluster_id, kind) → (live, tombstoned). One grouped query per kind, whatever the number of clusters."""
    counts: dict[tuple[int, str], tuple[int, int]] = {}
    for kind, model in MODELS.items():
        grouped = (
            model.objects.filter(cluster_id__in=cluster_ids)
            .order_by()
            .values("cluster_id")
            .annotate(
                live=Count("pk", filter=Q(deleted_at__isnull=True)),
                dead=Count("pk", filter=Q(deleted_at__isnull=False)),
            )
        )
        for row in grouped:
            counts[(row["cluster_id"], kind)] = (row["live"], row["dead"])
    return counts


def cluster_sync_overview(*, clusters: Iterable[Cluster]) -> list[ClusterSync]:
    """Per-cluster, per-kind sync state in SYNCED_KINDS order, plus kinds that have a state but are no longer synced."""
    clusters = list(clusters)
    ids = [c.pk for c in clusters]
    states: dict[tuple[int, str], SyncState] = {
        (s.cluster_id, s.kind): s for s in SyncState.objects.filter(cluster_id__in=ids)
    }
    counts = _object_counts(ids)
    overview = []
    for cluster in clusters:
        extra = sorted(kind for (cid, kind) in states if cid == cluster.pk and kind not in SYNCED_KINDS)
        rows = [
            KindSyncRow(kind, states.get((cluster.pk, kind)), *counts.get((cluster.pk, kind), (0, 0)))
            for kind in (*SYNCED_KINDS, *extra)
        ]
        overview.append(ClusterSync(cluster=cluster, rows=rows))
    return overview


def node_extended_resource_names() -> list[str]:
    """Extended resource names (``vendor/name``) present in the capacity of some live node."""
    nodes = Node.objects.live().order_by()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            sql, params = nodes.values("capacity").query.sql_with_params()
            cursor.execute(f"SELECT DISTINCT jsonb_object_keys(t.capacity) FROM ({sql}) AS t", params)  # noqa: S608
            keys: Iterable[str] = (row[0] for row in cursor.fetchall())
    else:
        keys = {key for capacity in nodes.values_list("capacity", flat=True) for key in (capacity or {})}
    return sorted(key for key in keys if "/" in key)


def node_is_schedulable(node: Node) -> bool:
    """Ordinary pods can land here: not cordoned and no NoSchedule/NoExecute taint."""
    if node.unschedulable:
        return False
    return not any(isinstance(t, dict) and t.get("effect") in BLOCKING_TAINT_EFFECTS for t in node.taints or [])


@dataclass(frozen=True, slots=True)
class ResourceLine:
    name: str
    capacity: str | None
    allocatable: str | None

    @property
    def reduced(self) -> bool:
        """Allocatable is below capacity (reserved by the system, or a device is unhealthy)."""
        if self.capacity is None or self.allocatable is None:
            return self.capacity is not None
        try:
            return parse_quantity(self.allocatable) < parse_quantity(self.capacity)
        except ValueError:
            return False


def node_resources(node: Node, *, extended_only: bool) -> list[ResourceLine]:
    """Capacity vs allocatable per resource name; extended resources only, or every resource."""
    capacity: dict[str, object] = node.capacity if isinstance(node.capacity, dict) else {}
    allocatable: dict[str, object] = node.allocatable if isinstance(node.allocatable, dict) else {}
    names = node.extended_resources if extended_only else sorted(set(capacity) | set(allocatable))
    return [
        ResourceLine(
            name=name,
            capacity=None if capacity.get(name) is None else str(capacity[name]),
            allocatable=None if allocatable.get(name) is None else str(allocatable[name]),
        )
        for name in names
    ]


def node_pods(*, node: Node) -> QuerySet[Pod]:
    """Live pods bound to the node (same cluster, spec.nodeName = node name)."""
    return Pod.objects.live().filter(cluster_id=node.cluster_id, node_name=node.name).order_by("namespace", "name")


# ----------------------------------------------------------------------------------------------- capabilities
# What a cluster serves decides which features work there (docs/clusters.md): DRA features need resource.k8s.io,
# the portal's enforcement objects need ValidatingAdmissionPolicy v1.
def cluster_discovery(cluster: Cluster) -> ApiDiscovery | None:
    """What the cluster was last seen to serve (None before its first sync)."""
    return ApiDiscovery.from_json(cluster.api_discovery)


def dra_unavailable_reason(cluster: Cluster) -> str:
    """Why DRA features cannot be used on this cluster ("" when they can, or before discovery ran)."""
    found = cluster_discovery(cluster)
    if found is None:
        return ""
    return next((a.reason for a in map(found.availability, DRA_KINDS) if not a.served), "")


def dra_served_version(cluster: Cluster) -> str:
    """The resource.k8s.io version the cluster serves DRA at (v1 when unknown or unserved)."""
    found = cluster_discovery(cluster)
    availability = found.availability(DRA_KINDS[0]) if found is not None else None
    return availability.version if availability is not None and availability.served else "v1"


def dra_unavailable_clusters() -> list[tuple[Cluster, str]]:
    """(cluster, reason) for every cluster that does not serve DRA: DRA offerings are unavailable there."""
    clusters = Cluster.objects.only("pk", "name", "api_discovery").order_by("name")  # on every catalog view
    return [(cluster, reason) for cluster in clusters if (reason := dra_unavailable_reason(cluster))]


def admission_policy_unavailable_reason(cluster: Cluster) -> str:
    """Why the portal's enforcement objects (ValidatingAdmissionPolicy v1) cannot be written to this cluster."""
    found = cluster_discovery(cluster)
    if found is None:
        return ""
    return next((a.reason for a in map(found.availability, VAP_KINDS) if not a.served), "")


def cluster_capabilities(cluster: Cluster) -> list[dict[str, str]]:
    """One line per capability for the cluster page: what is synced at which version, what is not and why."""
    found = cluster_discovery(cluster)
    if found is None:
        return []
    lines: list[dict[str, str]] = []
    dra = [found.availability(k) for k in DRA_KINDS]
    if not all(a.served for a in dra):
        lines.append({"feature": "DRA", "state": "unavailable", "text": dra_unavailable_reason(cluster)})
    else:
        notes = [a.note for a in dra if a.note]
        lines.append({"feature": "DRA", "state": "converted" if notes else "available",
                      "text": "; ".join(notes) if notes else "resource.k8s.io/v1"})
    vap = admission_policy_unavailable_reason(cluster)
    lines.append({"feature": "Admission policies", "state": "unavailable" if vap else "available",
                  "text": vap or "admissionregistration.k8s.io/v1"})
    events = found.events_api()
    lines.append({"feature": "Events", "state": "converted" if events else "available",
                  "text": events or "core/v1 (events.k8s.io/v1 also served)"})
    return lines
# Events that are evidence of why an accelerator pod does not run (scheduler, kubelet, device plugins, DRA drivers).
EVIDENCE_REASONS = frozenset({
    "FailedScheduling",  # scheduler: the breakdown per node
    "FailedMount", "FailedAttachVolume",  # kubelet: volumes (CDI specs, driver sockets)
    "FailedCreatePodSandBox",  # kubelet: runtime/CNI, e.g. a runtime class without the NVIDIA runtime
    "UnexpectedAdmissionError",  # kubelet admission: device plugin Allocate failed, devices gone
    "FailedPrepareDynamicResources",  # kubelet: a DRA driver's NodePrepareResources failed
})
# Device-plugin Allocate failures whatever reason the kubelet or plugin gives them.
_ALLOCATE_WORDS = ("allocate failed", "failed to allocate", "allocatedevices", "allocate(")
EVIDENCE_PER_OBJECT = 8


@dataclass(frozen=True, slots=True)
class EvidenceEvent:
    """One mirrored Event, as a page shows it: what the cluster said, how often, and when last."""

    involved_uid: str
    involved_kind: str
    involved_name: str
    type: str
    reason: str
    message: str
    count: int
    last_seen: datetime | None

    @property
    def device_plugin(self) -> bool:
        return any(word in self.message.lower() for word in _ALLOCATE_WORDS)


def _evidence_filter() -> Q:
    condition = Q(reason__in=EVIDENCE_REASONS)
    for word in _ALLOCATE_WORDS:
        condition |= Q(message__icontains=word)
    return condition


def evidence_events(*, cluster_ids: Iterable[int], uids: Iterable[str],
                    per_object: int = EVIDENCE_PER_OBJECT) -> dict[str, list[EvidenceEvent]]:
    """Per involved object uid (pods, claims): its evidence events, last seen first, at most `per_object` each. One
    query; the callers pass only objects the reader may see (events are never listed on their own here)."""
    wanted = {uid for uid in uids if uid}
    if not wanted:
        return {}
    rows = (Event.objects.live().filter(cluster_id__in=set(cluster_ids), involved_uid__in=wanted)
            .filter(_evidence_filter())
            .only("involved_uid", "involved_kind", "involved_name", "type", "reason", "message", "count",
                  "last_timestamp", "k8s_created_at")
            .order_by("involved_uid", F("last_timestamp").desc(nulls_last=True), "-k8s_created_at", "pk"))
    out: dict[str, list[EvidenceEvent]] = {}
    for row in rows:
        found = out.setdefault(row.involved_uid, [])
        if len(found) < per_object:
            found.append(EvidenceEvent(row.involved_uid, row.involved_kind, row.involved_name, row.type, row.reason,
                                       row.message[:2000], row.count or 1, row.last_timestamp or row.k8s_created_at))
    return out


def position_is_fresh(observed_at: datetime | None, *, now: datetime | None = None) -> bool:
    """Whether a queue position Kueue's visibility API gave at `observed_at` still counts as current: within
    PORTAL_QUEUE_POSITION_FRESH_SECONDS (2 minutes by default: four rounds of the position beat at its default 30 s,
    so a missed round or two does not flip the page to the estimate)."""
    fresh_for = timedelta(seconds=settings.PORTAL_QUEUE_POSITION_FRESH_SECONDS)
    return observed_at is not None and (now or timezone.now()) - observed_at <= fresh_for


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class QueuedWorkload:
    """A Kueue Workload waiting for quota, and why: Kueue's own condition message and the portal's reading of its
    ClusterQueue's quota and usage (inventory/k8s/semantics/kueue.py), and where it stands in its ClusterQueue:
    Kueue's position from its visibility API when one was read within PORTAL_QUEUE_POSITION_FRESH_SECONDS, else the
    portal's estimate (priority, then age)."""

    workload: Workload
    cluster_queue: str
    position: int  # 1-based, among the queue's pending workloads (0: unknown)
    waiting: int | None  # pending workloads in that ClusterQueue (None: Kueue sent only the queue's head)
    reasons: tuple[str, ...]
    kueue_message: str
    position_source: str = "estimate"  # "kueue" (its visibility API) or "estimate" (the portal's)
    local_queue_position: int | None = None  # 1-based, Kueue's (only with position_source "kueue")
    position_observed_at: datetime | None = None

    @property
    def position_text(self) -> str:
        """"3rd of 7 in ClusterQueue research (Kueue)" or "about 3rd of 7 (estimated: priority, then age)"."""
        if not self.position:
            return ""
        of = f" of {self.waiting}" if self.waiting is not None else ""
        if self.position_source == "kueue":
            return f"{_ordinal(self.position)}{of} in ClusterQueue {self.cluster_queue} (Kueue)"
        return f"about {_ordinal(self.position)}{of} (estimated: priority, then age)"

    @property
    def local_position_text(self) -> str:
        """Kueue's position in the Workload's LocalQueue ("1st in LocalQueue team-a-queue"), when Kueue gave one."""
        if self.position_source != "kueue" or not self.local_queue_position:
            return ""
        return f"{_ordinal(self.local_queue_position)} in LocalQueue {self.workload.queue_name}"

    @property
    def summary(self) -> str:
        head = "queued: not admitted"
        if self.reasons:
            return f"{head} — {self.reasons[0]}"
        return f"{head} — {self.kueue_message}" if self.kueue_message else head


def _priority(workload: Workload) -> int:
    value = (workload.raw.get("spec") or {}).get("priority") if isinstance(workload.raw, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def queued_workloads(user: RequestUser, *, cluster_id: int | None = None, namespace: str = "",
                     limit: int = 100) -> list[QueuedWorkload]:
    """The user's pending Kueue Workloads (tenant scoped like pods) with the reason each waits."""
    pending = Workload.objects.live().visible_to(user).filter(state=Workload.State.PENDING)
    if cluster_id is not None:
        pending = pending.filter(cluster_id=cluster_id)
    if namespace:
        pending = pending.filter(namespace=namespace)
    mine = list(pending.select_related("cluster").defer("cluster__kubeconfig")
                .order_by("cluster__name", "k8s_created_at", "namespace", "name")[:limit])
    if not mine:
        return []
    clusters = {w.cluster_id for w in mine}
    targets = {(c, ns, name): cq for c, ns, name, cq in LocalQueue.objects.live().filter(cluster_id__in=clusters)
               .values_list("cluster_id", "namespace", "name", "cluster_queue")}
    queues = {(q.cluster_id, q.name): QueueState(q.name, tuple(quotas_from_json(q.quotas)), usage_from_json(q.usage),
                                                 q.cohort)
              for q in ClusterQueue.objects.live().filter(cluster_id__in=clusters)
              .only("cluster_id", "name", "quotas", "usage", "cohort")}
    # Queue order over every pending workload of those queues (other tenants' too: counted, never shown).
    order: dict[tuple[int, str], list[tuple[int, datetime | None, int]]] = {}
    for w in (Workload.objects.live().filter(cluster_id__in=clusters, state=Workload.State.PENDING)
              .only("pk", "cluster_id", "namespace", "queue_name", "raw", "k8s_created_at")):
        cq = targets.get((w.cluster_id, w.namespace, w.queue_name), "")
        order.setdefault((w.cluster_id, cq), []).append((-_priority(w), w.k8s_created_at, w.pk))
    out = []
    now = timezone.now()
    for w in mine:
        cq = targets.get((w.cluster_id, w.namespace, w.queue_name), "")
        line = sorted(order.get((w.cluster_id, cq), []), key=lambda e: (e[0], e[1] or now, e[2]))
        position = next((i + 1 for i, entry in enumerate(line) if entry[2] == w.pk), 0)
        place: dict[str, Any] = {"position": position, "waiting": len(line)}
        if w.queue_position and position_is_fresh(w.position_observed_at, now=now):
            place = {"position": w.queue_position, "waiting": w.queue_waiting, "position_source": "kueue",
                     "local_queue_position": w.local_queue_position, "position_observed_at": w.position_observed_at}
            cq = w.position_cluster_queue or cq
        reasons: list[str] = []
        if not cq:
            reasons.append(f"LocalQueue {w.queue_name or '(none)'} does not exist in namespace {w.namespace}")
        elif (w.cluster_id, cq) not in queues:
            reasons.append(f"ClusterQueue {cq} does not exist")
        else:
            queue = queues[(w.cluster_id, cq)]
            same_cluster = [q for (c, _n), q in queues.items() if c == w.cluster_id]
            demand = {name: parse_quantity(amount) for name, amount in (w.requests or {}).items()}
            reasons += queue_fit(queue, demand, same_cluster).reasons(cq)
        out.append(QueuedWorkload(w, cq, reasons=tuple(reasons), kueue_message=w.state_message, **place))
    return out
