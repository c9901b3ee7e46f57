"""Invariants that span the inventory, the catalog and chargeback, on the demo scenario and on a seeded random
scenario, each checked on the synced cluster and again after the simulator's churn (pods replaced, GPUs turning
unhealthy and back, DRA devices tainted) ran while the portal watched the cluster.

- Every device: each of its units is exactly one of unhealthy, free, held or unknown (DRA devices one unit), and the
  inventory's holders agree with the allocation intervals chargeback bills from.
- Every offering and cluster: the units the catalog API shows as held are the inventory's held units (counted from
  the open allocation intervals and the devices blocked by shared counters), and free + held + unknown =
  allocatable.
- Every offering, cluster and hour: the unit-hours chargeback bills are at most what the offering's devices can
  hold in that hour: their allocatable units, plus units a holder keeps on a device that turned unhealthy under it
  (the inventory reports those as held beyond allocatable; a bound pod does not move).
- The chargeback API: every aggregation's rows add up to the totals, and the totals to the priced pieces.

Each failure names the first differing object. The units of a device shared by consumable capacity follow the
catalog's definition (docs/catalog.md): free while another share fits, held when none does; each holder is billed
its share (docs/chargeback.md).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import time
from collections import defaultdict
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import F
from django.utils import timezone
from rest_framework.test import APIClient

from catalog.models import Offering, OfferingPrice
from catalog.services.capacity import capacity_refresh
from catalog.services.discovery import discovery_run, proposal_decide
from catalog.services.matching import ClusterDevices
from inventory.kinds import SYNCED_KINDS
from inventory.models import AllocationInterval, Cluster, Device, Node, Path, Pod, ResourceSlice
from portal.chargeback import rollups
from portal.chargeback import services as cb
from portal.tenancy.roles import Role
from tests.conftest import live_cluster, make_user
from tests.invariants.scenarios import random_scenario
from tests.inventory.conftest import Watchers

pytestmark = pytest.mark.slow

SCENARIO_HOURS = (dt.datetime(2026, 1, 13, 8, tzinfo=dt.UTC), dt.datetime(2026, 1, 16, 8, tzinfo=dt.UTC))
CHURN_STEPS = 40
RANDOM_SEED = 7


# ------------------------------------------------------------------------------------------------ the inventory


def _open_holders(cluster: Cluster) -> dict[str, int]:
    """Units held right now per device key, from the open, non-admin allocation intervals (what chargeback bills)."""
    held: dict[str, int] = defaultdict(int)
    for kind, node, resource, quantity in AllocationInterval.objects.filter(
            cluster=cluster, ended_at__isnull=True, admin_access=False).values_list(
            "holder_kind", "node_name", "resource", "quantity"):
        key = f"node/{node}/{resource}" if kind == AllocationInterval.HolderKind.POD else resource
        held[key] += quantity
    return held


def device_states(cluster: Cluster) -> dict[str, dict[str, int]]:
    """Per device key: how many of its units are unhealthy, free, held and unknown. Raises AssertionError naming the
    first device whose units are not each exactly one of them, or whose holders disagree with the intervals."""
    holders = _open_holders(cluster)
    out: dict[str, dict[str, int]] = {}
    for d in Device.objects.filter(cluster=cluster).order_by("key"):
        held_by = holders.get(d.key, 0)
        where = f"device {d.key} (cluster {cluster.name})"
        assert d.capacity == d.allocatable + d.unhealthy, f"{where}: capacity {d.capacity} != allocatable " \
            f"{d.allocatable} + unhealthy {d.unhealthy}"
        if d.path == Path.DEVICE_PLUGIN:
            assert d.in_use == held_by, f"{where}: the inventory says {d.in_use} held, the intervals {held_by}"
            held = min(held_by, d.allocatable)
            assert d.free == d.allocatable - held, f"{where}: free {d.free} != allocatable {d.allocatable} - held " \
                f"{held}"
            out[d.key] = {"unhealthy": d.unhealthy, "free": d.free, "held": held, "unknown": 0, "blocked": 0}
            continue
        # DRA: one unit. The holders are claims (several only with consumable capacity).
        assert d.capacity == 1, f"{where}: a DRA device is one unit, not {d.capacity}"
        assert bool(d.in_use) == bool(held_by), f"{where}: in_use {d.in_use} but {held_by} open claim interval(s)"
        assert held_by <= 1 or d.allow_multiple_allocations, f"{where}: {held_by} claims hold an exclusive device"
        room = d.allow_multiple_allocations and d.free == 1  # a consumable device where another share fits
        states = {
            "unhealthy": d.unhealthy == 1,
            "unknown": d.allocatable == 1 and not d.pool_complete and not held_by,
            "free": d.allocatable == 1 and d.free == 1,
            "held": d.allocatable == 1 and not room and (held_by > 0 or (d.pool_complete and bool(d.blocked_by))),
        }
        chosen = [name for name, on in states.items() if on]
        assert len(chosen) == 1, f"{where}: its unit is {' and '.join(chosen) or 'none'} of unhealthy/free/held/" \
            f"unknown (free={d.free}, in_use={d.in_use}, holders from intervals={held_by}, blocked_by=" \
            f"{d.blocked_by!r}, pool complete={d.pool_complete})"
        out[d.key] = {name: int(on) for name, on in states.items()}
        out[d.key]["blocked"] = int(states["held"] and not held_by)  # held through shared counters, by nobody
    return out


def held_beyond_allocatable(cluster: Cluster) -> dict[str, int]:
    """Units the inventory's devices say their holders keep beyond allocatable (pods on cards that turned unhealthy),
    from the derived devices (pod requests and claim allocations), not from the intervals being checked."""
    return {key: in_use - allocatable for key, in_use, allocatable in Device.objects.filter(
        cluster=cluster, in_use__gt=F("allocatable")).values_list("key", "in_use", "allocatable")}


# ------------------------------------------------------------------------------------------------ the checks


def _all(api: APIClient, url: str) -> list[dict[str, Any]]:
    out, page = [], api.get(url).json()
    while True:
        out.extend(page["results"])
        if not page.get("next"):
            return out
        page = api.get(page["next"]).json()


def check_devices_and_catalog(cluster: Cluster, api: APIClient) -> None:
    states = device_states(cluster)
    loaded = ClusterDevices(cluster)
    offerings = {o["slug"]: o for o in _all(api, "/api/v1/catalog/offerings/")}
    assert offerings, "no offering to check"
    checked = 0
    for offering in Offering.objects.order_by("slug"):
        rows = [row for row in offerings[offering.slug]["clusters"] if row["cluster"]["name"] == cluster.name]
        keys = [d["key"] for d in loaded.match(offering).devices]
        expected = {name: sum(states[k][name] for k in keys) for name in ("free", "held", "unknown", "blocked")}
        expected["allocatable"] = sum(states[k]["free"] + states[k]["held"] + states[k]["unknown"] for k in keys)
        if not rows:
            assert not keys, f"offering {offering.slug}: the catalog has no figures for cluster {cluster.name} but it " \
                f"matches {len(keys)} devices there, e.g. {keys[0]}"
            continue
        [row] = rows
        shown = {name: row[name] for name in expected}
        assert shown == expected, f"offering {offering.slug} on {cluster.name}: the catalog shows {shown}, the " \
            f"inventory's devices {expected}"
        assert row["free"] + row["held"] + row["unknown"] == row["allocatable"], f"offering {offering.slug}: {row}"
        checked += 1
    assert checked, "no offering has devices in the cluster"


def _allocatable_by_offering(cluster: Cluster) -> dict[str, int]:
    """Per offering slug: the units its devices can hold now (allocatable, plus units held beyond it)."""
    loaded = ClusterDevices(cluster)
    beyond = held_beyond_allocatable(cluster)
    return {o.slug: sum(d["allocatable"] + beyond.get(d["key"], 0) for d in loaded.match(o).devices)
            for o in Offering.objects.all()}


def check_billing_bound(cluster: Cluster, window: tuple[dt.datetime, dt.datetime], now: dt.datetime) -> int:
    """Billed unit-hours per (offering, hour) against the offering's units; returns how many pieces were checked."""
    bound = _allocatable_by_offering(cluster)
    pieces = cb.pieces(*window, step="hour", scope=cb.Scope(True, set()), cluster=cluster.name, now=now)
    billed: dict[tuple[str, dt.datetime], Decimal] = defaultdict(Decimal)
    holders: dict[tuple[str, dt.datetime], dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for piece in pieces:
        if piece.admin_access or not piece.offering:
            continue
        key = (piece.offering, piece.period_start)
        billed[key] += piece.unit_hours
        holders[key][f"{piece.holder} {piece.resource} on {piece.node_name or '-'}"] += piece.unit_hours
    for (slug, hour), unit_hours in sorted(billed.items()):
        hours = Decimal((min(hour + dt.timedelta(hours=1), window[1], now) - hour).total_seconds()) / 3600
        limit = bound[slug] * hours
        assert unit_hours <= limit + Decimal("0.00001"), (
            f"offering {slug} on {cluster.name}, hour {hour:%Y-%m-%d %H:00}: chargeback bills {unit_hours} unit-hours, "
            f"its devices hold at most {limit} ({bound[slug]} units). Billed: "
            + "; ".join(f"{name} {amount}" for name, amount in sorted(holders[(slug, hour)].items())))
    return len(pieces)


def check_aggregations(api: APIClient, window: tuple[dt.datetime, dt.datetime]) -> None:
    params = {"window": f"{window[0].isoformat()},{window[1].isoformat()}", "step": "hour"}
    base = api.get("/api/v1/chargeback/", {**params, "detail": "intervals"})
    assert base.status_code == 200, base.content[:300]
    report = base.json()
    totals = {t["currency"]: t for t in report["totals"]}
    by_currency: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for piece in report["intervals"]:
        by_currency[piece["currency"]]["unit_hours"] += Decimal(piece["unit_hours"])
        by_currency[piece["currency"]]["cost"] += Decimal(piece["cost"])
    assert report["intervals"], "no chargeback piece in the window"
    for currency, sums in sorted(by_currency.items()):
        for field in ("unit_hours", "cost"):
            assert sums[field] == Decimal(totals[currency][field]), (
                f"currency {currency!r}: the pieces sum to {sums[field]} {field}, the totals say "
                f"{totals[currency][field]}")
    for size in range(1, len(cb.DIMENSIONS) + 1):
        for dimensions in itertools.combinations(cb.DIMENSIONS, size):
            rows = api.get("/api/v1/chargeback/", {**params, "aggregate": ",".join(dimensions)}).json()["rows"]
            sums = defaultdict(lambda: defaultdict(Decimal))
            for row in rows:
                for field in ("unit_hours", "cost", "admin_unit_hours", "unpriced_unit_hours"):
                    sums[row["currency"]][field] += Decimal(row[field])
            for currency, total in totals.items():
                for field in ("unit_hours", "cost", "admin_unit_hours", "unpriced_unit_hours"):
                    assert sums[currency][field] == Decimal(total[field]), (
                        f"aggregate={','.join(dimensions)}, currency {currency!r}: rows sum to "
                        f"{sums[currency][field]} {field}, the totals say {total[field]}")


def check_all(cluster: Cluster, api: APIClient, *, now: dt.datetime, recent: bool) -> None:
    check_devices_and_catalog(cluster, api)
    assert check_billing_bound(cluster, SCENARIO_HOURS, now)
    check_aggregations(api, SCENARIO_HOURS)
    if recent:  # the hours of the churn, which ended and started intervals at the real clock; the window ends at
        # `now` so that open intervals (billed up to each request's own clock) end with it in every request
        window = (now.replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=1), now)
        check_billing_bound(cluster, window, now)
        check_aggregations(api, window)


