"""Chargeback: allocation intervals priced with the offering's price in force at each moment.

Inputs are the raw allocation intervals the inventory derives from the pods' and claims' own timestamps (one row
per holder and resource, upserted by key — so sync restarts, relists and replayed events never add a second row,
and a late event moves an interval's edge, which a report recomputes deterministically).

For each interval clipped to the window, the engine cuts at step boundaries (hour / day / month, UTC) and at price
changes, and prices each piece:

    unit_hours = quantity * seconds / 3600          cost = unit_price * unit_hours

rounded to 6 decimals per piece (ROUND_HALF_EVEN). Every aggregate is a sum of the same pieces, so totals are
equal whatever the aggregation, and `detail=intervals` lists the pieces so every number can be recomputed.

What a unit is comes from the offering the resource is charged as (`ChargeMapping`, resolved once and frozen): an
extended resource by its name and the node's labels (a MIG slice at the slice's price, a time-slice replica at the
replica's, a whole card at the card's), a DRA device by the offering whose DeviceClass and selectors match it.
adminAccess claims are not consumption: reported, priced at zero, flagged. Resources no offering matches, or
periods without a price, are reported as unpriced (zero cost). Idle capacity (free units in the hourly capacity
history) is reported separately per offering, for the platform's own cost recovery.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from catalog.models import DRA_KINDS, CapacitySample, Offering, OfferingPrice
from core.errors import PortalError
from inventory.k8s.semantics import labels_match
from inventory.models import AllocationInterval, Cluster, Device, Node, Path
from portal.chargeback.models import ChargeMapping
from portal.tenancy.models import TenantNamespace, sees_all_tenants

STEPS = ("hour", "day", "month")
DIMENSIONS = ("tenant", "namespace", "offering", "cluster", "cost_center")
PRECISION = Decimal("0.000001")
MAX_SPAN = dt.timedelta(days=400)
_MICRO = dt.timedelta(microseconds=1)
_HOUR_MICROS = Decimal(3600 * 1_000_000)
UNASSIGNED = ""
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class ChargebackError(PortalError):
    pass


# ------------------------------------------------------------------------------------------------ parameters


def _moment(text: str, *, end: bool) -> dt.datetime:
    text = text.strip()
    value = parse_datetime(text)
    if value is None:
        day = parse_date(text)
        if day is None:
            raise ChargebackError(f"{text[:40]!r} is not an ISO 8601 date or date-time.")
        value = dt.datetime.combine(day, dt.time.min)
    if timezone.is_naive(value):
        value = value.replace(tzinfo=dt.UTC)
    return value


def parse_window(text: str) -> tuple[dt.datetime, dt.datetime]:
    """`<start>,<end>`: ISO 8601 dates or date-times (naive ones are UTC); the end is exclusive."""
    parts = (text or "").split(",")
    if len(parts) != 2:
        raise ChargebackError("window is '<start>,<end>' (ISO 8601, end exclusive), e.g. 2026-11-01,2026-12-01.")
    start, end = _moment(parts[0], end=False), _moment(parts[1], end=True)
    if end <= start:
        raise ChargebackError("The window's end must be after its start.")
    if end - start > MAX_SPAN:
        raise ChargebackError(f"A window spans at most {MAX_SPAN.days} days.")
    return start, end


def parse_aggregate(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip() for p in (text or "tenant").split(",") if p.strip()))
    unknown = [n for n in names if n not in DIMENSIONS]
    if unknown or not names:
        raise ChargebackError(f"aggregate is a comma-separated list of {', '.join(DIMENSIONS)}.")
    return names


def parse_step(text: str) -> str:
    step = (text or "month").strip()
    if step not in STEPS:
        raise ChargebackError(f"step is one of {', '.join(STEPS)}.")
    return step


def _floor(moment: dt.datetime, step: str) -> dt.datetime:
    moment = moment.astimezone(dt.UTC)
    if step == "hour":
        return moment.replace(minute=0, second=0, microsecond=0)
    if step == "day":
        return moment.replace(hour=0, minute=0, second=0, microsecond=0)
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _next(moment: dt.datetime, step: str) -> dt.datetime:
    if step == "hour":
        return moment + dt.timedelta(hours=1)
    if step == "day":
        return moment + dt.timedelta(days=1)
    return (moment.replace(day=28) + dt.timedelta(days=4)).replace(day=1)


def buckets(start: dt.datetime, end: dt.datetime, step: str) -> list[tuple[dt.datetime, dt.datetime]]:
    """The step periods covering [start, end), clipped to it."""
    out, edge = [], _floor(start, step)
    while edge < end:
        following = _next(edge, step)
        out.append((max(edge, start), min(following, end)))
        edge = following
    return out


# ------------------------------------------------------------------------------------------------ resolution


def _most_specific(offerings: list[Offering]) -> Offering | None:
    """Several offerings can match one resource (a generic and a model-specific one): the one with the most
    selector terms wins; ties go to the oldest (lowest id), so the choice is stable."""
    if not offerings:
        return None
    return sorted(offerings, key=lambda o: (-(len(o.node_selector or {}) + (1 if o.cel_selector else 0)), o.pk))[0]


def _resolve_extended(cluster_id: int, keys: list[tuple[str, str]], offerings: list[Offering]) -> dict[tuple[str, str],
                                                                                                         int | None]:
    names = {node for _, node in keys}
    labels: dict[str, dict[str, Any]] = {}
    # The newest row of each node name (a tombstone keeps the labels a deleted node had).
    for name, node_labels in Node.objects.filter(cluster_id=cluster_id, name__in=names).order_by(
            "name", "first_seen_at").values_list("name", "labels"):
        labels[name] = node_labels or {}
    # What the units on each node are (whole cards, MIG slices, replicas, shares): an offering sells one kind, so a
    # MIG slice advertised as nvidia.com/gpu (single strategy) is never billed as a whole card. The catalog matches
    # devices the same way (catalog.services.matching). A node the inventory no longer has keeps the labels test.
    modes = {(resource, node): mode for resource, node, mode in Device.objects.filter(
        cluster_id=cluster_id, path=Path.DEVICE_PLUGIN, node_name__in=names).values_list(
        "resource_name", "node_name", "mode")}
    resolved = {}
    for resource, node in keys:
        mode = modes.get((resource, node))
        candidates = [o for o in offerings if o.unit_kind not in DRA_KINDS and o.resource_name == resource
                      and (mode is None or o.unit_kind == mode)
                      and labels_match(labels.get(node, {}), o.node_selector or {})]
        chosen = _most_specific(candidates)
        resolved[(resource, node)] = chosen.pk if chosen else None
    return resolved


def _resolve_dra(cluster: Cluster, resources: list[str], offerings: list[Offering]) -> dict[tuple[str, str],
                                                                                            int | None]:
    from catalog.services.matching import ClusterDevices

    wanted = set(resources)
    known = set(Device.objects.filter(cluster=cluster, key__in=wanted).values_list("key", flat=True))
    matches: dict[str, list[Offering]] = defaultdict(list)
    if known:
        loaded = ClusterDevices(cluster, modes=sorted(DRA_KINDS))
        for offering in offerings:
            if offering.unit_kind in DRA_KINDS:
                for device in loaded.match(offering).devices:
                    if device["key"] in known:
                        matches[device["key"]].append(offering)
    resolved = {}
    for resource in resources:
        chosen = _most_specific(matches.get(resource, []))
        resolved[(resource, "")] = chosen.pk if chosen else None
    return resolved


def mappings(keys: Iterable[tuple[int, str, str]]) -> dict[tuple[int, str, str], int | None]:
    """(cluster, resource, node) → offering id (None: unpriced); resolves and freezes the keys not seen before."""
    keys = set(keys)
    found: dict[tuple[int, str, str], int | None] = {}
    by_cluster: dict[int, set[tuple[str, str]]] = defaultdict(set)
    for cluster_id, resource, node in keys:
        by_cluster[cluster_id].add((resource, node))
    for cluster_id, wanted in by_cluster.items():
        resources, nodes = {r for r, _ in wanted}, {n for _, n in wanted}
        for resource, node, offering_id in ChargeMapping.objects.filter(
                cluster_id=cluster_id, resource__in=resources, node_name__in=nodes).values_list(
                "resource", "node_name", "offering_id"):
            if (resource, node) in wanted:
                found[(cluster_id, resource, node)] = offering_id
        missing = [key for key in wanted if (cluster_id, *key) not in found]
        if not missing:
            continue
        offerings = list(Offering.objects.all())
        resolved = _resolve_extended(cluster_id, [k for k in missing if k[1]], offerings)
        dra = [r for r, node in missing if not node]
        if dra:
            resolved.update(_resolve_dra(Cluster.objects.get(pk=cluster_id), dra, offerings))
        ChargeMapping.objects.bulk_create(
            [ChargeMapping(cluster_id=cluster_id, resource=r, node_name=n, offering_id=o)
             for (r, n), o in resolved.items()], ignore_conflicts=True)
        # Re-read: a concurrent report may have frozen a key first; its answer is the one that counts.
        for resource, node, offering_id in ChargeMapping.objects.filter(
                cluster_id=cluster_id, resource__in={r for r, _ in missing}).values_list(
                "resource", "node_name", "offering_id"):
            if (resource, node) in wanted:
                found[(cluster_id, resource, node)] = offering_id
    return found


def _mapping_key(interval: dict[str, Any]) -> tuple[int, str, str]:
    node = interval["node_name"] if interval["holder_kind"] == AllocationInterval.HolderKind.POD else ""
    return interval["cluster_id"], interval["resource"], node


# ------------------------------------------------------------------------------------------------ pricing


@dataclass(frozen=True, slots=True)
class Period:
    start: dt.datetime
    end: dt.datetime | None
    unit_price: Decimal
    currency: str


def price_periods(offering_ids: Iterable[int]) -> dict[int, list[Period]]:
    periods: dict[int, list[Period]] = defaultdict(list)
    for price in OfferingPrice.objects.filter(offering_id__in=set(offering_ids)).order_by("offering_id",
                                                                                          "effective_from"):
        periods[price.offering_id].append(Period(price.effective_from, price.effective_to, price.unit_price,
                                                 price.currency))
    return periods


def priced_parts(periods: list[Period], start: dt.datetime, end: dt.datetime
                 ) -> Iterator[tuple[dt.datetime, dt.datetime, Period | None]]:
    """[start, end) cut at price changes; parts without a price come with None."""
    cursor = start
    for period in periods:
        period_end = period.end or end
        if period_end <= cursor or period.start >= end:
            continue
        if period.start > cursor:
            yield cursor, period.start, None
            cursor = period.start
        part_end = min(period_end, end)
        yield cursor, part_end, period
        cursor = part_end
        if cursor >= end:
            return
    if cursor < end:
        yield cursor, end, None


def _hours(start: dt.datetime, end: dt.datetime) -> Decimal:
    return Decimal((end - start) // _MICRO) / _HOUR_MICROS


_HOUR = dt.timedelta(hours=1)


def hour_atoms(start: dt.datetime, end: dt.datetime) -> tuple[list[tuple[dt.datetime, dt.datetime]], int,
                                                             dt.datetime]:
    """[start, end) as hourly atoms: the partial hours at its edges, the number of whole hours between them, and
    where those whole hours begin. An hour is the unit every amount is rounded in (see `atom`)."""
    first = _floor(start, "hour")
    if first < start:
        first += _HOUR
    if end <= first:
        return [(start, end)], 0, first
    partial = [(start, first)] if first > start else []
    last = _floor(end, "hour")
    if end > last:
        partial.append((last, end))
    return partial, (last - first) // _HOUR, first


def atom(units: Decimal, price: Decimal | None, start: dt.datetime, end: dt.datetime) -> tuple[Decimal, Decimal]:
    """Unit-hours and cost of one atom (a part of one UTC hour), each rounded to 6 decimals (ROUND_HALF_EVEN). Every
    amount of the engine, the hourly rollups (portal/chargeback/rollups.py) and the reports is a sum of these, so
    any aggregation, at any step, from pieces or from rollups, gives the same figures to the last decimal."""
    used = units * _hours(start, end)
    cost = Decimal(0) if price is None else (price * used).quantize(PRECISION, ROUND_HALF_EVEN)
    return used.quantize(PRECISION, ROUND_HALF_EVEN), cost


def atoms_sum(units: Decimal, price: Decimal | None, start: dt.datetime, end: dt.datetime) -> tuple[Decimal, Decimal]:
    """The sum of `atom` over the hourly atoms of [start, end) (whole hours counted once, times their number)."""
    partial, whole, first = hour_atoms(start, end)
    unit_hours, cost = Decimal(0), Decimal(0)
    if whole:
        one_hours, one_cost = atom(units, price, first, first + _HOUR)
        unit_hours, cost = one_hours * whole, one_cost * whole
    for lo, hi in partial:
        part_hours, part_cost = atom(units, price, lo, hi)
        unit_hours += part_hours
        cost += part_cost
    return unit_hours, cost


def efficiency_atom(units: Decimal, price: Decimal | None, start: dt.datetime, end: dt.datetime,
                    busy: float) -> tuple[Decimal, Decimal, Decimal]:
    """Measured unit-hours, used and idle cost of one atom with telemetry (busy: its hour's mean engine activity)."""
    unit_hours = units * _hours(start, end)
    measured = unit_hours.quantize(PRECISION, ROUND_HALF_EVEN)
    if not price:
        return measured, Decimal(0), Decimal(0)
    fraction = Decimal(repr(round(busy, 6)))
    return (measured, (price * unit_hours * fraction).quantize(PRECISION, ROUND_HALF_EVEN),
            (price * unit_hours * (1 - fraction)).quantize(PRECISION, ROUND_HALF_EVEN))


@dataclass(slots=True)
class Piece:
    """One priced piece of one interval: inside one step period and one price period."""

    interval_id: int
    holder: str
    cluster: str
    namespace: str
    tenant: str
    cost_center: str
    offering: str
    resource: str
    node_name: str
    period_start: dt.datetime
    start: dt.datetime
    end: dt.datetime
    quantity: int
    share: Decimal  # the fraction of each unit the holder consumed (consumable capacity), else 1
    unit_price: Decimal | None
    currency: str
    admin_access: bool
    unit_hours: Decimal
    cost: Decimal
    # From the telemetry rollups (portal/telemetry/services.py), over the hours of the piece that have them: the unit-hours
    # measured, and the cost split into the busy share (mean engine activity) and the idle rest.
    measured_unit_hours: Decimal = Decimal(0)
    used_cost: Decimal = Decimal(0)
    idle_cost: Decimal = Decimal(0)
    cluster_id: int = 0
    offering_id: int | None = None

    @property
    def unpriced(self) -> bool:
        return self.unit_price is None and not self.admin_access


# ------------------------------------------------------------------------------------------------ the report


@dataclass
class Scope:
    """Whose intervals a report covers: every namespace (platform roles), or the user's tenants' namespaces."""

    everything: bool
    namespaces: set[tuple[int, str]]

    @classmethod
    def for_user(cls, user: User | AnonymousUser) -> Scope:
        if sees_all_tenants(user):
            return cls(True, set())
        return cls(False, set(TenantNamespace.objects.visible_to(user).values_list("cluster_id", "namespace")))


def _scoped_namespaces(scope: Scope, tenant: str | None) -> set[tuple[int, str]] | None:
    """The (cluster, namespace) pairs a report covers; None: every one."""
    if tenant:
        owned = set(TenantNamespace.objects.filter(tenant__slug=tenant).values_list("cluster_id", "namespace"))
        return owned if scope.everything else scope.namespaces & owned
    return None if scope.everything else scope.namespaces


def _namespace_condition(namespaces: set[tuple[int, str]]) -> Q:
    condition = Q(pk__in=[])
    by_cluster: dict[int, list[str]] = defaultdict(list)
    for cluster_id, namespace in namespaces:
        by_cluster[cluster_id].append(namespace)
    for cluster_id, names in sorted(by_cluster.items()):
        condition |= Q(cluster_id=cluster_id, namespace__in=sorted(names))
    return condition


def _interval_query(start: dt.datetime, end: dt.datetime, scope: Scope, cluster: str | None,
                    tenant: str | None) -> QuerySet[AllocationInterval] | None:
    """The intervals overlapping [start, end) that the scope covers; None when it covers no namespace."""
    rows = AllocationInterval.objects.filter(started_at__lt=end).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gt=start))
    if cluster:
        rows = rows.filter(cluster__name=cluster)
    namespaces = _scoped_namespaces(scope, tenant)
    if namespaces is None:
        return rows
    return rows.filter(_namespace_condition(namespaces)) if namespaces else None


