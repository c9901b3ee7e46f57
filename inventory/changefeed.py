"""The CMDB change feed: what a change event says about an object, cursors, and the gap-free read.

Snapshots are the object's configuration-item fields, deliberately without live usage (in use / free / holding
claim) and heartbeats (node conditions), which change all the time and belong to the inventory API, not to a CMDB.
A snapshot is serialized with sorted keys, so equal content gives equal text and equal digests: the writers
compare them and emit an update only when something a CMDB sees changed.

Ordering (docs/changes-webhooks.md): events are read in (txid, id) order and only from transactions older than
the oldest transaction still running in this database (`feed_horizon`), so a transaction that commits
late can never hold an event behind a position a reader has already passed. Writers of one cluster's CMDB rows
take that cluster's change lock before their transaction gets an id (inventory.services.changes), so for every
object txid order is commit order and the last event of an object is its current state.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import orjson
from django.db import connection
from django.db.models import Q

from inventory.errors import ChangeFeedCursorError, ChangeFeedGoneError
from inventory.models import ChangeEvent, ChangeFeedPrune, Cluster, Device
from inventory.redaction import REDACTED, is_sensitive_name, redact_json

MAX_ID = 2**63 - 1
HEAD = "head"  # `?since=head`: no events, just the cursor of "now" (bootstrap with a full list, then follow)
_CURSOR_PREFIX = "c1."

# Device fields a CMDB tracks: what the unit is, where it is, its hardware identity and health.
DEVICE_SNAPSHOT_FIELDS: tuple[str, ...] = (
    "path", "mode", "unit", "node_name", "node_pool", "resource_name", "driver", "pool", "device_name", "model",
    "memory_mib", "architecture", "compute_capability", "driver_version", "cuda_version", "mig_profile",
    "units_per_card", "parent", "cards", "capacity", "allocatable", "unhealthy", "health", "pool_complete",
    "allow_multiple_allocations", "attributes", "capacities", "taints",
)
# Node columns read for a snapshot (plus nodeInfo and addresses out of the raw object).
NODE_SNAPSHOT_COLUMNS: tuple[str, ...] = (
    "uid", "labels", "capacity", "allocatable", "taints", "unschedulable", "ready", "kubelet_version",
    "k8s_created_at",
)
# status.nodeInfo without bootID (a reboot is not a configuration change).
NODE_INFO_KEYS: tuple[str, ...] = (
    "architecture", "containerRuntimeVersion", "kernelVersion", "kubeletVersion", "machineID", "operatingSystem",
    "osImage", "systemUUID",
)
CLUSTER_SNAPSHOT_FIELDS: tuple[str, ...] = (
    "description", "connection", "context", "sync_enabled", "server_version",
)


class Position(NamedTuple):
    """Where an event sits in the feed; tuples compare in feed order."""

    txid: int
    id: int


# ------------------------------------------------------------------------------------------------ snapshots


def snapshot_text(snapshot: dict[str, Any]) -> str:
    return orjson.dumps(snapshot, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS).decode()


def snapshot_digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def device_snapshot(device: Device) -> dict[str, Any]:
    return {name: getattr(device, name) for name in DEVICE_SNAPSHOT_FIELDS}


def node_snapshot(row: dict[str, Any]) -> dict[str, Any]:
    """From a values() row with NODE_SNAPSHOT_COLUMNS, `node_info` (raw status.nodeInfo) and `addresses`."""
    info = row.get("node_info") if isinstance(row.get("node_info"), dict) else {}
    addresses = row.get("addresses") if isinstance(row.get("addresses"), list) else []
    snapshot = {name: row[name] for name in NODE_SNAPSHOT_COLUMNS if name != "k8s_created_at"}
    snapshot["created_at"] = _iso(row["k8s_created_at"])
    snapshot["node_info"] = {key: info[key] for key in NODE_INFO_KEYS if key in info}
    snapshot["addresses"] = [
        {"type": a.get("type"), "address": a.get("address")} for a in addresses if isinstance(a, dict)
    ]
    return snapshot


def cluster_snapshot(cluster: Cluster) -> dict[str, Any]:
    """The cluster's registry fields; never the kubeconfig or its path."""
    return {name: getattr(cluster, name) for name in CLUSTER_SNAPSHOT_FIELDS}


