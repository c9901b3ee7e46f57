"""Hourly chargeback rollups (portal/chargeback/rollups.py) against the engine pricing the intervals themselves.

Random fleets (several clusters and tenants, whole cards, an unpriced resource, adminAccess claims, shares, price
changes inside hours, intervals open and closed at odd seconds, telemetry): the reports read from rollups equal the
engine's to the last decimal, for every step, aggregation, scope and window (aligned or not), after the first refresh
and after every kind of change the triggers must see (an interval closing, a late start, a deletion, a historical
insert, a price change, telemetry arriving, a hand-edited mapping), and equal a rebuild from nothing."""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import threading
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.db import connection, connections
from django.test import Client

from catalog.models import OfferingPrice
from inventory.models import AllocationInterval
from portal.chargeback import rollups
from portal.chargeback import services as cb
from portal.models import (
    ChargeMapping,
    ChargeRollup,
    ChargeRollupDay,
    ChargeRollupDirty,
    ChargeRollupState,
    UtilizationRollup,
)
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory, NodeFactory
from tests.portal.factories import give_namespaces

UTC = dt.UTC
NOW = dt.datetime(2026, 12, 3, 14, 37, 21, 123456, tzinfo=UTC)
DIMENSIONS = [("tenant",), ("tenant", "namespace", "offering"), ("cluster", "cost_center"), ("offering",), ()]
WINDOWS = [
    (dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 12, 1, tzinfo=UTC)),
    (dt.datetime(2026, 11, 28, 5, 17, tzinfo=UTC), dt.datetime(2026, 12, 2, 9, 41, 3, tzinfo=UTC)),
    (dt.datetime(2026, 12, 1, tzinfo=UTC), dt.datetime(2027, 1, 1, tzinfo=UTC)),  # runs past now
    (dt.datetime(2026, 11, 30, 23, 10, tzinfo=UTC), dt.datetime(2026, 11, 30, 23, 50, tzinfo=UTC)),  # inside an hour
]


def _moment(rng: random.Random, lo: dt.datetime, hi: dt.datetime) -> dt.datetime:
    return lo + dt.timedelta(seconds=rng.randrange(int((hi - lo).total_seconds())), microseconds=rng.randrange(10**6))


@pytest.fixture
def fleet(db):
    rng = random.Random(20261206)
    clusters = [ClusterFactory(name="east"), ClusterFactory(name="west")]
    for cluster in clusters:
        NodeFactory(cluster=cluster, name="node-a", labels={"nvidia.com/gpu.product": "H100"})
        NodeFactory(cluster=cluster, name="node-b", labels={"nvidia.com/gpu.product": "T4"})
    give_namespaces(make_user("alice"), clusters[0], "ml", "ml-2", tenant_slug="ml")
    give_namespaces(make_user("bob"), clusters[1], "vision", tenant_slug="vision")
    h100 = OfferingFactory(slug="h100", unit_kind="whole", resource_name="nvidia.com/gpu",
                           node_selector={"nvidia.com/gpu.product": "H100"})
    t4 = OfferingFactory(slug="t4", unit_kind="whole", resource_name="nvidia.com/gpu",
                         node_selector={"nvidia.com/gpu.product": "T4"})
    mig = OfferingFactory(slug="mig", unit_kind="mig", resource_name="nvidia.com/mig-1g.10gb")
    for offering, price in ((h100, "3.3333"), (t4, "0.7")):
        OfferingPrice.objects.create(offering=offering, unit_price=Decimal(price), currency="EUR",
                                     effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC),
                                     effective_to=dt.datetime(2026, 11, 17, 10, 22, 13, tzinfo=UTC))
        OfferingPrice.objects.create(offering=offering, unit_price=Decimal(price) * 2 + Decimal("0.0101"),
                                     currency="EUR", effective_from=dt.datetime(2026, 11, 17, 10, 22, 13, tzinfo=UTC))
    OfferingPrice.objects.create(offering=mig, unit_price=Decimal("0.4567"), currency="USD",
                                 effective_from=dt.datetime(2026, 11, 5, tzinfo=UTC))
    namespaces = [(clusters[0], "ml"), (clusters[0], "ml-2"), (clusters[1], "vision"), (clusters[1], "nobody")]
    resources = [("nvidia.com/gpu", "node-a"), ("nvidia.com/gpu", "node-b"), ("nvidia.com/mig-1g.10gb", "node-a"),
                 ("example.com/unknown", "node-b")]
    lo, hi = dt.datetime(2026, 10, 25, tzinfo=UTC), NOW
    for index in range(90):
        cluster, namespace = rng.choice(namespaces)
        resource, node = rng.choice(resources)
        start = _moment(rng, lo, hi)
        end = None if rng.random() < 0.2 else min(start + dt.timedelta(hours=rng.uniform(0.01, 300)), NOW)
        AllocationInterval.objects.create(
            cluster=cluster, holder_kind="pod", holder_uid=f"uid-{index}", namespace=namespace, name=f"p{index}",
            node_name=node, resource=resource, quantity=rng.choice([1, 1, 2, 8]), admin_access=rng.random() < 0.1,
            share=rng.choice([1.0, 1.0, 0.25, 1 / 3]), started_at=start, ended_at=end)
    return {"rng": rng, "clusters": clusters, "h100": h100}


