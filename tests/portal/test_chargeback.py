"""Chargeback against hand-computed expectations: a price change mid-interval, a MIG slice next to a whole card on
the same node, a time-slice replica, a DRA device, an adminAccess claim (zero, flagged), an unpriced resource, an
interval spanning both edges of the window and one still open; totals equal across every aggregation; CSV, FOCUS,
detail and tenant scoping through the API."""

from __future__ import annotations

import csv
import datetime as dt
import io
import itertools
import re
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from catalog.models import OfferingPrice
from inventory.models import AllocationInterval, Device, DeviceClass
from portal.chargeback import rollups
from portal.chargeback import services as cb
from portal.models import ChargeMapping, Tenant
from portal.tenancy.roles import Role
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory, NodeFactory
from tests.portal.factories import give_namespaces
from tests.tools import body

UTC = dt.UTC
NOV, DEC = dt.datetime(2026, 11, 1, tzinfo=UTC), dt.datetime(2026, 12, 1, tzinfo=UTC)
NOW = dt.datetime(2026, 12, 5, tzinfo=UTC)


def at(day: int, hour: int = 0, month: int = 11) -> dt.datetime:
    return dt.datetime(2026, month, day, hour, tzinfo=UTC)


def _price(offering, amount: str, start: dt.datetime, end: dt.datetime | None = None) -> None:
    OfferingPrice.objects.create(offering=offering, unit_price=Decimal(amount), currency="EUR", effective_from=start,
                                 effective_to=end)


def _interval(cluster, kind: str, name: str, namespace: str, resource: str, quantity: int, start, end, *,
              node: str = "", admin: bool = False) -> AllocationInterval:
    return AllocationInterval.objects.create(
        cluster=cluster, holder_kind=kind, holder_uid=f"uid-{name}", namespace=namespace, name=name, node_name=node,
        resource=resource, quantity=quantity, admin_access=admin, started_at=start, ended_at=end)