_COLUMNS = ("id", "cluster_id", "holder_kind", "holder_uid", "namespace", "name", "node_name", "resource", "quantity",
            "share", "admin_access")


def _read(rows: QuerySet[AllocationInterval]) -> Iterator[dict[str, Any]]:
    """The rows (already ordered and sliced by the caller) as dicts, in one pass."""
    if connection.vendor != "postgresql":
        yield from rows.values(*_COLUMNS, "started_at", "ended_at")
        return
    # Parsing 400,000 timestamptz values dominates a month of `large`: read them as epoch microseconds instead
    # (constant SQL, no input in it).
    started_us = RawSQL("(EXTRACT(EPOCH FROM started_at) * 1000000)::bigint", ())
    ended_us = RawSQL("(EXTRACT(EPOCH FROM ended_at) * 1000000)::bigint", ())
    for row in rows.values(*_COLUMNS, started_us=started_us, ended_us=ended_us).iterator(chunk_size=5000):
        row["started_at"] = EPOCH + dt.timedelta(microseconds=row.pop("started_us"))
        ended = row.pop("ended_us")
        row["ended_at"] = None if ended is None else EPOCH + dt.timedelta(microseconds=ended)
        yield row


def _intervals(start: dt.datetime, end: dt.datetime, scope: Scope, cluster: str | None,
               tenant: str | None) -> list[dict[str, Any]]:
    rows = _interval_query(start, end, scope, cluster, tenant)
    return [] if rows is None else list(_read(rows.order_by("id")))