def _telemetry(rng: random.Random, count: int) -> None:
    intervals = list(AllocationInterval.objects.order_by("id"))
    for _ in range(count):
        interval = rng.choice(intervals)
        end = interval.ended_at or NOW
        if end - interval.started_at < dt.timedelta(hours=1):
            continue
        hour = cb._floor(_moment(rng, interval.started_at, end - dt.timedelta(minutes=1)), "hour")
        UtilizationRollup.objects.get_or_create(
            cluster_id=interval.cluster_id, hour=hour, gpu_uuid=f"GPU-{interval.pk}", gpu_instance="",
            pod_namespace=interval.namespace, pod_name=interval.name,
            defaults={"interval": interval, "samples": 240, "util_mean": rng.random()})


def _assert_equal(state: rollups.State) -> int:
    """Every report from rollups equals the engine's pricing of the intervals, as of the rollups' moment."""
    compared = 0
    east = ClusterFactory._meta.model.objects.get(name="east")
    scopes = [cb.Scope(True, set()), cb.Scope(False, {(east.pk, "ml")})]
    for start, end in WINDOWS:
        for step in cb.STEPS:
            for scope in scopes:
                found = cb.pieces(start, end, step=step, scope=scope, now=state.as_of)
                for dimensions in DIMENSIONS:
                    assert rollups.report(start, end, step=step, dimensions=dimensions, scope=scope, state=state) == (
                        cb.aggregate(found, dimensions)), (start, end, step, dimensions)
                    compared += 1
                assert rollups.report(start, end, step=step, dimensions=("tenant",), scope=scope, state=state,
                                      period=start) == cb.aggregate(found, ("tenant",), period=start)
                assert rollups.totals(start, end, scope=scope, state=state) == cb.totals(found)
    for tenant, cluster in (("ml", None), ("vision", "west"), ("ml", "west")):
        start, end = WINDOWS[1]
        found = cb.pieces(start, end, step="day", scope=scopes[0], tenant=tenant, cluster=cluster, now=state.as_of)
        assert rollups.report(start, end, step="day", dimensions=("namespace",), scope=scopes[0], tenant=tenant,
                              cluster=cluster, state=state) == cb.aggregate(found, ("namespace",))
    return compared


def _from_nothing() -> None:
    ChargeRollup.objects.all().delete()
    ChargeRollupDay.objects.all().delete()
    ChargeRollupState.objects.all().delete()


def _rows(model) -> list[tuple]:
    return sorted(model.objects.values_list(*[f.attname for f in model._meta.fields if f.name != "id"]), key=repr)


def test_reports_from_rollups_equal_the_engine_to_the_last_decimal(fleet) -> None:
    _telemetry(fleet["rng"], 40)
    state = rollups.refresh(now=NOW)
    assert state.until == cb._floor(NOW, "hour")
    assert state.as_of == NOW
    assert ChargeRollup.objects.filter(cost__gt=0).exists()
    assert ChargeRollup.objects.filter(measured_unit_hours__gt=0).exists()
    assert ChargeRollup.objects.filter(admin_unit_hours__gt=0).exists()
    assert ChargeRollup.objects.filter(unpriced_unit_hours__gt=0).exists()
    assert not ChargeRollupDirty.objects.exists()
    assert _assert_equal(state) > 100
    hours, days = _rows(ChargeRollup), _rows(ChargeRollupDay)
    _from_nothing()
    assert rollups.refresh(now=NOW) == state
    assert _rows(ChargeRollup) == hours
    assert _rows(ChargeRollupDay) == days