@pytest.fixture
def books(db):
    cluster = ClusterFactory(name="prod")
    NodeFactory(cluster=cluster, name="h100-node", labels={"nvidia.com/gpu.product": "H100"})
    NodeFactory(cluster=cluster, name="t4-node", labels={"nvidia.com/gpu.product": "T4"})
    ml = give_namespaces(make_user("ml-member"), cluster, "ml-research", tenant_slug="ml-research")
    vision = give_namespaces(make_user("vision-member"), cluster, "vision", tenant_slug="vision")
    platform = give_namespaces(make_user("platform-member"), cluster, "gpu-admin", tenant_slug="platform")
    for tenant, center in ((ml, "CC-ML"), (vision, "CC-VIS"), (platform, "CC-PLAT")):
        Tenant.objects.filter(pk=tenant.pk).update(cost_center=center)

    h100 = OfferingFactory(slug="h100", unit_kind="whole", resource_name="nvidia.com/gpu",
                           node_selector={"nvidia.com/gpu.product": "H100"})
    OfferingFactory(slug="any-gpu", unit_kind="whole", resource_name="nvidia.com/gpu")  # less specific: not chosen
    mig = OfferingFactory(slug="mig-1g", unit_kind="mig", resource_name="nvidia.com/mig-1g.10gb")
    shared = OfferingFactory(slug="t4-shared", unit_kind="time-slicing", resource_name="nvidia.com/gpu.shared")
    dra = OfferingFactory(slug="dra-gpu", unit_kind="dra-device", device_class_name="gpu.nvidia.com")
    _price(h100, "4.00", at(1, month=1), at(10, 12))  # the price change splits intervals at 2026-11-10 12:00
    _price(h100, "3.00", at(10, 12))
    _price(mig, "0.50", at(1, month=1))
    _price(shared, "0.10", at(1, month=1))
    _price(dra, "2.00", at(1, month=1))
    DeviceClass.objects.create(cluster=cluster, uid="dc-1", name="gpu.nvidia.com", resource_version="1", raw={
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}})
    for index in range(2):
        Device.objects.create(cluster=cluster, key=f"gpu.nvidia.com/pool-a/gpu-{index}", path="dra",
                              mode="dra-device", unit="gpu.nvidia.com gpu", node_name="h100-node",
                              driver="gpu.nvidia.com", pool="pool-a", device_name=f"gpu-{index}", capacity=1,
                              allocatable=1)

    pod, claim = AllocationInterval.HolderKind.POD, AllocationInterval.HolderKind.CLAIM
    # 1: 2 H100s for 24 h across the price change: 12 h x 2 x 4.00 + 12 h x 2 x 3.00 = 168.00 (48 unit-hours).
    _interval(cluster, pod, "train-1", "ml-research", "nvidia.com/gpu", 2, at(10), at(11), node="h100-node")
    # 2: 3 MIG 1g slices on the same node for 10 h: 10 x 3 x 0.50 = 15.00 (30).
    _interval(cluster, pod, "mig-1", "ml-research", "nvidia.com/mig-1g.10gb", 3, at(5), at(5, 10), node="h100-node")
    # 3: 1 time-slice replica for 5 h: 5 x 0.10 = 0.50 (5).
    _interval(cluster, pod, "ts-1", "vision", "nvidia.com/gpu.shared", 1, at(20), at(20, 5), node="t4-node")
    # 4: 1 H100 from 2026-10-31 18:00 to 2026-12-01 06:00, clipped to the 720 h of November:
    #    228 h x 4.00 (to 11-10 12:00) + 492 h x 3.00 = 912.00 + 1476.00 = 2388.00 (720).
    _interval(cluster, pod, "long-1", "vision", "nvidia.com/gpu", 1, at(31, 18, month=10), at(1, 6, month=12),
              node="h100-node")
    # 5: an adminAccess claim on a DRA device for 4 h: priced at zero, flagged (4 admin unit-hours).
    _interval(cluster, claim, "dcgm", "gpu-admin", "gpu.nvidia.com/pool-a/gpu-0", 1, at(15), at(15, 4), admin=True)
    # 6: an ordinary claim on the other DRA device for 24 h: 24 x 2.00 = 48.00 (24).
    _interval(cluster, claim, "c1", "ml-research", "gpu.nvidia.com/pool-a/gpu-1", 1, at(15), at(16))
    # 7: a resource no offering sells: 10 unpriced unit-hours, no cost.
    _interval(cluster, pod, "fpga-1", "ml-research", "example.com/fpga", 1, at(3), at(3, 10), node="t4-node")
    # 8: still running at the end of the window: 4 h of one MIG slice = 2.00 (4).
    _interval(cluster, pod, "open-1", "ml-research", "nvidia.com/mig-1g.10gb", 1, at(30, 20), None,
              node="h100-node")
    return cluster


def _pieces(step="month", **kwargs):
    return cb.pieces(NOV, DEC, step=step, scope=cb.Scope(True, set()), now=NOW, **kwargs)


def test_hand_computed_totals(books) -> None:
    totals = {row["currency"]: row for row in cb.totals(_pieces())}
    eur = totals["EUR"]
    assert eur["cost"] == Decimal("2621.50")  # 168 + 15 + 0.50 + 2388 + 0 + 48 + 2
    assert eur["unit_hours"] == Decimal(835)  # 48 + 30 + 5 + 720 + 4 + 24 + 4
    assert eur["admin_unit_hours"] == Decimal(4)
    assert totals[""]["unpriced_unit_hours"] == Decimal(10)
    assert totals[""]["cost"] == 0


