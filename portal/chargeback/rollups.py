"""Hourly chargeback rollups: what the pages and the aggregate API read instead of pricing every interval again.

The priced allocation intervals stay the source of truth. A rollup row is one UTC hour of one namespace's charges for
one offering and currency, and holds the sums of the engine's own hourly atoms (`services.atom`): every amount the
engine computes is a sum of atoms, so a report read from rollups equals the report priced from the intervals to the
last decimal, at any step (tests/portal/test_chargeback_rollups.py proves it on random fleets). Day rows sum the hours
(a month's page reads days).

Kept current incrementally:
- database triggers (migration portal/0010) write a dirty range for every change of what chargeback reads: the
  intervals (an interval closing marks only the hours between its old and new end), telemetry rollups, price periods
  and hand-edited charge mappings. `refresh` rebuilds exactly those (namespace, hours) cells from the intervals;
- the hours after the last materialized one are rolled up as time passes, and the current hour is rolled up as of
  `as_of` (at most PORTAL_CHARGEBACK_ROLLUP_MAX_AGE seconds old): a report covers the charges up to that moment.

`refresh` runs from beat (portal.chargeback_rollups_refresh) and, through `for_reading`, before every read. One
refresher at a time (a transaction-level advisory lock); a reader that finds a refresh under way reads the last
committed state instead of waiting. The first build (every hour since the first interval: minutes on a large fleet),
and any rebuild reaching back further than PORTAL_CHARGEBACK_READER_REBUILD_HOURS, are beat's alone: until beat has
done them, readers get a state that is not `built`, and `report` prices the intervals themselves, the same figures,
more slowly — never the empty tables' zeros, never stale rows, and never a request that rebuilds months.
"""

from __future__ import annotations

import datetime as dt
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Min, Q, QuerySet, Sum, Value
from django.db.models.functions import Trunc, TruncDay
from django.utils import timezone

from catalog.models import Offering
from inventory.models import AllocationInterval, Cluster
from portal.chargeback import services as cb
from portal.chargeback.models import ChargeRollup, ChargeRollupDay, ChargeRollupDirty, ChargeRollupState
from portal.tenancy.models import Tenant, TenantNamespace

LOCK = 0x43_48_52_47  # pg_advisory_xact_lock key of the refresher
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
AMOUNTS = ("unit_hours", "cost", "admin_unit_hours", "unpriced_unit_hours", "measured_unit_hours", "used_cost",
           "idle_cost")
CHUNK = dt.timedelta(days=1)  # rebuilt a day at a time: memory stays bounded by a day's cells
PAGE = 5000  # intervals read per keyset page

# (cluster id, namespace, offering id or None, currency)
Cell = tuple[int, str, int | None, str]


_ZERO = (0, *(Decimal(0) for _ in AMOUNTS))  # pieces, then AMOUNTS


def _zero() -> list[Any]:
    return list(_ZERO)


def _ceil(moment: dt.datetime, step: str) -> dt.datetime:
    """The first `step` boundary (hour or day) at or after `moment`."""
    floor = cb._floor(moment, step)
    return floor if floor == moment else floor + (HOUR if step == "hour" else DAY)


@dataclass(frozen=True, slots=True)
class Region:
    """Hours [start, end) (hour-aligned) of one namespace, of a whole cluster (namespace None) or of everything."""

    cluster_id: int | None
    namespace: str | None
    start: dt.datetime
    end: dt.datetime

    def covers(self, cluster_id: int, namespace: str) -> bool:
        return ((self.cluster_id is None or self.cluster_id == cluster_id)
                and (self.namespace is None or self.namespace == namespace))

    def q(self, field: str) -> Q:
        condition = Q(**{f"{field}__gte": self.start, f"{field}__lt": self.end})
        if self.cluster_id is not None:
            condition &= Q(cluster_id=self.cluster_id)
        if self.namespace is not None:
            condition &= Q(namespace=self.namespace)
        return condition