def _change_intervals(fleet) -> None:
    intervals = list(AllocationInterval.objects.order_by("id"))
    open_one = next(i for i in intervals if i.ended_at is None and i.started_at < NOW - dt.timedelta(hours=30))
    AllocationInterval.objects.filter(pk=open_one.pk).update(ended_at=NOW - dt.timedelta(hours=29, seconds=7))
    AllocationInterval.objects.filter(pk=intervals[1].pk).update(
        started_at=intervals[1].started_at - dt.timedelta(days=3, minutes=11))  # a late event moves a start back
    AllocationInterval.objects.filter(pk=intervals[2].pk).delete()
    AllocationInterval.objects.filter(pk=intervals[3].pk).update(quantity=intervals[3].quantity + 3)
    AllocationInterval.objects.create(  # a historical interval arrives late
        cluster=fleet["clusters"][1], holder_kind="claim", holder_uid="late", namespace="vision", name="late",
        resource="nvidia.com/gpu", node_name="", quantity=1, started_at=dt.datetime(2026, 11, 2, 3, 4, 5, tzinfo=UTC),
        ended_at=dt.datetime(2026, 11, 9, 6, 7, 8, tzinfo=UTC))


def _change_prices(fleet) -> None:
    price = OfferingPrice.objects.filter(offering=fleet["h100"], effective_to__isnull=True).get()
    OfferingPrice.objects.filter(pk=price.pk).update(effective_to=dt.datetime(2026, 11, 25, 7, 30, tzinfo=UTC))
    OfferingPrice.objects.create(offering=fleet["h100"], unit_price=Decimal("1.2345"), currency="EUR",
                                 effective_from=dt.datetime(2026, 11, 25, 7, 30, tzinfo=UTC))


def _change_mapping(fleet) -> None:
    assert ChargeMapping.objects.filter(resource="nvidia.com/mig-1g.10gb").update(offering=None)  # by hand


def _change_telemetry(fleet) -> None:
    _telemetry(fleet["rng"], 15)


def _change_everything(fleet) -> None:
    for change in (_change_intervals, _change_prices, _change_mapping, _change_telemetry):
        change(fleet)


CHANGES = {"intervals": _change_intervals, "telemetry": _change_telemetry, "prices": _change_prices,
           "mapping": _change_mapping, "everything": _change_everything}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_change_the_triggers_see_is_rolled_up(fleet, change: str) -> None:
    _telemetry(fleet["rng"], 20)
    rollups.refresh(now=NOW)
    CHANGES[change](fleet)
    assert ChargeRollupDirty.objects.exists()
    state = rollups.refresh(now=NOW, max_age=dt.timedelta(0))  # the current hour too, as of NOW
    assert not ChargeRollupDirty.objects.exists()
    _assert_equal(state)
    hours = _rows(ChargeRollup)
    _from_nothing()
    rollups.refresh(now=NOW)
    assert _rows(ChargeRollup) == hours


def test_without_the_triggers_the_rollups_go_stale_and_the_comparison_fails(fleet) -> None:
    """The guard can fail: with the interval triggers disabled, a closed interval is not rolled up again."""
    rollups.refresh(now=NOW)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE inventory_allocationinterval DISABLE TRIGGER USER")
    try:
        _change_intervals(fleet)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("ALTER TABLE inventory_allocationinterval ENABLE TRIGGER USER")
    with pytest.raises(AssertionError):
        _assert_equal(rollups.refresh(now=NOW, max_age=dt.timedelta(0)))


def test_closing_an_interval_marks_only_the_hours_after_its_end(fleet) -> None:
    rollups.refresh(now=NOW)
    interval = AllocationInterval.objects.filter(ended_at__isnull=True).order_by("started_at").first()
    end = NOW - dt.timedelta(hours=5, minutes=3)
    AllocationInterval.objects.filter(pk=interval.pk).update(ended_at=end)
    AllocationInterval.objects.filter(pk=interval.pk).update(name="renamed")  # nothing billed: nothing marked
    assert list(ChargeRollupDirty.objects.values_list("cluster_id", "namespace", "start", "end")) == [
        (interval.cluster_id, interval.namespace, end, None)]


def test_time_passing_rolls_up_the_hours_and_the_current_hour_as_of_a_moment(fleet) -> None:
    first = rollups.refresh(now=NOW)
    later = NOW + dt.timedelta(seconds=20)
    assert rollups.refresh(now=later, max_age=dt.timedelta(seconds=60)) == first  # fresh enough: nothing rebuilt
    next_hours = NOW + dt.timedelta(hours=3)
    state = rollups.refresh(now=next_hours)
    assert state.until == cb._floor(next_hours, "hour")
    assert state.as_of == next_hours
    _assert_equal(state)


