"""The sync engine: one code path mirrors every kind of every cluster into the database.

list (paginated, `limit`/`continue`) → watch from the list's resourceVersion with bookmarks → `410 Gone` → relist.
Pages and watch batches are applied with bulk upserts keyed by (cluster, uid), each in its own short transaction that
first checks the fencing token. Objects missing from a *complete* listing become tombstones; an interrupted listing
prunes nothing. The resourceVersion is saved with every batch, so a restarted watcher resumes instead of relisting.

Network I/O never happens inside a transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from core.db import analyze, copy_upsert
from inventory.errors import (
    ClusterError,
    ClusterRequestError,
    ClusterUnreachableError,
    HistoryRewoundError,
    LeaseLostError,
    ResourceExpiredError,
)
from inventory.extract import UnstorableObjectError, extract_row
from inventory.k8s.client import ClusterClient
from inventory.k8s.conversion import converted_on_read, to_stored_shape
from inventory.k8s.types import KindRef, WatchEvent
from inventory.kinds import MODELS, SYNCED_KINDS, kind_ref
from inventory.leases import Lease
from inventory.models import (
    AllocationInterval,
    ClaimAllocation,
    Device,
    Finding,
    KubeObject,
    SyncIncident,
    SyncIssue,
    SyncState,
)
from inventory.services.changes import change_feed_lock, nodes_tracked
from inventory.services.derive import (
    SCOPE_COLUMNS,
    Scope,
    derive_cluster,
    derive_scope,
    scope_for_changes,
    scope_for_listing,
    stored_scope_values,
    written_scope_values,
)
from inventory.services.discovery import discovery_current, sync_state_availability_record

logger = logging.getLogger(__name__)

WATCH_BATCH_MAX = 500
ANALYZE_AFTER_ROWS = 1000  # a listing at least this big refreshes the planner's statistics of what it wrote
DERIVED_MODELS = (Device, Finding, ClaimAllocation, AllocationInterval)
BACKOFF_MAX = 10.0
_BASE_COLUMNS = {"cluster", "uid", "first_seen_at", "id", "list_id"}

DB_TRANSIENT = (OperationalError, InterfaceError)


@dataclass
class ListResult:
    kind: str
    count: int = 0
    tombstoned: int = 0
    pages: int = 0
    resource_version: str = ""
    seconds: float = 0.0
    flagged: int = 0
    unstorable: int = 0


@dataclass
class KindSkipped:
    """A kind `sync --once` did not list because the cluster does not serve it (a state, not an error)."""

    kind: str
    reason: str


class SyncOnceResult(list[ListResult]):
    """The listings of `cluster_sync_once`, plus the kinds it skipped and why."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped: list[KindSkipped] = []


@dataclass
class WindowResult:
    kind: str
    lists: list[ListResult] = field(default_factory=list)
    events: int = 0
    batches: int = 0
    relists: int = 0
    rewinds: int = 0
    errors: list[str] = field(default_factory=list)
    resource_version: str = ""


def sync_state_for(*, cluster_id: int, kind: str) -> SyncState:
    kind_ref(kind)  # validates the name
    state, _ = SyncState.objects.get_or_create(cluster_id=cluster_id, kind=kind)
    return state


@contextmanager
def fenced(state_id: int, token: int, *, cmdb_cluster_id: int | None = None) -> Iterator[None]:
    """A transaction that proceeds only while `token` is the newest fencing token that wrote for this state.

    `cmdb_cluster_id`: the transaction may write that cluster's nodes or devices (and their change-feed events), so
    it first takes the cluster's change lock, before the fence gives it a transaction id."""
    with transaction.atomic():
        if cmdb_cluster_id is not None:
            change_feed_lock(cluster_id=cmdb_cluster_id)
        fence = SyncState.objects.select_for_update().values_list("fence", flat=True).get(pk=state_id)
        if fence > token:
            raise LeaseLostError(f"sync state {state_id}: fencing token {token} superseded by {fence}")
        if fence < token:
            SyncState.objects.filter(pk=state_id).update(fence=token)
        yield


