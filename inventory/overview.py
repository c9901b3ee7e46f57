"""The accelerator overview: per cluster, model, sharing mode and unit — cards, units, usage, largest placeable.

Read from the derived `Device` table with grouped queries; nothing is recomputed from raw objects per request.
Units of different modes or units (a T4 time-slice replica, a MIG 1g.10gb slice, a whole H100) are separate rows:
they are never summed together.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, Q, QuerySet, Sum

from inventory.models import Cluster, Device, Mode


@dataclass
class OverviewRow:
    cluster_id: int
    cluster: str
    model: str
    mode: str
    unit: str
    cards: float = 0.0
    units: int = 0
    allocatable: int = 0
    in_use: int = 0
    free: int = 0
    unhealthy: int = 0
    unknown: int = 0  # units in incomplete DRA pools: neither free nor used, we do not guess
    largest_placeable: int = 0  # most units one pod can still get on a single schedulable node
    nodes: int = 0

    @property
    def mode_label(self) -> str:
        return Mode(self.mode).label if self.mode in Mode.values else self.mode


_KEY = ("cluster_id", "model", "mode", "unit")


def accelerator_overview(devices: QuerySet[Device] | None = None) -> list[OverviewRow]:
    """Aggregate devices per (cluster, model, mode, unit). `devices` may be pre-filtered (cluster, pool, …).

    Two grouped queries (no COUNT DISTINCT, which makes PostgreSQL sort every device row by its text columns; the
    inv_device_overview index covers both), each summed again in SQL so that a row per overview line comes back, not one per node or
    parent card: the per-node sums (their maximum free is the largest placeable), and the (partition, parent card)
    pairs that count DRA partitions' cards.
    """
    devices = Device.objects.all() if devices is None else devices
    per_node = (
        devices.values(*_KEY, "node_name", "node_schedulable")
        .annotate(
            units=Sum("capacity"), allocatable_=Sum("allocatable"), in_use_=Sum("in_use"), free_=Sum("free"),
            unhealthy_=Sum("unhealthy"), cards_=Sum("cards"),
            unknown_=Sum("capacity", filter=Q(pool_complete=False)),
        )
        .order_by()
    )
    # DRA partitions carry cards=0: their physical cards are their distinct parents.
    parent_pairs = (devices.filter(mode=Mode.DRA_PARTITION, parent__isnull=False)
                    .values(*_KEY, "parent").annotate(n=Count("id")).order_by())
    q = connection.ops.quote_name
    key = ", ".join(q(column) for column in _KEY)
    sums = ", ".join(f"SUM({q(name)})" for name in ("units", "allocatable_", "in_use_", "free_", "unhealthy_",
                                                    "cards_", "unknown_"))
    with connection.cursor() as cursor:
        sql, params = parent_pairs.query.sql_with_params()
        cursor.execute(f"SELECT {key}, COUNT(*) FROM ({sql}) pairs GROUP BY {key}", params)  # noqa: S608
        parents = {tuple(r[:4]): r[4] for r in cursor.fetchall()}
        sql, params = per_node.query.sql_with_params()
        node, schedulable, free = q("node_name"), q("node_schedulable"), q("free_")
        cursor.execute(
            f"SELECT {key}, {sums}, COUNT(*) FILTER (WHERE {node} <> ''),"  # noqa: S608 - identifiers only
            f" MAX({free}) FILTER (WHERE {schedulable} AND {node} <> '') FROM ({sql}) per_node GROUP BY {key}",
            params)
        grouped = cursor.fetchall()
    names = dict(Cluster.objects.values_list("id", "name"))
    rows = []
    for cluster_id, model, mode, unit, units, allocatable, in_use, free_, unhealthy, cards, unknown, nodes, largest \
            in grouped:
        rows.append(OverviewRow(
            cluster_id, names.get(cluster_id, ""), model, mode, unit,
            cards=float(parents.get((cluster_id, model, mode, unit), 0)) if mode == Mode.DRA_PARTITION
            else float(cards or 0.0),
            units=int(units or 0), allocatable=int(allocatable or 0), in_use=int(in_use or 0), free=int(free_ or 0),
            unhealthy=int(unhealthy or 0), unknown=int(unknown or 0), nodes=int(nodes or 0),
            largest_placeable=int(largest or 0)))  # PostgreSQL's SUM of integers is numeric
    return sorted(rows, key=lambda r: (r.cluster, r.model, r.mode, r.unit))