# ------------------------------------------------------------------------------------------------ the scenarios


def _price_everything() -> None:
    """A price from 2025 for every offering without one: a price period may not start in the past through the
    service (it would rewrite charges), so the history the scenario simulates is priced directly."""
    for offering in Offering.objects.filter(prices__isnull=True):
        OfferingPrice.objects.create(offering=offering, unit_price=Decimal("1.25"), currency="EUR",
                                     effective_from=dt.datetime(2025, 1, 1, tzinfo=dt.UTC))


def _offerings(scenario: str, actor: Any) -> None:
    if scenario == "demo":
        call_command("catalog_seed", "--prices-from", "2025-01-01", verbosity=0)
    else:  # what discovery proposes for the scenario's devices, accepted as they are
        discovery_run(actor=actor)
        for offering in Offering.objects.filter(curated=False):
            proposal_decide(actor=actor, offering_id=offering.pk, accept=True)
    _price_everything()


@contextlib.contextmanager
def synced(scenario: str) -> Iterator[tuple[Any, Cluster, APIClient]]:
    source: Any = random_scenario(RANDOM_SEED) if scenario.startswith("random-") else scenario
    with live_cluster(source, name=scenario) as (sim, cluster):
        admin = make_user("invariant-admin", Role.PLATFORM_ADMIN)
        _offerings(scenario, admin)
        capacity_refresh(clusters=[cluster])
        api = APIClient()
        api.force_authenticate(admin)
        yield sim, cluster, api