def _merged(ranges: Iterable[tuple[dt.datetime, dt.datetime]]) -> list[tuple[dt.datetime, dt.datetime]]:
    out: list[tuple[dt.datetime, dt.datetime]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


# ------------------------------------------------------------------------------------------------ building


class _Builder:
    """Accumulates the atoms of intervals into (hour, cell) sums: partial hours directly, runs of whole hours as
    differences at their edges (one pair per interval and price period, however long), swept once per cell."""

    def __init__(self) -> None:
        self.hours: dict[tuple[dt.datetime, Cell], list[Any]] = {}
        self.runs: dict[Cell, dict[dt.datetime, list[Any]]] = defaultdict(dict)

    def _add(self, vector: list[Any], pieces: int, unit_hours: Decimal, cost: Decimal, kind: int) -> None:
        vector[0] += pieces
        vector[1] += unit_hours
        vector[2] += cost
        if kind:
            vector[kind] += unit_hours  # 3: admin access, 4: unpriced

    def interval(self, interval: dict[str, Any], ranges: list[tuple[dt.datetime, dt.datetime]], now: dt.datetime,
                 offering_id: int | None, periods: list[cb.Period], busy: list[tuple[dt.datetime, float]]) -> None:
        share = Decimal(1) if interval["share"] >= 1 else Decimal(repr(interval["share"]))
        units = interval["quantity"] * share
        admin = interval["admin_access"]
        for start, end in ranges:
            lo, hi = max(interval["started_at"], start), min(interval["ended_at"] or now, now, end)
            if hi <= lo:
                continue
            for part_lo, part_hi, period in cb.priced_parts(periods, lo, hi):
                price = None if period is None else (Decimal(0) if admin else period.unit_price)
                cell = (interval["cluster_id"], interval["namespace"], offering_id, period.currency if period else "")
                kind = 3 if admin else (4 if price is None else 0)
                partial, whole, first = cb.hour_atoms(part_lo, part_hi)
                for atom_lo, atom_hi in partial:
                    vector = self.hours.setdefault((cb._floor(atom_lo, "hour"), cell), _zero())
                    self._add(vector, 1, *cb.atom(units, price, atom_lo, atom_hi), kind)
                if whole:
                    unit_hours, cost = cb.atom(units, price, first, first + HOUR)
                    runs = self.runs[cell]
                    self._add(runs.setdefault(first, _zero()), 1, unit_hours, cost, kind)
                    self._add(runs.setdefault(first + whole * HOUR, _zero()), -1, -unit_hours, -cost, kind)
                for hour, fraction in busy:
                    atom_lo, atom_hi = max(hour, part_lo), min(hour + HOUR, part_hi)
                    if atom_hi > atom_lo:
                        vector = self.hours.setdefault((hour, cell), _zero())
                        measured, used, idle = cb.efficiency_atom(units, price, atom_lo, atom_hi, fraction)
                        vector[5] += measured
                        vector[6] += used
                        vector[7] += idle

    def rows(self) -> Iterator[tuple[dt.datetime, Cell, list[Any]]]:
        for cell, edges in self.runs.items():
            running = _zero()
            times = sorted(edges)
            for index, moment in enumerate(times):
                running = [a + b for a, b in zip(running, edges[moment], strict=True)]
                if not running[0] or index + 1 == len(times):
                    continue
                hour = moment
                while hour < times[index + 1]:
                    vector = self.hours.setdefault((hour, cell), _zero())
                    for position in range(5):
                        vector[position] += running[position]
                    hour += HOUR
        for (hour, cell), vector in self.hours.items():
            yield hour, cell, vector


def _intervals(regions: list[Region], start: dt.datetime, end: dt.datetime) -> QuerySet[AllocationInterval]:
    rows = AllocationInterval.objects.filter(started_at__lt=end).filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
    if any(r.cluster_id is None for r in regions):
        return rows
    condition = Q(pk__in=[])
    for region in regions:
        condition |= Q(cluster_id=region.cluster_id, **({} if region.namespace is None else
                                                        {"namespace": region.namespace}))
    return rows.filter(condition)


def _build(regions: list[Region], start: dt.datetime, end: dt.datetime, now: dt.datetime,
           offering_of: dict[tuple[int, str, str], int | None]) -> _Builder:
    """The rollups of `regions` within [start, end), from the intervals. `offering_of`: the mappings resolved so far
    (shared by the chunks of one rebuild)."""
    builder = _Builder()
    query = _intervals(regions, start, end)
    periods: dict[int, list[cb.Period]] = {}
    busy = cb.busy_hours(start, end, None)  # the chunk's telemetry, read once
    after = 0
    while True:
        page = list(cb._read(query.filter(id__gt=after).order_by("id")[:PAGE]))
        if not page:
            break
        after = page[-1]["id"]
        unseen = {cb._mapping_key(i) for i in page} - offering_of.keys()
        if unseen:
            offering_of.update(cb.mappings(unseen))
        wanted = {o for o in offering_of.values() if o and o not in periods}
        periods.update({o: [] for o in wanted})
        periods.update(cb.price_periods(wanted))
        for interval in page:
            ranges = _merged((max(r.start, start), min(r.end, end)) for r in regions
                             if r.covers(interval["cluster_id"], interval["namespace"]))
            offering_id = offering_of.get(cb._mapping_key(interval))
            builder.interval(interval, [(lo, hi) for lo, hi in ranges if hi > lo], now, offering_id,
                             periods.get(offering_id, []) if offering_id else [], busy.get(interval["id"], []))
        if len(page) < PAGE:
            break
    return builder


def _write(builder: _Builder) -> int:
    columns = ("hour", "cluster_id", "namespace", "offering_id", "currency", "pieces", *AMOUNTS)
    count = 0
    with connection.cursor() as cursor, cursor.cursor.copy(
            f"COPY {ChargeRollup._meta.db_table} ({', '.join(columns)}) FROM STDIN") as copy:
        for hour, (cluster_id, namespace, offering_id, currency), vector in builder.rows():
            copy.write_row((hour, cluster_id, namespace, offering_id, currency, *vector))
            count += 1
    return count


def _days(day_regions: list[Region]) -> None:
    """The day rows of the (day-aligned) regions, summed from their hours."""
    sums = (ChargeRollup.objects.filter(_any(r.q("hour") for r in day_regions))
            .annotate(day=TruncDay("hour", tzinfo=dt.UTC))
            .values("day", "cluster_id", "namespace", "offering_id", "currency")
            .annotate(pieces_sum=Sum("pieces"), **{f"{a}_sum": Sum(a) for a in AMOUNTS}))
    ChargeRollupDay.objects.bulk_create([ChargeRollupDay(
        day=row["day"], cluster_id=row["cluster_id"], namespace=row["namespace"], offering_id=row["offering_id"],
        currency=row["currency"], pieces=row["pieces_sum"], **{a: row[f"{a}_sum"] for a in AMOUNTS})
        for row in cast(Iterator[dict[str, Any]], sums.iterator(chunk_size=5000))], batch_size=5000)


def rebuild(regions: list[Region], now: dt.datetime, *, earliest: dt.datetime | None) -> int:
    """Replace the rollups (hours and the days holding them) of `regions` by sums rebuilt from the intervals. Call
    inside the refresher's transaction. `earliest`: the first hour holding an interval (nothing to build before)."""
    if not regions:
        return 0
    day_regions = [Region(r.cluster_id, r.namespace, cb._floor(r.start, "day"),
                          cb._floor(r.end - dt.timedelta(microseconds=1), "day") + DAY) for r in regions]
    ChargeRollup.objects.filter(_any(r.q("hour") for r in regions)).delete()
    ChargeRollupDay.objects.filter(_any(r.q("day") for r in day_regions)).delete()
    lo, hi = min(r.start for r in regions), max(r.end for r in regions)
    lo = max(lo, earliest) if earliest else hi
    written = 0
    offering_of: dict[tuple[int, str, str], int | None] = {}
    chunk_start = cb._floor(lo, "day")
    while chunk_start < hi:
        chunk_end = min(chunk_start + CHUNK, hi)
        inside = [r for r in regions if r.start < chunk_end and r.end > chunk_start]
        if inside:
            written += _write(_build(inside, chunk_start, chunk_end, now, offering_of))
        chunk_start = chunk_end
    _days(day_regions)
    return written


def _any(conditions: Iterable[Q]) -> Q:
    out = Q(pk__in=[])
    for condition in conditions:
        out |= condition
    return out


# ------------------------------------------------------------------------------------------------ refreshing


@dataclass(frozen=True, slots=True)
class State:
    """Every hour before `until` is rolled up in full; the hour starting at `until` up to `as_of`. Not `built`: the
    rollups cannot be read (beat's first build has not committed, or a long rebuild waits for beat), and reports
    price the intervals up to `as_of`."""

    until: dt.datetime
    as_of: dt.datetime
    built: bool = True


def _max_age() -> dt.timedelta:
    return dt.timedelta(seconds=settings.PORTAL_CHARGEBACK_ROLLUP_MAX_AGE)


def _earliest() -> dt.datetime | None:
    first = AllocationInterval.objects.aggregate(first=Min("started_at"))["first"]
    return cb._floor(first, "hour") if first else None


def maintained() -> bool:
    """Rollups need PostgreSQL (its triggers mark what changed, COPY writes them). Elsewhere — the SQLite of `manage.py
    demo` — the reports price the intervals themselves: the same figures, computed on every read."""
    return connection.vendor == "postgresql"


def refresh(*, now: dt.datetime | None = None, wait: bool = True, max_age: dt.timedelta | None = None) -> State:
    """Bring the rollups up to date: rebuild what the triggers marked dirty, roll up the hours that passed, and the
    current hour again when it is older than `max_age`. `wait=False` (readers): when another refresh holds the lock,
    answer the last committed state at once."""
    now = now or timezone.now()
    if not maintained():
        return State(cb._floor(now, "hour"), now)
    max_age = _max_age() if max_age is None else max_age
    with transaction.atomic():
        with connection.cursor() as cursor:
            if wait:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK])
            else:
                cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK])
                if not cursor.fetchone()[0]:
                    return current() or State(cb._floor(now, "hour"), now, built=False)
        state = ChargeRollupState.objects.select_for_update().filter(pk=1).first()
        if state is None:
            state = ChargeRollupState.objects.create(pk=1)
        target = cb._floor(now, "hour")
        dirty = list(ChargeRollupDirty.objects.values_list("id", "cluster_id", "namespace", "start", "end"))
        until = state.materialized_until
        stale = (until is None or state.refreshed_at is None or until < target
                 or now - state.refreshed_at >= max_age)
        if not stale and not dirty:
            return State(until, state.refreshed_at)  # type: ignore[arg-type]
        earliest = _earliest()
        if until is None:
            until = min(earliest, target) if earliest else target
        provisional_end = until + HOUR
        regions: list[Region] = []
        for _, cluster_id, namespace, start, end in dirty:
            lo = cb._floor(start, "hour") if start else (earliest or provisional_end)
            hi = min(_ceil(end, "hour"), provisional_end) if end else provisional_end
            if hi > lo:
                regions.append(Region(cluster_id, namespace, lo, hi))
        # The current hour is rolled up whole as of one moment (as_of), again once that is older than max_age: a
        # change inside it waits for that (a report counts allocations up to as_of), a change before it does not.
        regions = [Region(r.cluster_id, r.namespace, r.start, min(r.end, until)) for r in regions if r.start < until]
        as_of = state.refreshed_at or now
        if stale:
            regions.append(Region(None, None, until, target + HOUR))
            as_of = now
        rebuild(_coalesce(regions), as_of, earliest=earliest)
        if dirty:
            ChargeRollupDirty.objects.filter(id__in=[d[0] for d in dirty]).delete()
        state.materialized_until, state.refreshed_at = (target if stale else until), as_of
        state.save(update_fields=["materialized_until", "refreshed_at"])
        return State(state.materialized_until, as_of)