def test_per_tenant_offering_and_cost_center(books) -> None:
    by_tenant = {(r["tenant"], r["currency"]): r["cost"] for r in cb.aggregate(_pieces(), ("tenant",))}
    assert by_tenant[("ml-research", "EUR")] == Decimal("233.00")  # 168 + 15 + 48 + 2
    assert by_tenant[("vision", "EUR")] == Decimal("2388.50")  # 0.50 + 2388
    assert by_tenant[("platform", "EUR")] == 0  # the admin claim
    by_offering = {r["offering"]: r for r in cb.aggregate(_pieces(), ("offering",)) if r["currency"] == "EUR"}
    assert by_offering["h100"]["cost"] == Decimal("2556.00")  # 168 + 2388: the H100 node's whole cards
    assert by_offering["mig-1g"]["cost"] == Decimal("17.00")  # the MIG slices on the same node, at their price
    assert by_offering["t4-shared"]["cost"] == Decimal("0.50")
    assert by_offering["dra-gpu"]["cost"] == Decimal("48.00")
    assert by_offering["dra-gpu"]["admin_unit_hours"] == Decimal(4)
    centers = {r["cost_center"]: r["cost"] for r in cb.aggregate(_pieces(), ("cost_center",)) if r["currency"]}
    assert centers == {"CC-ML": Decimal("233.00"), "CC-VIS": Decimal("2388.50"), "CC-PLAT": Decimal(0)}


def test_totals_are_equal_across_every_aggregation_and_step(books) -> None:
    for step in cb.STEPS:
        found = _pieces(step)
        total = sum(p.cost for p in found)
        assert total == Decimal("2621.50")
        for size in (1, 2, 3):
            for dimensions in itertools.combinations(cb.DIMENSIONS, size):
                rows = cb.aggregate(found, dimensions)
                assert sum(r["cost"] for r in rows) == total, (step, dimensions)
                assert sum(r["unit_hours"] for r in rows) == Decimal(845)


def test_daily_rows_split_at_midnight_and_at_the_price_change(books) -> None:
    rows = cb.aggregate(_pieces("day", tenant="vision"), ("namespace", "offering"))
    tenth = [r for r in rows if r["period_start"] == at(10) and r["offering"] == "h100"]
    assert [r["cost"] for r in tenth] == [Decimal("84.00")]  # 12 h x 4.00 + 12 h x 3.00
    assert len([r for r in rows if r["offering"] == "h100"]) == 30  # one row per November day
    hourly = cb.aggregate(_pieces("hour", tenant="ml-research"), ("offering",))
    assert [r["cost"] for r in hourly if r["period_start"] == at(10, 11) and r["offering"] == "h100"] == [
        Decimal("8.00")]
    assert [r["cost"] for r in hourly if r["period_start"] == at(10, 12) and r["offering"] == "h100"] == [
        Decimal("6.00")]


def test_offerings_are_resolved_once_and_frozen(books) -> None:
    _pieces()
    frozen = dict(ChargeMapping.objects.values_list("resource", "offering__slug"))
    assert frozen["nvidia.com/gpu"] == "h100"  # the more specific offering of the two that match
    assert frozen["gpu.nvidia.com/pool-a/gpu-1"] == "dra-gpu"
    assert frozen["example.com/fpga"] is None
    # A later catalog change does not rewrite past charges: the frozen mapping keeps pricing the H100 node.
    OfferingFactory(slug="h100-new", unit_kind="whole", resource_name="nvidia.com/gpu",
                    node_selector={"nvidia.com/gpu.product": "H100", "pool": "x"})
    assert cb.totals(_pieces())[1]["cost"] == Decimal("2621.50")