def _rows(model: type[KubeObject], cluster_id: int, kind: str, items: Iterable[Any], *, ref: KindRef | None = None,
          **extra: Any) -> tuple[list[KubeObject], list[SyncIssue]]:
    """Rows of a page or batch; objects of a kind served at an older version (DRA, Kueue) are stored in the newest
    shape the portal reads, the served one beside it."""
    rows: list[KubeObject] = []
    problems: list[SyncIssue] = []
    by_uid: dict[str, int] = {}
    convert = ref is not None and converted_on_read(ref.group, ref.version)
    for obj in items:
        try:
            columns = (extract_row(kind, to_stored_shape(obj, ref.group, ref.version), served=obj)
                       if convert and ref is not None
                       else extract_row(kind, obj))
        except UnstorableObjectError as exc:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            meta = meta if isinstance(meta, dict) else {}
            problems.append(
                SyncIssue(
                    cluster_id=cluster_id, kind=kind, name=str(meta.get("name", ""))[:253],
                    namespace=str(meta.get("namespace", ""))[:253], error=str(exc), excerpt=repr(obj)[:2000],
                )
            )
            continue
        row = model(cluster_id=cluster_id, **columns, **extra)
        if columns["uid"] in by_uid:  # the same object twice in one batch: the later version wins
            rows[by_uid[columns["uid"]]] = row
        else:
            by_uid[columns["uid"]] = len(rows)
            rows.append(row)
    return rows, problems


def _writes_cmdb(kind: str, *, derive: bool) -> bool:
    """Whether a transaction applying `kind` may write nodes or devices (node rows; any derivation)."""
    return kind == "nodes" or (derive and kind in SCOPE_COLUMNS)


def _nodes_tracked(kind: str, cluster_id: int, rows: Iterable[KubeObject]) -> AbstractContextManager[None]:
    """Change-feed events for the nodes a write of `rows` touches (nothing for other kinds)."""
    if kind != "nodes":
        return nullcontext()
    return nodes_tracked(cluster_id=cluster_id, names={row.name for row in rows})


def _update_fields(model: type[KubeObject], *, with_list_id: bool) -> list[str]:
    names = [f.name for f in model._meta.concrete_fields
             if f.name not in _BASE_COLUMNS and f.name not in model.NOT_SYNCED_FIELDS]
    return [*names, "list_id"] if with_list_id else names


def _upsert(model: type[KubeObject], rows: list[KubeObject], *, with_list_id: bool) -> int:
    """Bulk upsert; if the batch as a whole is refused, store row by row and flag the ones the database refuses."""
    if not rows:
        return 0
    fields = _update_fields(model, with_list_id=with_list_id)
    try:
        with transaction.atomic():
            copy_upsert(model, rows, unique_fields=["cluster", "uid"], update_fields=fields)
        return len(rows)
    except DB_TRANSIENT:
        raise
    except (DatabaseError, ValueError, TypeError) as batch_error:
        logger.warning("bulk upsert of %d %s refused (%s); retrying row by row", len(rows), model.__name__,
                       type(batch_error).__name__)
    stored = 0
    for row in rows:
        try:
            with transaction.atomic():
                model.objects.bulk_create([row], update_conflicts=True, unique_fields=["cluster", "uid"],
                                          update_fields=fields)
            stored += 1
        except DB_TRANSIENT:
            raise
        except (DatabaseError, ValueError, TypeError) as exc:
            SyncIssue.objects.create(
                cluster_id=row.cluster_id, kind=model.__name__, name=row.name[:253], namespace=row.namespace[:253],
                error=f"database refused the object: {type(exc).__name__}: {str(exc)[:300]}",
                excerpt=repr(row.raw)[:2000],
            )
    return stored