def _coalesce(regions: list[Region]) -> list[Region]:
    """Merge the ranges of each (cluster, namespace); a region of everything absorbs what it covers."""
    by_key: dict[tuple[int | None, str | None], list[tuple[dt.datetime, dt.datetime]]] = defaultdict(list)
    for region in regions:
        by_key[(region.cluster_id, region.namespace)].append((region.start, region.end))
    merged = {key: _merged(ranges) for key, ranges in by_key.items()}
    everything = merged.get((None, None), [])
    out = []
    for (cluster_id, namespace), ranges in merged.items():
        for lo, hi in ranges:
            if (cluster_id, namespace) != (None, None) and any(a <= lo and hi <= b for a, b in everything):
                continue
            out.append(Region(cluster_id, namespace, lo, hi))
    return out


def for_reading(*, now: dt.datetime | None = None) -> State:
    """The state a page or an API read reports from: `refresh(wait=False)` (the current hour, the hours just passed,
    the cells the triggers marked) when that is a short rebuild. The first build, and any rebuild reaching back more
    than PORTAL_CHARGEBACK_READER_REBUILD_HOURS (a back-dated price, a new cluster's history, a beat that stopped), are
    left to beat: until it has done them, the reports price the intervals (`State.built` is false) — the same figures,
    more slowly, rather than a request that rebuilds months or reads rollups the triggers have marked stale."""
    now = now or timezone.now()
    if not maintained():
        return refresh(now=now, wait=False)
    state = current()
    if state is None or _rebuild_from(state) < cb._floor(now, "hour") - dt.timedelta(
            hours=settings.PORTAL_CHARGEBACK_READER_REBUILD_HOURS):
        return State(cb._floor(now, "hour"), now, built=False)
    return refresh(now=now, wait=False)