def test_window_edges_and_parameters() -> None:
    assert cb.parse_window("2026-11-01,2026-12-01") == (NOV, DEC)
    assert cb.parse_window("2026-11-01T06:00:00+02:00,2026-11-02") == (at(1, 4), at(2))
    for bad in ("", "2026-11-01", "2026-12-01,2026-11-01", "yesterday,today", "2020-01-01,2026-01-01"):
        with pytest.raises(cb.ChargebackError):
            cb.parse_window(bad)
    with pytest.raises(cb.ChargebackError):
        cb.parse_aggregate("tenant,owner")
    with pytest.raises(cb.ChargebackError):
        cb.parse_step("week")
    assert cb.buckets(at(30, 20, month=1), at(1, 2, month=3), "month") == [
        (at(30, 20, month=1), at(1, month=2)), (at(1, month=2), at(1, month=3)), (at(1, month=3), at(1, 2, month=3))]


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_api_json_csv_detail_focus_and_scoping(books) -> None:
    # Reports over HTTP price open intervals up to the real clock: leave the open one out to stay deterministic.
    AllocationInterval.objects.filter(name="open-1").delete()
    rollups.refresh()  # beat's first build (before it, reads price the intervals: test_chargeback_rollups.py)
    finance = make_user("fin", Role.FINANCE)
    params = {"window": "2026-11-01,2026-12-01", "aggregate": "tenant,offering", "step": "month"}
    report = _api(finance).get("/api/v1/chargeback/", {**params, "detail": "intervals"}).json()
    assert {t["currency"]: t["cost"] for t in report["totals"]}["EUR"] == "2619.500000"
    # Every number is reproducible from the pieces in `intervals`.
    pieces_sum = sum(Decimal(p["cost"]) for p in report["intervals"])
    assert pieces_sum == sum(Decimal(r["cost"]) for r in report["rows"]) == Decimal("2619.50")
    price_change = [p for p in report["intervals"] if p["holder"] == "pod/ml-research/train-1"]
    assert [(p["unit_price"], p["cost"]) for p in price_change] == [("4.0000", "96.000000"), ("3.0000", "72.000000")]
    # Without detail the rows come from the hourly rollups: the same rows, up to the same moment.
    rolled = _api(finance).get("/api/v1/chargeback/", params).json()
    assert rolled["rows"] == report["rows"]
    assert rolled["totals"] == report["totals"]
    assert rolled["as_of"] == report["as_of"]

    response = _api(finance).get("/api/v1/chargeback/", {**params, "format": "csv"})
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert sum(Decimal(r["cost"]) for r in rows) == Decimal("2619.50")
    assert set(rows[0]) >= {"period_start", "tenant", "offering", "currency", "cost", "unit_hours"}

    focus = _api(finance).get("/api/v1/chargeback/focus/", {"window": params["window"]})
    assert focus["Content-Type"].startswith("text/csv")
    lines = list(csv.DictReader(io.StringIO(body(focus).decode())))
    assert set(cb.FOCUS_COLUMNS) == set(lines[0])
    assert sum(Decimal(r["BilledCost"]) for r in lines) == Decimal("2619.50")
    admin = [r for r in lines if r["x_namespace"] == "gpu-admin"]
    assert [(r["x_admin_access"], r["BilledCost"], r["ConsumedQuantity"]) for r in admin] == [
        ("True", "0.000000", "4.000000")]

    member = make_user("ml-only")
    give_namespaces(member, books, tenant_slug="ml-research")
    own = _api(member).get("/api/v1/chargeback/", params).json()
    assert {r["tenant"] for r in own["rows"]} == {"ml-research"}
    assert {t["currency"]: t["cost"] for t in own["totals"]}["EUR"] == "231.000000"
    assert "idle" not in _api(member).get("/api/v1/chargeback/", {**params, "idle": "true"}).json()
    assert _api(member).get("/api/v1/chargeback/", {**params, "tenant": "vision"}).json()["rows"] == []
    assert _api(member).get("/api/v1/chargeback/", {"window": "bad"}).status_code == 400
    assert _api(member).get("/api/v1/chargeback/", {**params, "aggregate": "salary"}).status_code == 400