def kind_list(
    *, cluster_id: int, kind: str, client: ClusterClient, lease: Lease, page_size: int | None = None,
    on_page: Callable[[int], None] | None = None, derive: bool = True, ref: KindRef | None = None,
) -> ListResult:
    """Full paginated listing of one kind; upserts every page, then tombstones what the listing did not contain.

    Idempotent. A listing that fails half-way raises and prunes nothing; the next one starts over. With `derive`,
    the derived inventory is recomputed in the same transaction as the tombstones. `ref`: the kind at the version
    discovery chose (default: the v1 reference).
    """
    ref = ref or kind_ref(kind)
    model = MODELS[kind]
    page_size = page_size or settings.PORTAL_LIST_PAGE_SIZE
    started = time.monotonic()
    result = ListResult(kind=kind)
    with fenced(lease.state_id, lease.token):
        SyncState.objects.filter(pk=lease.state_id).update(
            list_id=F("list_id") + 1, phase=SyncState.Phase.LISTING, listed_count=0, list_total=None,
            last_list_started_at=timezone.now(),
        )
        list_id = SyncState.objects.values_list("list_id", flat=True).get(pk=lease.state_id)

    token: str | None = None
    while True:
        lease.keep()
        page = client.list_page(ref, limit=page_size, continue_token=token)  # I/O outside any transaction
        rows, problems = _rows(model, cluster_id, kind, page.items, ref=ref, list_id=list_id, deleted_at=None)
        cmdb = cluster_id if _writes_cmdb(kind, derive=False) else None
        with lease.renewing(), fenced(lease.state_id, lease.token, cmdb_cluster_id=cmdb), \
                _nodes_tracked(kind, cluster_id, rows):
            _upsert(model, rows, with_list_id=True)
            SyncIssue.objects.bulk_create(problems)
            result.count += len(rows)
            SyncState.objects.filter(pk=lease.state_id).update(
                listed_count=result.count,
                list_total=(result.count + page.remaining) if page.remaining is not None else None,
            )
        result.pages += 1
        result.flagged += sum(1 for r in rows if r.issues)
        result.unstorable += len(problems)
        if on_page:
            on_page(result.count)
        token = page.continue_token
        if not token:
            result.resource_version = page.resource_version
            break

    now = timezone.now()
    cmdb = cluster_id if _writes_cmdb(kind, derive=derive) else None
    # Waiting for the cluster's change lock behind other kinds' derivations, tombstoning and deriving take seconds on a
    # big cluster: longer than a lease unless renewed meanwhile.
    with lease.renewing(), fenced(lease.state_id, lease.token, cmdb_cluster_id=cmdb):
        vanished = model.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True).exclude(list_id=list_id)
        gone = list(vanished.only("name")) if kind == "nodes" else []
        with _nodes_tracked(kind, cluster_id, gone):
            result.tombstoned = vanished.update(deleted_at=now)
        result.seconds = time.monotonic() - started
        SyncState.objects.filter(pk=lease.state_id).update(
            resource_version=result.resource_version, phase=SyncState.Phase.WATCHING,
            last_list_finished_at=now, last_list_seconds=result.seconds, last_success_at=now,
            list_total=result.count, last_error="",
        )
        if derive and kind in SCOPE_COLUMNS:
            derive_scope(cluster_id=cluster_id, scope=scope_for_listing(kind))
    if result.count >= ANALYZE_AFTER_ROWS:  # outside the transaction: the change lock is not held meanwhile
        analyze(model, *(DERIVED_MODELS if derive and kind in SCOPE_COLUMNS else ()))
    return result


def _apply_events(*, cluster_id: int, kind: str, events: list[WatchEvent], lease: Lease,
                  ref: KindRef | None = None) -> str:
    """Apply one batch of watch events and save the resourceVersion of the last one, in one fenced transaction."""
    model = MODELS[kind]
    now = timezone.now()
    objects = [e for e in events if e.type in ("ADDED", "MODIFIED", "DELETED")]
    live, problems = _rows(model, cluster_id, kind, [e.object for e in objects if e.type != "DELETED"], ref=ref,
                           deleted_at=None)
    gone, gone_problems = _rows(model, cluster_id, kind, [e.object for e in objects if e.type == "DELETED"], ref=ref,
                                deleted_at=now)
    gone_uids = {row.uid for row in gone}
    live = [row for row in live if row.uid not in gone_uids]  # created and deleted within one batch
    resource_version = next((e.resource_version for e in reversed(events) if e.resource_version), "")
    # A batch of bookmarks (or of objects the extractor refused) writes no node or device: it need not queue behind
    # the cluster's derivations for the change lock just to save its resourceVersion.
    cmdb = cluster_id if (live or gone) and _writes_cmdb(kind, derive=True) else None
    with lease.renewing(), fenced(lease.state_id, lease.token, cmdb_cluster_id=cmdb):
        scope = Scope()
        if kind in SCOPE_COLUMNS and (live or gone):
            stored = model.objects.filter(cluster_id=cluster_id, uid__in=[row.uid for row in live + gone])
            scope = scope_for_changes(kind, stored_scope_values(kind, stored), written_scope_values(kind, live + gone))
        with _nodes_tracked(kind, cluster_id, live + gone):
            _upsert(model, live + gone, with_list_id=False)
        if scope:
            derive_scope(cluster_id=cluster_id, scope=scope)
        SyncIssue.objects.bulk_create(problems + gone_problems)
        updates: dict[str, Any] = {
            "last_event_at": now, "last_success_at": now, "events_applied": F("events_applied") + len(objects),
            "phase": SyncState.Phase.WATCHING,
        }
        if resource_version:
            updates["resource_version"] = resource_version
        SyncState.objects.filter(pk=lease.state_id).update(**updates)
    return resource_version