def _rebuild_from(state: State) -> dt.datetime:
    """The earliest hour a refresh would rebuild now: the earliest dirty hour, else the first one not rolled up."""
    marked = ChargeRollupDirty.objects.aggregate(lo=Min("start"), unbounded=Count("id", filter=Q(start__isnull=True)))
    lo = state.until
    if marked["unbounded"]:
        lo = min(lo, _earliest() or lo)
    if marked["lo"] is not None:
        lo = min(lo, marked["lo"])
    return lo


def current() -> State | None:
    state = ChargeRollupState.objects.filter(pk=1).first()
    if state is None or state.materialized_until is None or state.refreshed_at is None:
        return None
    return State(state.materialized_until, state.refreshed_at)


# ------------------------------------------------------------------------------------------------ reading


def report(start: dt.datetime, end: dt.datetime, *, step: str, dimensions: tuple[str, ...], scope: cb.Scope,
           state: State, cluster: str | None = None, tenant: str | None = None,
           period: dt.datetime | None = None) -> list[dict[str, Any]]:
    """`services.aggregate(services.pieces(...), dimensions, period=period)` as of `state.as_of`, read from the
    rollups: the same rows, keys, amounts and order. Whole days come from the day rows and the other hours from the
    hour rows, summed by PostgreSQL per step period and dimension; the partial hours at a window's edges (and anything
    past what is rolled up) are priced from the intervals; for a state that is not `built`, all of it."""
    if not maintained() or not state.built:
        found = cb.pieces(start, end, step=step, scope=scope, cluster=cluster, tenant=tenant, now=state.as_of)
        return cb.aggregate(found, dimensions, period=period)
    namespaces = cb._scoped_namespaces(scope, tenant)
    if namespaces is not None and not namespaces:
        return []
    starts = [s for s, _ in cb.buckets(start, end, step)]
    out: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(moment: dt.datetime, labels: dict[str, str], currency: str, amounts: Iterable[Decimal]) -> None:
        key = (period or moment, *(labels[d] for d in dimensions), currency)
        row = out.get(key)
        if row is None:
            row = out[key] = {"period_start": key[0], **{d: labels[d] for d in dimensions}, "currency": currency,
                              **{a: Decimal(0) for a in AMOUNTS}}
        for name, amount in zip(AMOUNTS, amounts, strict=True):
            row[name] += amount

    covered_end = state.until + HOUR
    inner_lo, inner_hi = _ceil(start, "hour"), min(cb._floor(end, "hour"), covered_end)
    if inner_hi > inner_lo:
        days_lo = _ceil(inner_lo, "day")
        days_hi = min(cb._floor(inner_hi, "day"), cb._floor(state.until, "day"))  # whole days, fully materialized
        if step == "hour" or days_hi <= days_lo:
            days_lo = days_hi = inner_lo
        parts: list[tuple[type[ChargeRollup] | type[ChargeRollupDay], str, dt.datetime, dt.datetime]] = [
            (ChargeRollupDay, "day", days_lo, days_hi), (ChargeRollup, "hour", inner_lo, days_lo),
                 (ChargeRollup, "hour", days_hi, inner_hi)]
        for model, field, lo, hi in parts:
            for row in _summed(model, field, lo, hi, step, dimensions, namespaces, cluster, period is not None):
                moment = max(row.pop("bucket"), start) if period is None else period
                add(moment, row, row["currency"], (row[f"{a}_sum"] for a in AMOUNTS))
    # The window's partial hours: priced from the intervals, as of as_of (nothing counts past it, so a window reaching
    # into the future needs nothing more).
    edges = [(start, min(end, inner_lo)), (inner_hi, end)] if inner_hi > inner_lo else [(start, end)]
    edges = [(lo, min(hi, state.as_of)) for lo, hi in edges if min(hi, state.as_of) > lo]
    names = cb._Names.load() if edges else None
    for lo, hi in edges:
        query = cb._interval_query(lo, hi, scope, cluster, tenant)
        if query is None or names is None:
            continue
        intervals = list(cb._read(query.order_by("id")))
        busy = cb.busy_hours(lo, hi, {i["id"] for i in intervals})
        for piece in cb._priced(intervals, lo, hi, cb.buckets(lo, hi, "hour"), state.as_of, busy, names):
            moment = starts[bisect_right(starts, piece.start) - 1]
            add(moment, {d: getattr(piece, d) for d in dimensions}, piece.currency,
                (piece.unit_hours, piece.cost, piece.unit_hours if piece.admin_access else Decimal(0),
                 piece.unit_hours if piece.unpriced else Decimal(0), piece.measured_unit_hours, piece.used_cost,
                 piece.idle_cost))
    return sorted(out.values(), key=lambda r: (r["period_start"], *(r[d] for d in dimensions), r["currency"]))