def _redact_snapshot(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Hardware identifiers hidden as on the device API (empty values stay empty: they reveal nothing)."""
    return {
        key: ((value if value in ("", None) else REDACTED) if is_sensitive_name(key) else redact_json(value))
        for key, value in snapshot.items()
    }


def change_event_json(event: ChangeEvent, *, redact: bool = False) -> dict[str, Any]:
    """The API and webhook representation of one event."""
    snapshot = orjson.loads(event.snapshot) if event.snapshot else None
    if snapshot is not None and redact:
        snapshot = _redact_snapshot(snapshot)
    return {
        "cursor": cursor_encode(Position(event.txid, event.id)),
        "id": event.id,
        "event": event.event_type,
        "action": event.action,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "cluster": event.cluster_name,
        "cluster_id": event.cluster_id,
        "occurred_at": _iso(event.occurred_at),
        "snapshot": snapshot,
    }


# --------------------------------------------------------------------------------------------------- cursors


def cursor_encode(position: Position) -> str:
    raw = f"{position.txid}.{position.id}".encode()
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def cursor_decode(text: str) -> Position | None:
    """None for the empty cursor (the beginning of the feed); ChangeFeedCursorError for anything we did not issue."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        if not text.startswith(_CURSOR_PREFIX):
            raise ValueError("prefix")
        body = text[len(_CURSOR_PREFIX):]
        txid_text, id_text = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode().split(".")
        position = Position(int(txid_text), int(id_text))
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise ChangeFeedCursorError(
            "invalid cursor: pass the `next` (or an event's `cursor`) of an earlier answer, or nothing to start at "
            "the beginning"
        ) from None
    if not (0 <= position.txid <= MAX_ID and 0 <= position.id <= MAX_ID):
        raise ChangeFeedCursorError("invalid cursor: out of range")
    return position


# ------------------------------------------------------------------------------------------------- reading


# The oldest transaction of *this database* that may still be running, else the next transaction id to be assigned.
# `pg_snapshot_xmin` alone would be the oldest of the whole server: a write transaction open in another database of
# the same PostgreSQL (another application, a batch job, a test worker) would hold the feed back though it can never
# write here. A running transaction of the snapshot is left out only when pg_stat_activity shows its id on a backend
# connected to another database (a backend's database never changes, and an id names one transaction); anything
# unknown (a prepared transaction, a backend that ended after the snapshot) still counts, so the horizon can only be
# lower than necessary, never past a transaction that may commit here. backend_xid is a 32-bit xid and the snapshot's
# ids are 64-bit: running transactions are never 2^32 apart, so the low 32 bits name one of them.
_HORIZON_SQL = """
WITH snapshot AS (SELECT pg_current_snapshot() AS s),
elsewhere AS (
    SELECT backend_xid::text::bigint AS xid FROM pg_stat_activity
    WHERE backend_xid IS NOT NULL AND datid IS NOT NULL
      AND datid <> (SELECT oid FROM pg_database WHERE datname = current_database())
)
SELECT COALESCE(
    (SELECT min(x::text::bigint) FROM snapshot, pg_snapshot_xip(snapshot.s) AS x
      WHERE x::text::bigint % 4294967296 NOT IN (SELECT xid FROM elsewhere)),
    (SELECT pg_snapshot_xmax(s)::text::bigint FROM snapshot))
"""


def feed_horizon() -> int | None:
    """The oldest transaction id that may still be running in this database; every event with a smaller txid is final.

    None where transactions have no ids (SQLite: one writer at a time, so commit order is id order)."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(_HORIZON_SQL)
        return int(cursor.fetchone()[0])


def feed_head() -> Position:
    """A position after every event that is final now (what `?since=head` answers)."""
    horizon = feed_horizon()
    if horizon is None:
        last = ChangeEvent.objects.order_by("-id").values_list("id", flat=True).first()
        return Position(0, last or 0)
    return Position(horizon - 1, MAX_ID)


def retained_horizon() -> Position | None:
    """Cursors before this position may have missed pruned events (410 Gone)."""
    row = (ChangeFeedPrune.objects.filter(horizon_txid__isnull=False)
           .order_by("-horizon_txid", "-horizon_id").values_list("horizon_txid", "horizon_id").first())
    return Position(*row) if row else None


@dataclass(frozen=True)
class ChangePage:
    events: list[ChangeEvent]
    next: Position | None
    has_more: bool


def change_events_page(
    *, since: Position | None, limit: int, object_types: Collection[str] = (), cluster: str | None = None,
) -> ChangePage:
    """The next `limit` events after `since`, in feed order, never past a transaction that may still commit.

    Raises ChangeFeedGoneError when `since` is older than the retained history. `next` is where to continue: after
    the last event returned, or — when nothing more is final — past every final event, so that filters do not make
    a consumer rescan what it skipped."""
    if since is not None:
        pruned = retained_horizon()
        if pruned is not None and since < pruned:
            raise ChangeFeedGoneError(
                "the cursor is older than the retained history (events after it were pruned): resync from a full "
                "list (GET /api/v1/changes/?since=head for the cursor to follow afterwards) or start again without a "
                "cursor"
            )
    horizon = feed_horizon()  # before the read: everything below it is final and visible to the next statement
    events = ChangeEvent.objects.all()
    if since is not None:
        events = events.filter(txid__gte=since.txid).filter(Q(txid__gt=since.txid) | Q(id__gt=since.id))
    if horizon is not None:
        events = events.filter(txid__lt=horizon)
    if object_types:
        events = events.filter(object_type__in=list(object_types))
    if cluster:
        events = events.filter(cluster_name=cluster)
    rows = list(events.order_by("txid", "id")[: limit + 1])
    has_more = len(rows) > limit
    rows = rows[:limit]
    position = Position(rows[-1].txid, rows[-1].id) if rows else since
    if not has_more and horizon is not None:
        caught_up = Position(horizon - 1, MAX_ID)
        position = caught_up if position is None or position < caught_up else position
    return ChangePage(events=rows, next=position, has_more=has_more)