def busy_hours(start: dt.datetime, end: dt.datetime, interval_ids: set[int] | None, *, narrow: bool = False
               ) -> dict[int, list[tuple[dt.datetime, float]]]:
    """Per interval, its measured hours and the busy fraction (sample-weighted mean engine activity of the DCGM
    entities it held). Hours without rollups, or whose reads were NaN, are absent: never guessed. `narrow`: the
    query itself selects the intervals (a chunk of a stream), instead of reading the window's rollups once.
    `interval_ids` None: every interval's."""
    from django.db.models import F, Sum

    from portal.telemetry.models import UtilizationRollup

    out: dict[int, list[tuple[dt.datetime, float]]] = defaultdict(list)
    if interval_ids is not None and not interval_ids:
        return out
    rows = UtilizationRollup.objects.filter(hour__gte=_floor(start, "hour"), hour__lt=end, interval__isnull=False,
                                            util_mean__isnull=False, samples__gt=0).values(
        "interval_id", "hour").annotate(weighted=Sum(F("util_mean") * F("samples")), samples=Sum("samples"))
    if narrow and interval_ids is not None:
        rows = rows.filter(interval_id__in=sorted(interval_ids))
    for row in rows.iterator(chunk_size=5000):
        if (interval_ids is None or row["interval_id"] in interval_ids) and row["samples"]:
            out[row["interval_id"]].append((row["hour"], min(1.0, max(0.0, row["weighted"] / row["samples"]))))
    for hours in out.values():
        hours.sort()
    return out