@pytest.mark.slow
@pytest.mark.parametrize(("step", "chunk"), [("month", 1), ("month", 3), ("month", cb.STREAM_CHUNK), ("day", 3)])
def test_the_focus_stream_is_the_reports_rows_in_the_reports_order(books, step: str, chunk: int) -> None:
    """focus_stream reads a chunk of intervals at a time (keyset pages per step period); whatever the chunk, it yields
    exactly focus_rows(pieces(...)): every row, every cent, the same order, under every scope and filter."""
    member = make_user("ml-stream")
    give_namespaces(member, books, "ml-research", tenant_slug="ml-research")
    scopes = {"everything": cb.Scope(True, set()), "ml-research": cb.Scope.for_user(member),
              "nothing": cb.Scope(False, set())}
    for name, scope in scopes.items():
        for filters in ({}, {"tenant": "vision"}, {"cluster": "prod"}, {"cluster": "elsewhere"}):
            expected = cb.focus_rows(cb.pieces(NOV, DEC, step=step, scope=scope, now=NOW, **filters))
            streamed = list(cb.focus_stream(NOV, DEC, step=step, scope=scope, now=NOW, chunk=chunk, **filters))
            assert streamed == expected, (name, filters)
    assert len(list(cb.focus_stream(NOV, DEC, step=step, scope=scopes["everything"], now=NOW, chunk=chunk))) >= 8


def test_the_streamed_focus_export_is_byte_for_byte_what_the_renderers_wrote(books) -> None:
    """The export streams; its CSV and JSON bodies are the bytes DRF's renderers produced from the whole list."""
    from rest_framework.renderers import JSONRenderer

    from portal.chargeback.api import FocusExportView
    from portal.chargeback.csv_export import CSVRenderer

    AllocationInterval.objects.filter(name="open-1").delete()  # priced up to the real clock over HTTP
    client = _api(make_user("fin-stream", Role.FINANCE))
    rows = cb.focus_rows(cb.pieces(NOV, DEC, step="day", scope=cb.Scope(True, set())))
    query = {"window": "2026-11-01,2026-12-01", "step": "day"}

    as_csv = client.get("/api/v1/chargeback/focus/", query)
    assert as_csv.streaming
    assert as_csv["Content-Type"] == "text/csv; charset=utf-8"
    assert as_csv["Content-Disposition"] == 'attachment; filename="focus-20261101-20261201.csv"'
    assert body(as_csv) == CSVRenderer().render(rows, renderer_context={"view": FocusExportView()})
    as_json = client.get("/api/v1/chargeback/focus/", {**query, "format": "json"})
    assert as_json.streaming
    assert as_json["Content-Type"] == "application/json"
    assert body(as_json) == JSONRenderer().render(rows)
    empty = client.get("/api/v1/chargeback/focus/", {"window": "2020-01-01,2020-02-01"})
    assert body(empty).decode().splitlines() == [",".join(cb.FOCUS_COLUMNS)]
    assert body(client.get("/api/v1/chargeback/focus/", {"window": "2020-01-01,2020-02-01", "format": "json"})) == b"[]"
    refused = client.get("/api/v1/chargeback/focus/", {"window": "2026-12-01,2026-11-01"})
    assert refused.status_code == 400
    assert not refused.streaming


@pytest.mark.slow  # syncs the demo cluster live, twice (about 6 s)
def test_sync_restarts_and_relists_never_double_count(live_demo) -> None:
    """The demo synced, priced; then a second full sync (relist), a simulator restart with compaction (410 →
    relist) and replayed derivation: the same pieces, to the microsecond and the cent."""
    from inventory.services.derive import derive_scope
    from tests.conftest import sync_once as _sync

    sim, cluster = live_demo
    offering = OfferingFactory(slug="any-gpu", unit_kind="whole", resource_name="nvidia.com/gpu")
    _price(offering, "1.50", at(1, month=1))
    start, end = at(1, month=1), at(1, month=1) + dt.timedelta(days=400)
    now = dt.datetime.now(UTC)

    def report() -> list[tuple]:
        found = cb.pieces(start, end, step="day", scope=cb.Scope(True, set()), now=now)
        return sorted((p.holder, p.resource, p.start, p.end, p.unit_hours, p.cost) for p in found)

    first = report()
    intervals = AllocationInterval.objects.count()
    assert first
    assert any(cost > 0 for *_, cost in first)
    _sync(cluster)  # relist
    sim.restart(compact=True)
    _sync(cluster)  # after compaction: a full relist again
    derive_scope(cluster_id=cluster.pk, scope=None)  # replayed derivation
    assert AllocationInterval.objects.count() == intervals
    assert report() == first