@dataclass(frozen=True, slots=True)
class Statement:
    """What the monthly statement page shows: the cost per day, the month's rows by `dimensions`, the totals."""

    per_day: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    totals: list[dict[str, Any]]


def statement(start: dt.datetime, end: dt.datetime, *, dimensions: tuple[str, ...], scope: cb.Scope, state: State,
              tenant: str | None = None) -> Statement:
    """The three reports of the statement page. From the rollups each is a few summed rows; when the state is not
    `built`, the intervals are priced once, by day, and all three are summed from those pieces (the same figures:
    every amount is a sum of hourly atoms), instead of three pricings of the month."""
    if maintained() and not state.built:
        found = cb.pieces(start, end, step="day", scope=scope, tenant=tenant, now=state.as_of)
        return Statement(cb.aggregate(found, ()), cb.aggregate(found, dimensions, period=start), cb.totals(found))
    return Statement(
        report(start, end, step="day", dimensions=(), scope=scope, tenant=tenant, state=state),
        report(start, end, step="month", dimensions=dimensions, scope=scope, tenant=tenant, state=state, period=start),
        totals(start, end, scope=scope, tenant=tenant, state=state))


def totals(start: dt.datetime, end: dt.datetime, *, scope: cb.Scope, state: State, cluster: str | None = None,
           tenant: str | None = None) -> list[dict[str, Any]]:
    """`services.totals` (per currency) from the rollups."""
    rows = report(start, end, step="month", dimensions=(), scope=scope, state=state, cluster=cluster, tenant=tenant,
                  period=cb.EPOCH)
    return [{k: v for k, v in row.items() if k != "period_start"} for row in rows]


