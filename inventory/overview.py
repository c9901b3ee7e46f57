"""The accelerator overview: per cluster, model, sharing mode and unit — cards, units, usage, largest placeable.

Read from the derived `Device` table with grouped queries; nothing is recomputed from raw objects per request.
Units of different modes or units (a T4 time-slice replica, a MIG 1g.10gb slice, a whole H100) are separate rows:
they are never summed together.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

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
    _free_by_node: dict[str, int] = field(default_factory=dict, repr=False)

    @property
    def mode_label(self) -> str:
        return Mode(self.mode).label if self.mode in Mode.values else self.mode


def accelerator_overview(devices: QuerySet[Device] | None = None) -> list[OverviewRow]:
    """Aggregate devices per (cluster, model, mode, unit). `devices` may be pre-filtered (cluster, pool, …).

    Two grouped queries, both hash aggregates (no COUNT DISTINCT, which makes PostgreSQL sort every device row by
    its text columns): the per-node sums, and the (partition, parent card) pairs that count DRA partitions' cards.
    """
    devices = Device.objects.all() if devices is None else devices
    grouped = (
        devices.values("cluster_id", "model", "mode", "unit", "node_name", "node_schedulable")
        .annotate(
            units=Sum("capacity"), allocatable_=Sum("allocatable"), in_use_=Sum("in_use"), free_=Sum("free"),
            unhealthy_=Sum("unhealthy"), cards_=Sum("cards"),
            unknown_=Sum("capacity", filter=Q(pool_complete=False)),
        )
        .order_by()
    )
    # DRA partitions carry cards=0: their physical cards are their distinct parents.
    parents: dict[tuple[int, str, str, str], int] = defaultdict(int)
    for p in (devices.filter(mode=Mode.DRA_PARTITION, parent__isnull=False)
              .values("cluster_id", "model", "mode", "unit", "parent").annotate(n=Count("id")).order_by()):
        parents[(p["cluster_id"], p["model"], p["mode"], p["unit"])] += 1
    names = dict(Cluster.objects.values_list("id", "name"))
    rows: dict[tuple[int, str, str, str], OverviewRow] = {}
    free_by_node: dict[tuple[int, str, str, str], dict[str, int]] = defaultdict(dict)
    for g in grouped:
        key = (g["cluster_id"], g["model"], g["mode"], g["unit"])
        row = rows.get(key)
        if row is None:
            row = rows[key] = OverviewRow(g["cluster_id"], names.get(g["cluster_id"], ""), g["model"], g["mode"],
                                          g["unit"])
            if g["mode"] == Mode.DRA_PARTITION:
                row.cards = float(parents.get(key, 0))
        if g["mode"] != Mode.DRA_PARTITION:
            row.cards += g["cards_"] or 0.0
        row.units += g["units"] or 0
        row.allocatable += g["allocatable_"] or 0
        row.in_use += g["in_use_"] or 0
        row.free += g["free_"] or 0
        row.unhealthy += g["unhealthy_"] or 0
        row.unknown += g["unknown_"] or 0
        row.nodes += 1 if g["node_name"] else 0
        if g["node_schedulable"] and g["node_name"]:
            node_free = free_by_node[key]
            node_free[g["node_name"]] = node_free.get(g["node_name"], 0) + (g["free_"] or 0)
    for key, row in rows.items():
        row.largest_placeable = max(free_by_node.get(key, {}).values(), default=0)
    return sorted(rows.values(), key=lambda r: (r.cluster, r.model, r.mode, r.unit))
