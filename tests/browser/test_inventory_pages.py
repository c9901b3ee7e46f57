"""End-to-end: the accelerator overview, then the free-capacity view filtered with htmx; a node's lazy device panel."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from inventory.models import Cluster, Mode
from tests.browser.conftest import log_in as log_in_as_user
from tests.inventory.factories import (
    ClusterFactory,
    DraDeviceFactory,
    NodeFactory,
    PluginDeviceFactory,
    TimeSlicedDeviceFactory,
)
from tests.portal.factories import give_namespaces

OVERVIEW_SHOT = Path(tempfile.gettempdir()) / "overview.png"
CAPACITY_SHOT = Path(tempfile.gettempdir()) / "capacity.png"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def log_in(page: Page, live_server, next_path: str) -> None:
    User.objects.create_user(username="alice", password="pw")
    log_in_as_user(page, live_server, "alice", next_path)


@pytest.fixture
def fleet() -> None:
    cluster = ClusterFactory(name="lab")
    TimeSlicedDeviceFactory(cluster=cluster, node_name="t4-01")  # 4 cards x 4 replicas = 16 units, 5 used
    PluginDeviceFactory(cluster=cluster, node_name="h100-01")  # 8 whole cards, 2 used
    PluginDeviceFactory(cluster=cluster, node_name="h100-02", allocatable=7, in_use=0)
    PluginDeviceFactory(
        cluster=cluster,
        node_name="a100-mig-01",
        resource_name="nvidia.com/mig-1g.10gb",
        mode=Mode.MIG,
        mig_profile="1g.10gb",
        memory_mib=9728,
        model="NVIDIA-A100-SXM4-80GB",
        node_pool="mig-pool",
        capacity=14,
        allocatable=14,
        in_use=3,
        cards=2,
    )
    DraDeviceFactory(cluster=cluster, node_name="dra-01", device_name="gpu-0")
    DraDeviceFactory(
        cluster=cluster,
        node_name="dra-01",
        device_name="gpu-1",
        in_use=1,
        free=0,
        claim_namespace="team-ml",
        claim_name="train",
    )
    NodeFactory(cluster=cluster, name="dra-01")


def test_overview_then_filter_free_capacity(page: Page, live_server, fleet: None) -> None:
    log_in(page, live_server, "/inventory/accelerators/")
    expect(page.locator("nav.nav a").nth(3)).to_have_text("Accelerators")  # after Catalog, Generate and Validate
    ts_row = page.locator("table.overview tbody tr[data-mode='time-slicing']")
    expect(ts_row).to_have_count(1)
    expect(ts_row.locator("td[data-col='cards']")).to_have_text("4")
    expect(ts_row.locator("td[data-col='units']")).to_have_text("16")
    expect(ts_row.locator("td[data-col='free']")).to_have_text("11")
    expect(ts_row).to_contain_text("nvidia.com/gpu (time-slice replica, 4 per card)")
    whole = page.locator("table.overview tbody tr[data-mode='whole']")
    expect(whole.locator("td[data-col='units']")).to_have_text("16")
    expect(whole.locator("td[data-col='unhealthy']")).to_have_text("1")
    page.screenshot(path=OVERVIEW_SHOT, full_page=True)

    page.click("nav.nav >> text=Free capacity")
    expect(page).to_have_url(re.compile(r"/inventory/capacity/$"))
    rows = page.locator("#results tbody tr[data-device]")
    expect(rows).to_have_count(6)

    page.select_option("#id_mode", "time-slicing")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("t4-01")
    expect(page).to_have_url(re.compile(r"mode=time-slicing"))  # hx-push-url

    page.select_option("#id_mode", "")
    page.select_option("#id_model", "NVIDIA-H100-80GB-HBM3")
    expect(rows).to_have_count(2)
    for node in ("h100-01", "h100-02"):
        expect(page.locator("#results tbody", has_text=node)).to_have_count(1)
    expect(page).to_have_url(re.compile(r"model=NVIDIA-H100-80GB-HBM3"))

    page.select_option("#id_model", "")
    page.fill("#id_memory_min", "80000")
    page.select_option("#id_free", "true")
    expect(rows).to_have_count(3)  # two H100 nodes + the free DRA A100; the held one is gone
    expect(page.locator("#results")).not_to_contain_text("t4-01")
    expect(page).to_have_url(re.compile(r"memory_min=80000"))
    page.screenshot(path=CAPACITY_SHOT, full_page=True)

    page.locator("#results a", has_text="gpu.nvidia.com gpu").first.click()
    expect(page).to_have_url(re.compile(r"/inventory/devices/\d+/$"))
    expect(page.locator("body")).to_contain_text("redacted")  # alice has no platform role


def test_overview_link_opens_prefiltered_capacity(page: Page, live_server, fleet: None) -> None:
    log_in(page, live_server, "/inventory/accelerators/")
    page.locator("table.overview tr[data-mode='mig'] a.free-link").click()
    expect(page).to_have_url(re.compile(r"/inventory/capacity/\?cluster=\d+&model=NVIDIA-A100-SXM4-80GB&mode=mig"))
    rows = page.locator("#results tbody tr[data-device]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("a100-mig-01")
    expect(page.locator("#id_mode")).to_have_value("mig")


def test_node_page_lazy_loads_devices(page: Page, live_server, fleet: None) -> None:
    log_in(page, live_server, "/inventory/nodes/")
    # alice's team owns team-ml: its claim is named to her (another tenant's would read "in use (another tenant)")
    give_namespaces(User.objects.get(username="alice"), Cluster.objects.get(name="lab"), "team-ml")
    page.click("text=dra-01")
    panel = page.locator("#node-devices table.node-devices")
    expect(panel.locator("tbody tr[data-device]")).to_have_count(2)
    expect(panel).to_contain_text("team-ml/train")
