"""End-to-end: log in, filter nodes with htmx, open a node; watch a cluster's listing progress."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from inventory.models import SyncState
from tests.browser.conftest import log_in as log_in_as_user
from tests.inventory.factories import ClusterFactory, NodeFactory, SyncStateFactory

SCREENSHOT = Path(tempfile.gettempdir()) / "node_list.png"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def log_in(page: Page, live_server, next_path: str) -> None:
    User.objects.create_user(username="alice", password="pw")
    log_in_as_user(page, live_server, "alice", next_path)


@pytest.fixture
def fleet() -> None:
    cluster = ClusterFactory(name="lab")
    NodeFactory(
        cluster=cluster,
        name="gpu-h100-01",
        labels={"team": "ml", "nvidia.com/gpu.product": "NVIDIA-H100"},
        allocatable={"cpu": "190", "nvidia.com/gpu": "7"},
    )
    NodeFactory(
        cluster=cluster,
        name="cpu-01",
        labels={"team": "web"},
        capacity={"cpu": "64", "memory": "256Gi"},
        allocatable={"cpu": "63", "memory": "250Gi"},
    )
    NodeFactory(
        cluster=cluster,
        name="cpu-tainted-01",
        labels={"team": "ml"},
        capacity={"cpu": "64"},
        allocatable={"cpu": "64"},
        taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}],
    )


def test_filter_nodes_and_open_detail(page: Page, live_server, fleet: None) -> None:
    log_in(page, live_server, "/inventory/nodes/")
    rows = page.locator("#results tbody tr[data-node]")
    expect(rows).to_have_count(3)

    page.fill("#id_label", "team=ml")
    expect(rows).to_have_count(2)
    expect(page).to_have_url(re.compile(r"label=team%3Dml"))  # hx-push-url

    page.select_option("#id_extended_resource", "nvidia.com/gpu")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("gpu-h100-01")
    expect(rows.first).to_contain_text("NVIDIA-H100")
    expect(page).to_have_url(re.compile(r"extended_resource=nvidia.com%2Fgpu"))

    page.fill("#id_label", "")
    page.select_option("#id_schedulable", "no")
    page.select_option("#id_extended_resource", "")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("cpu-tainted-01")
    page.select_option("#id_schedulable", "")
    expect(rows).to_have_count(3)
    page.screenshot(path=SCREENSHOT, full_page=True)  # looked at by a human when the page changes

    page.click("text=gpu-h100-01")
    expect(page).to_have_url(re.compile(r"/inventory/nodes/\d+/$"))
    expect(page.locator("h1")).to_contain_text("gpu-h100-01")
    gpu_row = page.locator("table.capacity tr", has_text="nvidia.com/gpu")
    expect(gpu_row).to_contain_text("8")
    expect(gpu_row).to_contain_text("7")
    expect(gpu_row).to_have_class("reduced")


def test_cluster_page_shows_listing_progress_then_stops_polling(page: Page, live_server) -> None:
    cluster = ClusterFactory(name="busy")
    state = SyncStateFactory(
        cluster=cluster, kind="pods", phase=SyncState.Phase.LISTING, listed_count=250, list_total=1000
    )
    log_in(page, live_server, "/inventory/clusters/")
    progress = page.locator(f"#sync-state-{cluster.pk} progress")
    expect(progress).to_have_count(1)
    expect(progress).to_have_attribute("value", "250")
    expect(progress).to_have_attribute("max", "1000")

    SyncState.objects.filter(pk=state.pk).update(listed_count=600)
    expect(progress).to_have_attribute("value", "600", timeout=6_000)  # the 2 s poll picked it up

    SyncState.objects.filter(pk=state.pk).update(phase=SyncState.Phase.WATCHING)
    expect(page.locator(f"#sync-state-{cluster.pk}")).to_contain_text("watching", timeout=6_000)
    expect(progress).to_have_count(0)
    expect(page.locator(f"#sync-state-{cluster.pk}")).not_to_have_attribute("hx-trigger", "every 2s")