def test_statement_and_finance_pages(books, client) -> None:
    AllocationInterval.objects.filter(name="open-1").delete()
    member = make_user("ml-lead")
    give_namespaces(member, books, tenant_slug="ml-research")
    client.force_login(member)
    page = client.get("/chargeback/", {"month": "2026-11"})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-tenant="vision"' not in html  # their own statement only
    assert "231.00 EUR" in html
    assert html.count("<rect ") == 30  # one bar per November day
    assert "format=csv" in page.context["csv_url"]
    csv_response = client.get(page.context["csv_url"])
    assert {r["tenant"] for r in csv.DictReader(io.StringIO(csv_response.content.decode()))} == {"ml-research"}

    client.force_login(make_user("fin", Role.FINANCE))
    html = client.get("/chargeback/", {"month": "2026-11"}).content.decode()
    assert 'data-tenant="vision"' in html
    assert 'data-tenant="ml-research"' in html
    assert "2,619.50 EUR" in html
    assert client.get("/chargeback/", {"month": "2026-11", "tenant": "vision"}).context["rows"][0]["tenant"] == "vision"
    assert 'data-testid="as-of"' not in html  # November is over: nothing to qualify
    this_month = client.get("/chargeback/", {"month": "garbage"})  # falls back to this month
    assert this_month.status_code == 200
    assert 'data-testid="as-of"' in this_month.content.decode()  # "Counted up to …": the rollups' moment
    assert this_month.context["as_of"] <= timezone.now()


FORMULAS = ("=HYPERLINK(\"http://evil.example/\")", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1+1",
            "\r=1+1")


@pytest.mark.parametrize("value", ["=1", "+1+1", "-1+2", "-A1", "@x", "\t=1", "\r=1", "\t", "-"])
def test_spreadsheet_safe_neutralises_every_formula_prefix(value: str) -> None:
    from portal.chargeback.csv_export import spreadsheet_safe

    assert spreadsheet_safe(value) == "'" + value


@pytest.mark.parametrize("value", ["-12.50", "+3", "1e-6", "-0.000001", "plain", "a=b", ""])
def test_spreadsheet_safe_keeps_numbers_and_plain_text(value: str) -> None:
    from portal.chargeback.csv_export import spreadsheet_safe

    assert spreadsheet_safe(value) == value
    assert spreadsheet_safe(Decimal("-1.50")) == "-1.50"
    assert spreadsheet_safe(-3) == -3


def _cells(body: bytes) -> list[str]:
    return [cell for row in csv.reader(io.StringIO(body.decode(), newline="")) for cell in row]


