"""Chargeback efficiency from the telemetry rollups: the cost of allocated unit-hours split into used (busy share)
and idle cost, over measured hours only — an hour without telemetry or with NaN is never billed as idle or used.
Carried by the API (JSON and CSV) and the FOCUS export (x_idle_cost, x_used_cost, x_measured_quantity)."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from catalog.models import OfferingPrice
from inventory.models import AllocationInterval
from portal.chargeback import services as cb
from portal.models import UtilizationRollup
from portal.tenancy.roles import Role
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory, NodeFactory
from tests.portal.factories import give_namespaces
from tests.tools import body

UTC = dt.UTC
START = dt.datetime(2026, 11, 10, tzinfo=UTC)


def _hour(n: int) -> dt.datetime:
    return START + dt.timedelta(hours=n)


@pytest.fixture
def books(db):
    cluster = ClusterFactory(name="prod")
    NodeFactory(cluster=cluster, name="h100-node", labels={"nvidia.com/gpu.product": "H100"})
    give_namespaces(make_user("ml-member"), cluster, "ml-research", tenant_slug="ml-research")
    h100 = OfferingFactory(slug="h100", unit_kind="whole", resource_name="nvidia.com/gpu")
    OfferingPrice.objects.create(offering=h100, unit_price=Decimal("4.00"), currency="EUR",
                                 effective_from=dt.datetime(2026, 1, 1, tzinfo=UTC))
    # 2 H100s for 4 hours: 8 unit-hours, 32.00
    interval = AllocationInterval.objects.create(
        cluster=cluster, holder_kind="pod", holder_uid="uid-train", namespace="ml-research", name="train-0",
        node_name="h100-node", resource="nvidia.com/gpu", quantity=2, started_at=_hour(0), ended_at=_hour(4))

    def rollup(hour: int, card: str, util: float | None, samples: int = 240) -> None:
        UtilizationRollup.objects.create(cluster=cluster, hour=_hour(hour), gpu_uuid=card, interval=interval,
                                         holder_kind="pod", holder_uid="uid-train", namespace="ml-research",
                                         holder_name="train-0", pod_namespace="ml-research", pod_name="train-0",
                                         resource="nvidia.com/gpu", samples=samples, util_mean=util)
    # hour 0: both cards 90 % busy; hour 1: one 10 %, one 30 % (mean 20 %); hour 2: NaN (no value);
    # hour 3: no telemetry at all.
    for card, values in (("GPU-a", (0.9, 0.1, None)), ("GPU-b", (0.9, 0.3, None))):
        for hour, util in enumerate(values):
            rollup(hour, card, util)
    return cluster


def test_idle_and_used_cost_over_measured_hours(books) -> None:
    found = cb.pieces(START, _hour(24), step="day", scope=cb.Scope(True, set()), now=_hour(30))
    [row] = cb.aggregate(found, ("tenant",))
    assert row["cost"] == Decimal("32.00")
    assert row["measured_unit_hours"] == Decimal(4)  # hours 0 and 1 of two cards; NaN and missing hours are not
    # hour 0: 8.00 x 0.9 used, 0.80 idle; hour 1: 8.00 x 0.2 = 1.60 used, 6.40 idle
    assert row["used_cost"] == Decimal("8.80")
    assert row["idle_cost"] == Decimal("7.20")
    # the unmeasured rest stays in the cost, in neither column
    assert row["cost"] - row["used_cost"] - row["idle_cost"] == Decimal("16.00")


def test_api_csv_and_focus_carry_idle_cost(books) -> None:
    client = APIClient()
    client.force_authenticate(make_user("fin", Role.FINANCE))
    window = {"window": "2026-11-10,2026-11-11", "step": "day"}
    report = client.get("/api/v1/chargeback/", {**window, "aggregate": "tenant,offering"}).json()
    assert report["rows"][0]["idle_cost"] == "7.200000"
    assert report["rows"][0]["used_cost"] == "8.800000"
    assert report["totals"][0]["idle_cost"] == "7.200000"
    lines = list(csv.DictReader(io.StringIO(client.get("/api/v1/chargeback/", {**window, "format": "csv"})
                                            .content.decode())))
    assert lines[0]["idle_cost"] == "7.200000"
    focus = list(csv.DictReader(io.StringIO(body(client.get("/api/v1/chargeback/focus/", window)).decode())))
    assert focus[0]["x_idle_cost"] == "7.200000"
    assert focus[0]["x_used_cost"] == "8.800000"
    assert focus[0]["x_measured_quantity"] == "4.000000"