def test_a_change_before_the_current_hour_counts_at_once_one_inside_it_after_max_age(fleet) -> None:
    rollups.refresh(now=NOW)
    cluster = fleet["clusters"][0]
    past = cb._floor(NOW - dt.timedelta(hours=5), "hour")
    for name, start, end in (("past", past, past + dt.timedelta(hours=1)),  # 100 unit-hours in that hour
                             ("current", NOW - dt.timedelta(minutes=10), None)):  # 166.7 in the current one
        AllocationInterval.objects.create(
            cluster=cluster, holder_kind="pod", holder_uid=name, namespace="ml", name=name, node_name="node-a",
            resource="nvidia.com/gpu", quantity=100 if name == "past" else 1000, started_at=start, ended_at=end)
    window = (cb._floor(NOW, "day"), cb._floor(NOW, "day") + dt.timedelta(days=1))
    everything = cb.Scope(True, set())

    def hours(state: rollups.State) -> dict[dt.datetime, Decimal]:
        return {r["period_start"]: r["unit_hours"] for r in rollups.report(
            *window, step="hour", dimensions=(), scope=everything, state=state) if r["currency"] == "EUR"}

    before = hours(rollups.State(cb._floor(NOW, "hour"), NOW))
    soon = rollups.refresh(now=NOW + dt.timedelta(seconds=20))
    assert soon.as_of == NOW
    now_hours = hours(soon)
    assert now_hours[past] == before.get(past, Decimal(0)) + 100  # the past interval: at once
    assert now_hours[cb._floor(NOW, "hour")] == before[cb._floor(NOW, "hour")]  # the current hour: as of NOW
    later = rollups.refresh(now=NOW + dt.timedelta(seconds=61))
    assert later.as_of == NOW + dt.timedelta(seconds=61)
    assert hours(later)[cb._floor(NOW, "hour")] > before[cb._floor(NOW, "hour")] + 150
    _assert_equal(later)


@contextlib.contextmanager
def _refresh_under_way(django_db_blocker) -> Iterator[None]:
    """Another connection holds the refresher's lock (as beat does while it refreshes) for the block's duration."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with django_db_blocker.unblock():
            other = connections.create_connection("default")
            with other.cursor() as cursor:
                cursor.execute("BEGIN")
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [rollups.LOCK])
                held.set()
                release.wait(30)
                cursor.execute("ROLLBACK")
            other.close()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        yield
    finally:
        release.set()
        thread.join()


@pytest.mark.django_db(transaction=True)
def test_a_reader_never_waits_for_a_refresh_under_way(django_db_blocker) -> None:
    before = rollups.refresh(now=NOW)
    with _refresh_under_way(django_db_blocker):
        assert rollups.refresh(now=NOW + dt.timedelta(hours=2), wait=False) == before  # the last committed state
    assert rollups.refresh(now=NOW + dt.timedelta(hours=2), wait=False).until == cb._floor(NOW, "hour") + dt.timedelta(
        hours=2)


@pytest.mark.django_db(transaction=True)
def test_a_reader_during_the_first_build_gets_the_engines_figures_not_the_empty_tables(fleet, django_db_blocker) -> None:
    """Beat's first build holds the lock for minutes on a large fleet; a reader meanwhile must not read the empty
    rollup tables (all zeros) as if they covered everything up to now."""
    with _refresh_under_way(django_db_blocker):
        state = rollups.refresh(now=NOW, wait=False)
        assert (state.built, state.as_of) == (False, NOW)
        assert _assert_equal(state) > 100
        with pytest.raises(AssertionError):  # what reading the empty tables as built would answer: zeros
            _assert_equal(rollups.State(state.until, state.as_of))
    assert not ChargeRollup.objects.exists()


def test_a_reader_never_does_the_first_build_itself(fleet, finance) -> None:
    """Before beat's first build, the page and the API answer from the intervals (the same figures) and build nothing:
    the first build covers every hour since the first interval, minutes on a large fleet, not a page view's work."""
    finance_client = Client()
    finance_client.force_login(finance)
    params = {"window": "2026-11-01,2026-12-01", "aggregate": "tenant,offering"}
    before = finance_client.get("/api/v1/chargeback/", params).json()
    assert not ChargeRollup.objects.exists()
    assert not ChargeRollupState.objects.exists()
    assert finance_client.get("/chargeback/", {"month": "2026-11"}).status_code == 200
    assert not ChargeRollup.objects.exists()
    assert not ChargeRollupState.objects.exists()
    assert any(Decimal(row["cost"]) > 0 for row in before["rows"])

    state = rollups.refresh()  # beat's first build
    assert state.built
    assert ChargeRollup.objects.exists()
    after = finance_client.get("/api/v1/chargeback/", params).json()
    assert after["rows"] == before["rows"]
    assert after["totals"] == before["totals"]
    assert rollups.for_reading().built