def test_every_csv_export_neutralises_formulas(books) -> None:
    """Tenant slugs and cost centres are typed by people; each CSV export (aggregated, detail, FOCUS) must carry
    them as text, never as something a spreadsheet evaluates."""
    AllocationInterval.objects.filter(name="open-1").delete()
    tenants = list(Tenant.objects.order_by("slug"))
    for position, tenant in enumerate(tenants):
        Tenant.objects.filter(pk=tenant.pk).update(slug=FORMULAS[position], cost_center=FORMULAS[position + 3])
    finance = make_user("fin", Role.FINANCE)
    window = {"window": "2026-11-01,2026-12-01"}
    exports = {
        "aggregate": _api(finance).get("/api/v1/chargeback/", {**window, "aggregate": "tenant,cost_center",
                                                               "format": "csv"}),
        "detail": _api(finance).get("/api/v1/chargeback/", {**window, "detail": "intervals", "format": "csv"}),
        "focus": _api(finance).get("/api/v1/chargeback/focus/", window),
    }
    assert {name: response.status_code for name, response in exports.items()} == dict.fromkeys(exports, 200)
    bodies = {name: body(response) for name, response in exports.items()}  # a streamed body is read once
    number = re.compile(r"[+-]?\d+(\.\d+)?")
    for name in exports:
        cells = _cells(bodies[name])
        dangerous = [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r")) and not number.fullmatch(c)]
        assert dangerous == [], name
        for value in FORMULAS[:3] if name == "detail" else FORMULAS:
            if name == "focus" and value in FORMULAS[:3]:
                continue  # FOCUS names the tenant in x_tenant, checked below
            assert "'" + value in cells, (name, value)
    focus_cells = _cells(bodies["focus"])
    assert {"'" + value for value in FORMULAS} <= set(focus_cells)


def test_an_offering_bills_only_its_own_kind_of_unit(db) -> None:
    """A MIG slice the single strategy advertises as nvidia.com/gpu is not a whole card: an offering selling whole
    cards whose node selector the node also satisfies does not bill it (the catalog does not count it either)."""
    cluster = ClusterFactory(name="prod")
    labels = {"node-pool": "a100", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}
    NodeFactory(cluster=cluster, name="mig-node", labels=labels)
    Device.objects.create(cluster=cluster, key="node/mig-node/nvidia.com/gpu", path="device-plugin", mode="mig",
                          unit="nvidia.com/gpu", node_name="mig-node", resource_name="nvidia.com/gpu", capacity=14,
                          allocatable=14)
    whole = OfferingFactory(slug="a100-pool", unit_kind="whole", resource_name="nvidia.com/gpu",
                            node_selector={"node-pool": "a100"})
    _price(whole, "4.00", at(1, month=1))
    _interval(cluster, AllocationInterval.HolderKind.POD, "notebook", "ml", "nvidia.com/gpu", 1, at(2), at(2, 10),
              node="mig-node")
    [piece] = _pieces()
    assert (piece.offering, piece.unpriced, piece.cost) == ("", True, 0)

    ChargeMapping.objects.all().delete()
    slice_offering = OfferingFactory(slug="a100-1g", unit_kind="mig", resource_name="nvidia.com/gpu",
                                     node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"})
    _price(slice_offering, "0.50", at(1, month=1))
    [piece] = _pieces()
    assert (piece.offering, piece.cost) == ("a100-1g", Decimal("5.000000"))


def test_a_share_of_a_device_is_billed_as_its_share(db) -> None:
    """Claims sharing one device by consumable capacity are each billed what they consumed of it: quantity x share x
    hours, so the holders of a device never pay for more than the device."""
    cluster = ClusterFactory(name="prod")
    dra = OfferingFactory(slug="h100-shares", unit_kind="dra-device", device_class_name="gpu.nvidia.com")
    _price(dra, "8.00", at(1, month=1))
    DeviceClass.objects.create(cluster=cluster, uid="dc-1", name="gpu.nvidia.com", resource_version="1", raw={
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}})
    Device.objects.create(cluster=cluster, key="gpu.nvidia.com/pool-a/gpu-0", path="dra", mode="dra-device",
                          unit="gpu.nvidia.com gpu", node_name="n1", driver="gpu.nvidia.com", pool="pool-a",
                          device_name="gpu-0", capacity=1, allocatable=1, allow_multiple_allocations=True)
    claim = AllocationInterval.HolderKind.CLAIM
    for name, share in (("embed", 0.25), ("rerank", 0.25), ("train", 0.5)):
        interval = _interval(cluster, claim, name, "ml", "gpu.nvidia.com/pool-a/gpu-0", 1, at(2), at(2, 10))
        AllocationInterval.objects.filter(pk=interval.pk).update(share=share)
    pieces = {p.holder.rsplit("/", 1)[1]: p for p in _pieces()}
    assert {name: (p.share, p.unit_hours, p.cost) for name, p in pieces.items()} == {
        "embed": (Decimal("0.25"), Decimal("2.500000"), Decimal("20.000000")),
        "rerank": (Decimal("0.25"), Decimal("2.500000"), Decimal("20.000000")),
        "train": (Decimal("0.5"), Decimal("5.000000"), Decimal("40.000000"))}
    [total] = cb.totals(list(pieces.values()))
    assert (total["unit_hours"], total["cost"]) == (Decimal("10.000000"), Decimal("80.000000"))  # one device, 10 h