def sync_lease_lost_record(*, cluster_id: int, kind: str, state_id: int, message: str) -> None:
    """Count a window that ended because its lease was lost, and show it as an incident; never raises."""
    try:
        SyncState.objects.filter(pk=state_id).update(lease_losses=F("lease_losses") + 1)
    except DatabaseError:
        logger.warning("could not count the lease loss of state %s", state_id)
    sync_incident_record(cluster_id=cluster_id, kind=kind, cause=SyncIncident.Cause.LEASE_LOST, detail=message)


def sync_state_error_record(state_id: int, message: str) -> None:
    """Show a sync error on the (cluster, kind) state; never raises (the database may be the problem)."""
    try:
        SyncState.objects.filter(pk=state_id).update(last_error=message[:2000], last_error_at=timezone.now())
    except DatabaseError:
        logger.warning("could not record sync error for state %s", state_id)


def sync_incident_record(*, cluster_id: int, kind: str, cause: str, detail: str) -> None:
    """Record an incident for the cluster page (and the log); never raises (the database may be the problem)."""
    logger.warning("sync incident %s/%s %s: %s", cluster_id, kind, cause, detail)
    try:
        SyncIncident.objects.create(cluster_id=cluster_id, kind=kind, cause=cause, detail=detail[:2000])
    except DatabaseError:
        logger.warning("could not record sync incident for %s/%s", cluster_id, kind)


def _rv_number(resource_version: str) -> int | None:
    """resourceVersions are opaque; compared only when both are plain numbers (every etcd-backed server's are)."""
    return int(resource_version) if resource_version.isdigit() else None


def _went_back(resource_version: str, since: str) -> bool:
    now, before = _rv_number(resource_version), _rv_number(since)
    return now is not None and before is not None and now < before


def _history_check(events: list[WatchEvent], watched_from: str) -> None:
    """Every event (bookmarks too) of a watch from `watched_from` is at or after it; one before it means the server's
    history went back under an open watch (a server that accepted a resourceVersion it had not reached)."""
    for event in events:
        if _went_back(event.resource_version, watched_from):
            raise HistoryRewoundError(
                f"{event.type.lower()} at resourceVersion {event.resource_version} on a watch from {watched_from}"
            )


def relist_due(*, state_id: int, last_list_finished_at: Any, now: Any = None) -> bool:
    """The periodic safety-net relist: due PORTAL_SYNC_RELIST_SECONDS after the last complete listing, scaled per
    (cluster, kind) between 0.75x and 1.25x so the kinds of a cluster do not all relist at once."""
    interval = settings.PORTAL_SYNC_RELIST_SECONDS
    if not interval or last_list_finished_at is None:
        return False
    stagger = 0.75 + ((state_id * 2654435761) % 1000) / 2000
    age = ((now or timezone.now()) - last_list_finished_at).total_seconds()
    return bool(age >= interval * stagger)