def _caught_up(sim: Any, cluster: Cluster) -> str:
    """"" when the mirror holds exactly the simulator's pods, nodes and slices at their resource versions, else
    the first object that differs."""
    for plural, model in (("pods", Pod), ("nodes", Node), ("resourceslices", ResourceSlice)):
        items, _, _, _ = sim.store.list(plural)
        want = {(so.obj["metadata"].get("namespace", ""), so.obj["metadata"]["name"]):
                so.obj["metadata"]["resourceVersion"] for so in items}
        have = {(ns, name): rv for ns, name, rv in model.objects.live().filter(cluster=cluster).values_list(
            "namespace", "name", "resource_version")}
        for key in sorted(want.keys() | have.keys()):
            if want.get(key) != have.get(key):
                return f"{plural} {'/'.join(k for k in key if k)}: simulator {want.get(key)}, mirror {have.get(key)}"
    return ""


def churn_watched(sim: Any, cluster: Cluster, steps: int) -> list[str]:
    """The simulator's churn while the portal watches every kind (as its workers do), until the mirror caught up."""
    watchers = Watchers(cluster, SYNCED_KINDS, window=3.0).start()
    try:
        changes = []
        for _ in range(steps):
            changes.append(sim.churn.step())
            time.sleep(0.05)
        deadline = time.monotonic() + 60
        while (behind := _caught_up(sim, cluster)) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not behind, f"the watchers did not catch up within 60 s: {behind}"
    finally:
        watchers.stop()
    capacity_refresh(clusters=[cluster])
    return [c for c in changes if c]


