"""What people see of the telemetry: the utilisation API (window, aggregate, scoping) and a device's history, the
"your GPUs right now" page live from a scraping Prometheus (idle flag, sparkline, tenant scoping), the device and
offering pages, the finance efficiency column, and the portal's own idle-units metric."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from inventory.models import Device
from portal.models import TelemetryFinding, TelemetrySource
from portal.telemetry.services import telemetry_refresh_cluster
from portal.tenancy.roles import Role
from tests.conftest import make_user
from tests.portal.factories import give_namespaces
from tests.telemetry.conftest import BUSY_HOUR, IDLE_HOUR, IDLE_POD_PREFIX, refresh_from_idle_hour

pytestmark = pytest.mark.django_db(transaction=True)
WINDOW = f"{IDLE_HOUR:%Y-%m-%dT%H:%M:%S},{BUSY_HOUR + dt.timedelta(hours=1):%Y-%m-%dT%H:%M:%S}"


def _api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_utilization_api_aggregates_and_scopes(demo_telemetry) -> None:
    _sim, cluster, _prom = demo_telemetry
    refresh_from_idle_hour(cluster, BUSY_HOUR + dt.timedelta(minutes=1))
    member = User.objects.get(username="ml-research-member")
    report = _api(member).get("/api/v1/utilization/", {"window": WINDOW, "aggregate": "tenant,namespace"}).json()
    assert {r["namespace"] for r in report["rows"]} == {"ml-research"}
    [row] = report["rows"]
    assert row["idle_allocated_hours"] >= 4  # the idle fine-tune's four cards
    assert row["xid_codes"] == [48]  # llm-finetune holds the h100-001 card with the double-bit ECC error
    finance = make_user("fin", Role.FINANCE)
    everything = _api(finance).get("/api/v1/utilization/", {"window": WINDOW, "aggregate": "node"}).json()
    nodes = {r["node"]: r for r in everything["rows"]}
    assert nodes["h100-001"]["xid_codes"] == [48]
    assert nodes["h100-000"]["unallocated_hours"] >= 1
    assert _api(finance).get("/api/v1/utilization/", {"window": WINDOW, "aggregate": "bogus"}).status_code == 400
    assert _api(finance).get("/api/v1/utilization/").status_code == 400
    device = Device.objects.get(cluster=cluster, key="node/h100-000/nvidia.com/gpu")
    history = _api(member).get(f"/api/v1/devices/{device.pk}/utilization/", {"window": WINDOW}).json()
    assert {h["namespace"] for h in history} == {"ml-research"}
    assert any(h["util_mean"] < 0.05 for h in history)
    # another tenant sees none of those hours
    other = User.objects.get(username="vision-team-member")
    assert _api(other).get(f"/api/v1/devices/{device.pk}/utilization/", {"window": WINDOW}).json() == []
    # pages
    client = Client()
    client.force_login(member)
    page = client.get(f"/utilization/devices/{device.pk}/").content.decode()
    assert "ml-research/llm-finetune-small" in page
    client.force_login(finance)
    assert "Efficiency" in client.get("/chargeback/").content.decode()


def test_portal_metric_counts_idle_units_by_tenant_and_offering(demo_telemetry) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from portal.observability import PortalCollector

    _sim, cluster, _prom = demo_telemetry
    refresh_from_idle_hour(cluster, BUSY_HOUR + dt.timedelta(minutes=1))
    registry = CollectorRegistry()
    registry.register(PortalCollector())
    text = generate_latest(registry).decode()
    lines = [line for line in text.splitlines() if line.startswith("portal_idle_allocated_units{")]
    assert any('tenant="ml-research"' in line and float(line.rsplit(" ", 1)[1]) >= 4 for line in lines)


def test_your_gpus_right_now_live(live_demo, prometheus) -> None:
    sim, cluster = live_demo
    member = make_user("ml-member")
    give_namespaces(member, cluster, "ml-research", tenant_slug="ml-research")
    outsider = make_user("vision-member")
    give_namespaces(outsider, cluster, "vision-team", tenant_slug="vision")
    sim.telemetry.config.hot.add(("h100-000", 0))  # at its thermal limit
    prom = prometheus(sim=sim, cluster="demo")
    TelemetrySource.objects.create(cluster=cluster, prometheus_url=prom.url)
    client = Client()
    client.force_login(member)

    def page_once_scraped(*expected: str) -> str:
        """Prometheus scrapes each node's exporter on its own schedule: wait until every expected pod is in."""
        deadline = time.monotonic() + 30
        page = ""
        while time.monotonic() < deadline and not all(text in page for text in expected):
            time.sleep(1)
            page = client.get("/utilization/").content.decode()
        return page

    page = page_once_scraped(IDLE_POD_PREFIX, "llm-pretrain")
    assert IDLE_POD_PREFIX in page
    assert "data-idle" in page
    assert "<polyline" in page
    assert "llm-pretrain" in page  # busy training on the H200s
    assert "ml-inference" not in page  # not the member's namespace
    client.force_login(outsider)
    page = page_once_scraped("seg-mig3g")
    assert IDLE_POD_PREFIX not in page
    assert "seg-mig3g" in page  # the vision team's DRA MIG partition
    # the live findings: the hot card throttles; XID 79 on a card the DRA driver calls healthy
    telemetry_refresh_cluster(cluster)
    kinds = {(f.kind, f.node_name) for f in TelemetryFinding.objects.filter(cluster=cluster)}
    assert ("thermal", "h100-000") in kinds
    assert ("plugin-healthy-dcgm-failing", "l40s-dra-001") in kinds
    # Prometheus gone: the page says so, nothing crashes
    prom.stop()
    page = client.get("/utilization/").content.decode()
    assert "No live telemetry" in page