def _labels() -> dict[str, str]:
    """Each dimension's SQL over the joins of `_summed` (tables by their models; no input in it)."""
    return {"tenant": "COALESCE(t.slug, '')", "cost_center": "COALESCE(t.cost_center, '')", "namespace": "r.namespace",
            "cluster": "c.name", "offering": "COALESCE(o.slug, '')"}


def _summed(model: type[ChargeRollup] | type[ChargeRollupDay], field: str, lo: dt.datetime, hi: dt.datetime,
            step: str, dimensions: tuple[str, ...], namespaces: set[tuple[int, str]] | None, cluster: str | None,
            one_period: bool) -> Iterator[dict[str, Any]]:
    """The rollup rows of [lo, hi), summed by PostgreSQL per step period (`bucket`), dimension and currency: first per
    cell (cluster, namespace, offering, currency), then the cells joined once to their names and summed again."""
    if hi <= lo:
        return
    rows: QuerySet[Any] = model.objects.filter(**{f"{field}__gte": lo, f"{field}__lt": hi})
    if cluster:
        rows = rows.filter(cluster__name=cluster)
    if namespaces is not None:
        rows = rows.filter(cb._namespace_condition(namespaces))
    bucket = Value(cb.EPOCH) if one_period else Trunc(field, step, tzinfo=dt.UTC)
    cells = (rows.annotate(bucket=bucket).values("bucket", "cluster_id", "namespace", "offering_id", "currency")
             .annotate(**{f"{a}_sum": Sum(a) for a in AMOUNTS}).order_by())
    inner, params = cells.query.sql_with_params()
    labels = _labels()
    chosen = [labels[d] for d in dimensions]
    amounts = ", ".join(f"SUM(r.{a}_sum)" for a in AMOUNTS)
    # Constant SQL: the dimensions are checked names (parse_aggregate; a KeyError otherwise), the tables the models',
    # the filter values travel as parameters in `params`.
    sql = (f"SELECT r.bucket, r.currency, {amounts}{''.join(', ' + label for label in chosen)} FROM ({inner}) r "  # noqa: S608
           f"JOIN {Cluster._meta.db_table} c ON c.id = r.cluster_id "
           f"LEFT JOIN {TenantNamespace._meta.db_table} tn ON tn.cluster_id = r.cluster_id AND tn.namespace = r.namespace "
           f"LEFT JOIN {Tenant._meta.db_table} t ON t.id = tn.tenant_id "
           f"LEFT JOIN {Offering._meta.db_table} o ON o.id = r.offering_id "
           f"GROUP BY r.bucket, r.currency{''.join(', ' + label for label in chosen)}")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for row in cursor.fetchall():
            bucket = row[0] if row[0].tzinfo else row[0].replace(tzinfo=dt.UTC)  # DATE_TRUNC of the UTC wall time
            yield {"bucket": bucket, "currency": row[1], **{f"{a}_sum": row[2 + i] for i, a in enumerate(AMOUNTS)},
                   **{d: row[2 + len(AMOUNTS) + i] for i, d in enumerate(dimensions)}}