def _efficiency(piece: Piece, hours: list[tuple[dt.datetime, float]]) -> None:
    measured, used, idle = Decimal(0), Decimal(0), Decimal(0)
    units = piece.quantity * piece.share
    for hour, busy in hours:
        lo, hi = max(hour, piece.start), min(hour + _HOUR, piece.end)
        if hi <= lo:
            continue
        part_measured, part_used, part_idle = efficiency_atom(units, piece.unit_price, lo, hi, busy)
        measured += part_measured
        used += part_used
        idle += part_idle
    piece.measured_unit_hours, piece.used_cost, piece.idle_cost = measured, used, idle


def pieces(start: dt.datetime, end: dt.datetime, *, step: str, scope: Scope, cluster: str | None = None,
           tenant: str | None = None, now: dt.datetime | None = None) -> list[Piece]:
    """Every priced piece of every interval overlapping [start, end) that the scope covers."""
    intervals = _intervals(start, end, scope, cluster, tenant)
    return _priced(intervals, start, end, buckets(start, end, step), now or timezone.now(),
                   busy_hours(start, end, {i["id"] for i in intervals}), _Names.load())


@dataclass(frozen=True, slots=True)
class _Names:
    """What a piece names besides its offering: cluster names, and each namespace's tenant and cost centre. Read
    once per report or stream, not per page."""

    clusters: dict[int, str]
    owners: dict[tuple[int, str], tuple[str, str]]

    @classmethod
    def load(cls) -> _Names:
        return cls(dict(Cluster.objects.values_list("pk", "name")),
                   {(cid, ns): (slug, cc) for cid, ns, slug, cc in TenantNamespace.objects.values_list(
                       "cluster_id", "namespace", "tenant__slug", "tenant__cost_center")})