def kind_sync_window(
    *,
    cluster_id: int,
    kind: str,
    client: ClusterClient,
    lease: Lease,
    window_seconds: float,
    stop: threading.Event | None = None,
) -> WindowResult:
    """Run the list/watch loop for one (cluster, kind) for a bounded window while holding `lease`.

    Survives dropped connections, 5xx/429 storms (honouring Retry-After), 410 Gone (relist) and lost database
    connections by retrying within the window; returns when the window ends or raises LeaseLostError. Reads the kind at
    the version discovery chooses; a kind the cluster does not serve is recorded as such and the window sleeps,
    re-reading discovery every PORTAL_UNSERVED_RECHECK_SECONDS; a 404 re-reads discovery at once. A server whose
    history went back (Too large resource version, or a resourceVersion below the one watched from) is relisted and
    recorded as a SyncIncident; so is a periodic safety-net relist (relist_due) that had to correct anything.
    """
    result = WindowResult(kind=kind)
    rediscover = False
    deadline = time.monotonic() + window_seconds
    backoff = 0.5
    keep_lease = lease.keep

    def pause(seconds: float) -> None:
        end = min(deadline, time.monotonic() + seconds)
        while time.monotonic() < end and not (stop and stop.is_set()):
            keep_lease()
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))

    window = _Window(cluster_id=cluster_id, kind=kind, client=client, lease=lease, deadline=deadline, stop=stop,
                     keep_lease=keep_lease, result=result)
    while time.monotonic() < deadline and not (stop and stop.is_set()):
        try:
            keep_lease()
            ref = _served_ref(cluster_id=cluster_id, kind=kind, client=client, lease=lease, force=rediscover)
            rediscover = False
            if ref is None:
                pause(settings.PORTAL_UNSERVED_RECHECK_SECONDS)
                rediscover = True
                continue
            resource_version = _list_if_due(window, ref)
            window.seen = resource_version
            _watch_batches(window, ref, resource_version)
            backoff = 0.5
        except HistoryRewoundError as exc:
            result.relists += 1
            result.rewinds += 1
            sync_incident_record(cluster_id=cluster_id, kind=kind, cause=SyncIncident.Cause.HISTORY_REWOUND,
                                 detail=f"{exc}; relisting")
            window.seen = ""  # recorded: the relist's lower resourceVersion is expected now
            SyncState.objects.filter(pk=lease.state_id).update(resource_version="", relists=F("relists") + 1)
        except ResourceExpiredError as exc:
            logger.info("%s/%s: %s; relisting", cluster_id, kind, exc)
            result.relists += 1
            SyncState.objects.filter(pk=lease.state_id).update(resource_version="", relists=F("relists") + 1)
        except ClusterUnreachableError as exc:
            result.errors.append(str(exc))
            sync_state_error_record(lease.state_id, str(exc))
            pause(exc.retry_after if exc.retry_after is not None else backoff)
            backoff = min(BACKOFF_MAX, backoff * 2)
        except ClusterRequestError as exc:
            if exc.status != 404:
                raise
            # the kind (or its version) went away, e.g. an upgrade removed v1beta1: discovery decides what now
            result.errors.append(str(exc))
            sync_state_error_record(lease.state_id, str(exc))
            rediscover = True
            pause(backoff)
            backoff = min(BACKOFF_MAX, backoff * 2)
        except DB_TRANSIENT as exc:
            result.errors.append(f"database: {type(exc).__name__}")
            logger.warning("%s/%s: database connection problem (%s); reconnecting", cluster_id, kind,
                           type(exc).__name__)
            connection.close()
            pause(backoff)
            backoff = min(BACKOFF_MAX, backoff * 2)
        except IntegrityError as exc:  # should not happen; never let it spin the loop hot
            result.errors.append(str(exc)[:300])
            sync_state_error_record(lease.state_id, str(exc))
            pause(backoff)
            backoff = min(BACKOFF_MAX, backoff * 2)
    return result


@dataclass
class _Window:
    """One kind_sync_window's fixed inputs and what survives its retries."""

    cluster_id: int
    kind: str
    client: ClusterClient
    lease: Lease
    deadline: float
    stop: threading.Event | None
    keep_lease: Callable[[], None]
    result: WindowResult
    seen: str = ""  # the newest resourceVersion this window saw from the server, to notice its history going back