@pytest.mark.parametrize("scenario", ["demo", f"random-{RANDOM_SEED}", "dra-sharing"])
def test_invariants_hold_before_and_after_churn(transactional_db: None, scenario: str) -> None:
    with synced(scenario) as (sim, cluster, api):
        check_all(cluster, api, now=timezone.now(), recent=False)
        churn_started = timezone.now()
        changes = churn_watched(sim, cluster, CHURN_STEPS)
        assert len(changes) >= CHURN_STEPS // 2, changes
        assert Device.objects.filter(cluster=cluster, updated_at__gte=churn_started).exists(), \
            f"the churn changed no device: nothing was checked across a change ({changes[:5]})"
        check_all(cluster, api, now=timezone.now(), recent=True)


# ------------------------------------------------------------------------------------------------ can fail


def test_the_checks_name_the_first_differing_object(live_demo) -> None:
    """Each check fails, naming the object, when the inventory, the catalog or chargeback is made wrong."""
    _sim, cluster = live_demo
    admin = make_user("invariant-admin", Role.PLATFORM_ADMIN)
    _offerings("demo", admin)
    capacity_refresh(clusters=[cluster])
    api = APIClient()
    api.force_authenticate(admin)
    now = timezone.now()
    check_all(cluster, api, now=now, recent=False)

    # A device the inventory calls free while a pod's interval holds it.
    device = Device.objects.filter(cluster=cluster, path=Path.DEVICE_PLUGIN, in_use__gt=0).order_by("key").first()
    Device.objects.filter(pk=device.pk).update(free=device.free + 1)
    with pytest.raises(AssertionError, match=f"device {device.key} "):
        device_states(cluster)
    Device.objects.filter(pk=device.pk).update(free=device.free)

    # The catalog's stored held figure off by one.
    from catalog.models import OfferingCapacity

    row = OfferingCapacity.objects.filter(cluster=cluster, held__gt=0).order_by("offering__slug").first()
    OfferingCapacity.objects.filter(pk=row.pk).update(held=row.held - 1, free=row.free + 1)
    with pytest.raises(AssertionError, match=f"offering {row.offering.slug} on {cluster.name}"):
        check_devices_and_catalog(cluster, api)
    capacity_refresh(clusters=[cluster])

    # An interval billed twice over (a second open interval for the same pod's units).
    interval = AllocationInterval.objects.filter(cluster=cluster, holder_kind="pod", admin_access=False,
                                                 ended_at__isnull=True).order_by("-quantity", "name").first()
    AllocationInterval.objects.create(
        cluster=cluster, holder_kind="pod", holder_uid=f"{interval.holder_uid}-copy", namespace=interval.namespace,
        name=interval.name, node_name=interval.node_name, resource=interval.resource, quantity=64,
        started_at=interval.started_at)
    with pytest.raises(AssertionError, match="chargeback bills"):
        check_billing_bound(cluster, SCENARIO_HOURS, now)


def test_the_aggregation_check_can_fail(live_demo, monkeypatch) -> None:
    _sim, _cluster = live_demo
    admin = make_user("invariant-admin", Role.PLATFORM_ADMIN)
    _offerings("demo", admin)
    api = APIClient()
    api.force_authenticate(admin)
    check_aggregations(api, SCENARIO_HOURS)
    real = rollups.report

    def lossy(*args, dimensions, **kwargs):  # drops the last row of grouped reports only
        rows = real(*args, dimensions=dimensions, **kwargs)
        return rows[:-1] if dimensions else rows

    monkeypatch.setattr(rollups, "report", lossy)
    with pytest.raises(AssertionError, match="rows sum to"):
        check_aggregations(api, SCENARIO_HOURS)