def _priced(intervals: list[dict[str, Any]], start: dt.datetime, end: dt.datetime,
            steps: list[tuple[dt.datetime, dt.datetime]], now: dt.datetime,
            busy: dict[int, list[tuple[dt.datetime, float]]], names: _Names) -> list[Piece]:
    """The priced pieces of `intervals` (clipped to [start, end) and to now) in the step periods `steps`."""
    offering_of = mappings(_mapping_key(i) for i in intervals)
    offerings = {o.pk: o.slug for o in Offering.objects.filter(pk__in={v for v in offering_of.values() if v})}
    periods = price_periods(offerings)
    clusters, owners = names.clusters, names.owners
    out: list[Piece] = []
    append, zero = out.append, Decimal(0)
    for interval in intervals:
        lo = max(interval["started_at"], start)
        hi = min(interval["ended_at"] or now, now, end)  # nothing counts past now (a clock ahead of ours)
        if hi <= lo:
            continue
        offering_id = offering_of.get(_mapping_key(interval))
        offering_periods = periods.get(offering_id, []) if offering_id else []
        slug = offerings.get(offering_id, "") if offering_id else ""
        tenant_slug, cost_center = owners.get((interval["cluster_id"], interval["namespace"]), (UNASSIGNED, ""))
        holder = f"{interval['holder_kind']}/{interval['namespace']}/{interval['name']}"
        quantity, admin = interval["quantity"], interval["admin_access"]
        # A claim sharing a device by consumable capacity is billed what it consumed of it (its share), so the
        # holders of one device together never pay for more than the device.
        share = Decimal(1) if interval["share"] >= 1 else Decimal(repr(interval["share"]))
        units = quantity * share
        cluster_name = clusters.get(interval["cluster_id"], "")
        for bucket_start, bucket_end in steps:
            part_lo, part_hi = max(lo, bucket_start), min(hi, bucket_end)
            if part_hi <= part_lo:
                continue
            for piece_start, piece_end, period in priced_parts(offering_periods, part_lo, part_hi):
                price = None if period is None else (zero if admin else period.unit_price)
                unit_hours, cost = atoms_sum(units, price, piece_start, piece_end)
                append(Piece(
                    interval["id"], holder, cluster_name, interval["namespace"], tenant_slug, cost_center, slug,
                    interval["resource"], interval["node_name"], bucket_start, piece_start, piece_end, quantity,
                    share, price, period.currency if period else "", admin, unit_hours, cost,
                    cluster_id=interval["cluster_id"], offering_id=offering_id))
                if interval["id"] in busy:
                    _efficiency(out[-1], busy[interval["id"]])
    return out


