"""Reads shared by the catalog pages and API: offerings with their capacity (summed over clusters), current price,
and the tenant-facing filters (memory, isolation, price, availability, compatibility)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from catalog.models import CapacitySample, Offering, OfferingCapacity, OfferingPrice
from catalog.services.capacity import fragmentation_index
from catalog.services.compatibility import Verdict, offerings_check
from core.types import RequestUser

SUMMED = ("total_units", "allocatable", "held", "free", "unknown", "blocked", "feasible_nodes", "stranded",
          "pending_pods", "free_cards", "contested", "selector_errors")


@dataclass
class CapacityTotals:
    """An offering's capacity over every cluster; largest placeable is the best single node anywhere."""

    clusters: list[OfferingCapacity] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    cards: float = 0.0
    largest_placeable: int = 0
    granted_quota: int | None = None
    computed_at: Any = None
    capacity_changing: bool = False  # a node of the offering is being repartitioned in some cluster

    def __getattr__(self, name: str) -> Any:
        if name in SUMMED:
            return self.values.get(name, 0)
        raise AttributeError(name)

    @property
    def fragmentation(self) -> float:
        """Over every cluster, by the same definition as one cluster's: 1 - largest placeable / free."""
        return fragmentation_index(largest_placeable=self.largest_placeable, free=self.values.get("free", 0))


def capacity_totals(rows: list[OfferingCapacity]) -> CapacityTotals:
    totals = CapacityTotals(clusters=rows, values=dict.fromkeys(SUMMED, 0))
    for row in rows:
        for name in SUMMED:
            totals.values[name] += getattr(row, name)
        totals.cards += row.cards
        totals.largest_placeable = max(totals.largest_placeable, row.largest_placeable)
        totals.capacity_changing = totals.capacity_changing or row.capacity_changing
        if row.granted_quota is not None:
            totals.granted_quota = (totals.granted_quota or 0) + row.granted_quota
        totals.computed_at = max(filter(None, [totals.computed_at, row.computed_at]), default=None)
    return totals


def offerings_for(user: RequestUser, *, include_all: bool = False) -> QuerySet[Offering]:
    """Tenants browse active and deprecated offerings; curators may list proposals, retired and dismissed too."""
    queryset = Offering.objects.all() if include_all and user.has_perm("catalog.curate_offering") else (
        Offering.objects.browsable()
    )
    return queryset.select_related("replacement").prefetch_related(
        Prefetch("prices", queryset=OfferingPrice.objects.order_by("effective_from")),
        Prefetch("offeringcapacity_rows", queryset=OfferingCapacity.objects.select_related("cluster").order_by("cluster__name")),
    )


@dataclass
class OfferingRow:
    offering: Offering
    capacity: CapacityTotals
    price: OfferingPrice | None
    verdict: Verdict | None = None


@dataclass
class CatalogFilters:
    q: str = ""
    unit_kind: str = ""
    memory_gib_min: int | None = None
    isolation: str = ""
    price_max: Decimal | None = None
    available: bool = False
    requirement: str = ""
    lifecycle: str = ""


def offering_rows(user: RequestUser, filters: CatalogFilters) -> tuple[list[OfferingRow], str]:
    """Rows for the catalog list after filtering; the second item is the requirement's parse error, if any."""
    from catalog.services.compatibility import RequirementError

    queryset = offerings_for(user, include_all=bool(filters.lifecycle))
    if filters.lifecycle:
        queryset = queryset.filter(lifecycle=filters.lifecycle)
    if filters.q:
        queryset = queryset.filter(name__icontains=filters.q) | queryset.filter(model__icontains=filters.q)
    if filters.unit_kind:
        queryset = queryset.filter(unit_kind=filters.unit_kind)
    if filters.memory_gib_min is not None:
        queryset = queryset.filter(memory_mib__gte=filters.memory_gib_min * 1024)
    if filters.isolation:
        queryset = queryset.filter(isolation=filters.isolation)
    now = timezone.now()
    rows = [OfferingRow(o, capacity_totals(list(o.offeringcapacity_rows.all())), o.price_at(now)) for o in queryset.distinct()]
    if filters.price_max is not None:
        rows = [r for r in rows if r.price is not None and r.price.unit_price <= filters.price_max]
    if filters.available:
        rows = [r for r in rows if r.capacity.free > 0]
    error = ""
    if filters.requirement.strip():
        try:
            _, verdicts = offerings_check([r.offering for r in rows], filters.requirement)
        except RequirementError as exc:
            return rows, str(exc)
        by_id = {v.offering.pk: v for v in verdicts}
        for row in rows:
            row.verdict = by_id[row.offering.pk]
        rows.sort(key=lambda r: (not (r.verdict is not None and r.verdict.qualifies), r.offering.name))
    return rows, error


def capacity_history(offering: Offering, *, cluster_id: int | None = None, hours: int = 24 * 14) -> QuerySet[
    CapacitySample
]:
    since = timezone.now() - dt.timedelta(hours=hours)
    samples = CapacitySample.objects.filter(offering=offering, hour__gte=since).select_related("cluster")
    if cluster_id is not None:
        samples = samples.filter(cluster_id=cluster_id)
    return samples.order_by("hour", "cluster__name")