def test_a_reader_leaves_a_long_rebuild_to_beat_and_prices_the_intervals_meanwhile(fleet, settings) -> None:
    """A back-dated price marks every hour since January: a reader must neither rebuild that (minutes on a large
    fleet) nor read the rollups it made stale. A late event a few hours back is rebuilt by the reader itself."""
    settings.PORTAL_CHARGEBACK_READER_REBUILD_HOURS = 168
    built = rollups.refresh(now=NOW)
    start, end = WINDOWS[0]
    everything = cb.Scope(True, set())
    old_totals = rollups.totals(start, end, scope=everything, state=built)

    OfferingPrice.objects.filter(offering=fleet["h100"], effective_from__year=2026, effective_from__month=1).update(
        unit_price=Decimal("9.99"))
    marked = ChargeRollupDirty.objects.count()
    assert marked
    state = rollups.for_reading(now=NOW)
    assert (state.built, state.as_of) == (False, NOW)
    assert ChargeRollupDirty.objects.count() == marked  # left to beat
    assert rollups.totals(start, end, scope=everything, state=state) != old_totals  # the new price, not the stale rows
    assert _assert_equal(state) > 100

    assert rollups.refresh(now=NOW).built  # beat
    late = AllocationInterval.objects.filter(started_at__gt=NOW - dt.timedelta(days=5)).order_by("id").first()
    AllocationInterval.objects.filter(pk=late.pk).update(started_at=late.started_at - dt.timedelta(hours=3))
    assert ChargeRollupDirty.objects.exists()
    state = rollups.for_reading(now=NOW)
    assert state.built
    assert not ChargeRollupDirty.objects.exists()  # rebuilt by the reader: a few hours of one namespace
    assert _assert_equal(state) > 100


def test_the_statement_before_the_first_build_prices_the_month_once_with_the_same_figures(fleet, monkeypatch) -> None:
    """The statement page's three reports (per day, the month by dimension, the totals): before beat's first build,
    one pricing of the intervals instead of three, and the figures the rollups give once built."""
    _telemetry(fleet["rng"], 20)
    pricings = []
    real_pieces = cb.pieces
    monkeypatch.setattr(cb, "pieces", lambda *a, **k: pricings.append(k.get("step")) or real_pieces(*a, **k))
    east = ClusterFactory._meta.model.objects.get(name="east")
    start, end = WINDOWS[0]
    for scope, tenant, dimensions in ((cb.Scope(True, set()), None, ("tenant",)),
                                      (cb.Scope(True, set()), "ml", ("tenant", "namespace", "offering")),
                                      (cb.Scope(False, {(east.pk, "ml")}), None, ("tenant", "namespace", "offering"))):
        _from_nothing()
        pricings.clear()
        unbuilt = rollups.for_reading(now=NOW)
        assert not unbuilt.built
        before = rollups.statement(start, end, dimensions=dimensions, scope=scope, tenant=tenant, state=unbuilt)
        assert pricings == ["day"]
        built = rollups.refresh(now=NOW)
        pricings.clear()
        after = rollups.statement(start, end, dimensions=dimensions, scope=scope, tenant=tenant, state=built)
        assert pricings == []  # from the rollups (the window is whole hours)
        assert before == after
        assert any(row["cost"] for row in after.rows)


def test_without_postgresql_the_reports_price_the_intervals(fleet, monkeypatch) -> None:
    """`manage.py demo` runs on SQLite: no triggers, no rollups; the same functions answer from the engine."""
    monkeypatch.setattr(rollups, "maintained", lambda: False)
    state = rollups.refresh(now=NOW)
    assert state == rollups.State(cb._floor(NOW, "hour"), NOW)
    assert not ChargeRollupState.objects.exists()
    start, end = WINDOWS[0]
    everything = cb.Scope(True, set())
    found = cb.pieces(start, end, step="day", scope=everything, now=NOW)
    assert rollups.report(start, end, step="day", dimensions=("tenant",), scope=everything, state=state) == (
        cb.aggregate(found, ("tenant",)))
    assert not ChargeRollup.objects.exists()