def aggregate(all_pieces: list[Piece], dimensions: tuple[str, ...], *,
              period: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Sum the pieces per step period (or all into `period`), the chosen dimensions and currency."""
    sums: dict[tuple[Any, ...], dict[str, Any]] = {}
    for piece in all_pieces:
        start = period or piece.period_start
        key = (start, *(getattr(piece, d) for d in dimensions), piece.currency)
        row = sums.get(key)
        if row is None:
            row = sums[key] = {"period_start": start, **{d: getattr(piece, d) for d in dimensions},
                               "currency": piece.currency, "unit_hours": Decimal(0), "cost": Decimal(0),
                               "admin_unit_hours": Decimal(0), "unpriced_unit_hours": Decimal(0),
                               "measured_unit_hours": Decimal(0), "used_cost": Decimal(0), "idle_cost": Decimal(0)}
        row["unit_hours"] += piece.unit_hours
        row["cost"] += piece.cost
        row["measured_unit_hours"] += piece.measured_unit_hours
        row["used_cost"] += piece.used_cost
        row["idle_cost"] += piece.idle_cost
        if piece.admin_access:
            row["admin_unit_hours"] += piece.unit_hours
        elif piece.unpriced:
            row["unpriced_unit_hours"] += piece.unit_hours
    return sorted(sums.values(), key=lambda r: (r["period_start"], *(r[d] for d in dimensions), r["currency"]))


def totals(all_pieces: list[Piece]) -> list[dict[str, Any]]:
    """Per currency ("" holds the unpriced and zero-priced admin pieces without a price period)."""
    return [{k: v for k, v in row.items() if k != "period_start"}
            for row in aggregate(all_pieces, (), period=EPOCH)]


def idle(start: dt.datetime, end: dt.datetime, *, step: str, cluster: str | None = None) -> list[dict[str, Any]]:
    """Free units per offering from the hourly capacity history (each sample stands for its hour), priced at the
    offering's price in force at that hour: the cost of capacity nobody held."""
    samples = CapacitySample.objects.filter(hour__gte=_floor(start, "hour"), hour__lt=end).select_related(
        "offering", "cluster")
    if cluster:
        samples = samples.filter(cluster__name=cluster)
    samples = list(samples.order_by("offering_id", "cluster_id", "hour"))
    periods = price_periods({s.offering_id for s in samples})
    sums: dict[tuple[Any, ...], dict[str, Any]] = {}
    for sample in samples:
        lo, hi = max(sample.hour, start), min(sample.hour + dt.timedelta(hours=1), end)
        if hi <= lo or sample.free <= 0:
            continue
        for piece_start, piece_end, period in priced_parts(periods.get(sample.offering_id, []), lo, hi):
            hours = _hours(piece_start, piece_end)
            key = (_floor(piece_start, step), sample.offering.slug, sample.cluster.name,
                   period.currency if period else "")
            row = sums.setdefault(key, {"period_start": max(key[0], start), "offering": key[1], "cluster": key[2],
                                        "currency": key[3], "idle_unit_hours": Decimal(0), "idle_cost": Decimal(0)})
            row["idle_unit_hours"] += (sample.free * hours).quantize(PRECISION, ROUND_HALF_EVEN)
            if period is not None:
                row["idle_cost"] += (period.unit_price * sample.free * hours).quantize(PRECISION, ROUND_HALF_EVEN)
    return [sums[k] for k in sorted(sums)]


def piece_json(piece: Piece) -> dict[str, Any]:
    return {"interval": piece.interval_id, "holder": piece.holder, "cluster": piece.cluster,
            "namespace": piece.namespace, "tenant": piece.tenant, "offering": piece.offering,
            "resource": piece.resource, "node_name": piece.node_name, "period_start": piece.period_start,
            "start": piece.start, "end": piece.end, "quantity": piece.quantity, "share": piece.share,
            "unit_price": piece.unit_price, "currency": piece.currency, "admin_access": piece.admin_access,
            "unpriced": piece.unpriced, "unit_hours": piece.unit_hours, "cost": piece.cost,
            "measured_unit_hours": piece.measured_unit_hours, "used_cost": piece.used_cost,
            "idle_cost": piece.idle_cost}


# ------------------------------------------------------------------------------------------------ FOCUS


FOCUS_COLUMNS = ("BilledCost", "EffectiveCost", "ChargePeriodStart", "ChargePeriodEnd", "BillingCurrency",
                 "ResourceId", "ResourceName", "SkuId", "PricingQuantity", "PricingUnit", "ConsumedQuantity",
                 "ConsumedUnit", "ChargeCategory", "Tags", "x_tenant", "x_namespace", "x_offering", "x_cluster",
                 "x_cost_center", "x_admin_access", "x_unpriced", "x_measured_quantity", "x_used_cost",
                 "x_idle_cost")


def focus_rows(all_pieces: list[Piece]) -> list[dict[str, Any]]:
    """FOCUS-style rows: one per interval and step period (price changes inside it summed); costs are the
    portal's internal prices, so billed and effective cost are equal."""
    import json

    rows: dict[tuple[int, dt.datetime], dict[str, Any]] = {}
    for piece in all_pieces:
        row = rows.get((piece.interval_id, piece.period_start))
        if row is None:
            tags = {"holder": piece.holder, "resource": piece.resource, "node": piece.node_name}
            row = rows[(piece.interval_id, piece.period_start)] = {
                "BilledCost": Decimal(0), "EffectiveCost": Decimal(0), "ChargePeriodStart": piece.start,
                "ChargePeriodEnd": piece.end, "BillingCurrency": piece.currency,
                "ResourceId": f"{piece.cluster}/{piece.holder}/{piece.resource}", "ResourceName": piece.holder,
                "SkuId": piece.offering, "PricingQuantity": Decimal(0), "PricingUnit": "unit-hour",
                "ConsumedQuantity": Decimal(0), "ConsumedUnit": "unit-hour", "ChargeCategory": "Usage",
                "Tags": json.dumps(tags, sort_keys=True), "x_tenant": piece.tenant, "x_namespace": piece.namespace,
                "x_offering": piece.offering, "x_cluster": piece.cluster, "x_cost_center": piece.cost_center,
                "x_admin_access": piece.admin_access, "x_unpriced": piece.unpriced,
                "x_measured_quantity": Decimal(0), "x_used_cost": Decimal(0), "x_idle_cost": Decimal(0)}
        row["BilledCost"] += piece.cost
        row["EffectiveCost"] += piece.cost
        row["PricingQuantity"] += piece.unit_hours
        row["ConsumedQuantity"] += piece.unit_hours
        row["x_measured_quantity"] += piece.measured_unit_hours
        row["x_used_cost"] += piece.used_cost
        row["x_idle_cost"] += piece.idle_cost
        row["ChargePeriodStart"] = min(row["ChargePeriodStart"], piece.start)
        row["ChargePeriodEnd"] = max(row["ChargePeriodEnd"], piece.end)
        row["BillingCurrency"] = row["BillingCurrency"] or piece.currency
        row["x_unpriced"] = row["x_unpriced"] or piece.unpriced
    return [rows[k] for k in sorted(rows, key=lambda k: (k[1], k[0]))]


STREAM_CHUNK = 5000


def focus_stream(start: dt.datetime, end: dt.datetime, *, step: str, scope: Scope, cluster: str | None = None,
                 tenant: str | None = None, now: dt.datetime | None = None,
                 chunk: int = STREAM_CHUNK) -> Iterator[dict[str, Any]]:
    """`focus_rows(pieces(...))`, row for row and in the same order (step period, then interval), produced a chunk of
    intervals at a time: memory stays bounded by `chunk` however long the window or large the fleet. Each step period
    reads its overlapping intervals by ascending id in pages (keyset, no open cursor while the client reads)."""
    now = now or timezone.now()
    query = _interval_query(start, end, scope, cluster, tenant)
    if query is None:
        return
    names = _Names.load()
    for period_start, period_end in buckets(start, end, step):
        in_period = query.filter(started_at__lt=period_end).filter(
            Q(ended_at__isnull=True) | Q(ended_at__gt=period_start))
        after = 0
        while True:
            intervals = list(_read(in_period.filter(id__gt=after).order_by("id")[:chunk]))
            if not intervals:
                break
            after = intervals[-1]["id"]
            busy = busy_hours(period_start, period_end, {i["id"] for i in intervals}, narrow=True)
            yield from focus_rows(_priced(intervals, start, end, [(period_start, period_end)], now, busy, names))
            if len(intervals) < chunk:
                break