def _list_if_due(window: _Window, ref: KindRef) -> str:
    """List the kind when there is no saved resourceVersion or the periodic relist is due, recording a listing that
    went back in history or corrected drift; returns the resourceVersion to watch from."""
    cluster_id, kind, lease, result = window.cluster_id, window.kind, window.lease, window.result
    resource_version, listed_at = SyncState.objects.values_list(
        "resource_version", "last_list_finished_at").get(pk=lease.state_id)
    periodic = bool(resource_version) and relist_due(state_id=lease.state_id, last_list_finished_at=listed_at)
    if not resource_version or periodic:
        window.seen = window.seen or resource_version
        listing = kind_list(cluster_id=cluster_id, kind=kind, client=window.client, lease=lease, ref=ref)
        result.lists.append(listing)
        resource_version = listing.resource_version
        if _went_back(resource_version, window.seen):
            result.rewinds += 1
            sync_incident_record(cluster_id=cluster_id, kind=kind, cause=SyncIncident.Cause.HISTORY_REWOUND,
                                 detail=f"listed at resourceVersion {resource_version}, after {window.seen}; "
                                 f"relisted, {listing.tombstoned} vanished objects tombstoned")
        elif periodic and listing.tombstoned:
            sync_incident_record(cluster_id=cluster_id, kind=kind, cause=SyncIncident.Cause.RELIST_DRIFT,
                                 detail=f"the periodic relist tombstoned {listing.tombstoned} objects the "
                                 "watch had not reported gone")
    return str(resource_version)


def _watch_batches(window: _Window, ref: KindRef, resource_version: str) -> None:
    """Watch from `resource_version` and apply its events in batches until the stream or the window ends."""
    cluster_id, kind, lease, result, stop = window.cluster_id, window.kind, window.lease, window.result, window.stop
    remaining = max(1, int(window.deadline - time.monotonic()))
    with window.client.watch(ref, resource_version=resource_version, timeout_seconds=remaining) as stream:
        while not (stop and stop.is_set()):
            window.keep_lease()
            events, ended = stream.next_batch(max_items=WATCH_BATCH_MAX, max_wait=settings.PORTAL_WATCH_BATCH_WAIT,
                                              deadline=min(window.deadline, lease.next_renew))
            if events:
                _history_check(events, resource_version)
                saved = _apply_events(cluster_id=cluster_id, kind=kind, events=events, lease=lease, ref=ref)
                result.events += sum(1 for e in events if e.type != "BOOKMARK")
                result.batches += 1
                result.resource_version = saved or result.resource_version
                window.seen = saved or window.seen
            if ended or time.monotonic() >= window.deadline:
                break


def _served_ref(*, cluster_id: int, kind: str, client: ClusterClient, lease: Lease, force: bool) -> KindRef | None:
    """The kind at the version the cluster serves (None: not served), recorded on its sync state. A changed version
    drops the saved resourceVersion, so the kind is relisted and every row converted the same way."""
    with lease.renewing():  # re-reading discovery may wait behind the cluster's change lock (a cluster event)
        availability = discovery_current(cluster_id=cluster_id, client=client, force=force).availability(kind)
    before = SyncState.objects.values_list("served_version", flat=True).get(pk=lease.state_id)
    sync_state_availability_record(lease.state_id, availability)
    if availability.ref is not None and before and before != availability.ref.api_version:
        SyncState.objects.filter(pk=lease.state_id).update(resource_version="")
    return availability.ref


def cluster_sync_once(
    *, cluster_id: int, client: ClusterClient, lease_for: Callable[[SyncState], Lease | None],
    kinds: Iterable[str] = SYNCED_KINDS, page_size: int | None = None,
) -> SyncOnceResult:
    """List every kind once (the `sync --once` command), each at the version discovery (read first) chooses; kinds the
    cluster does not serve are skipped with their reason. Fails on kinds whose lease a running watcher holds."""
    results = SyncOnceResult()
    discovery_current(cluster_id=cluster_id, client=client, force=True)
    for kind in kinds:
        state = sync_state_for(cluster_id=cluster_id, kind=kind)
        lease = lease_for(state)
        if lease is None:
            raise ClusterError(f"{kind}: a watcher holds the lease; stop it or wait for its window to end")
        try:
            ref = _served_ref(cluster_id=cluster_id, kind=kind, client=client, lease=lease, force=False)
            if ref is None:
                reason = SyncState.objects.values_list("unavailable_reason", flat=True).get(pk=state.pk)
                results.skipped.append(KindSkipped(kind, reason))
                continue
            results.append(kind_list(cluster_id=cluster_id, kind=kind, client=client, lease=lease,
                                     page_size=page_size, derive=False, ref=ref))
        finally:
            lease.release()
    with transaction.atomic():
        change_feed_lock(cluster_id=cluster_id)
        derive_cluster(cluster_id=cluster_id)  # once, after every kind is in
    analyze(*DERIVED_MODELS)  # the listings analyzed the mirrored tables they filled
    return results
