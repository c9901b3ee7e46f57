"""End-to-end catalog pages in Chromium: a tenant filters by a CUDA requirement (htmx), compares two offerings and
copies a request snippet; a platform admin edits a DRA offering's CEL selector and watches the live match count."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect

from catalog.models import CapacitySample, Offering, OfferingCapacity
from inventory.models import Cluster
from portal.tenancy.roles import Role
from tests.browser.conftest import log_in, shot
from tests.catalog.factories import OfferingFactory, OfferingPriceFactory
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory, DeviceClassFactory, DraDeviceFactory

L40S = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"'
A100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"'

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def capacity(offering: Offering, cluster: Cluster, **figures: object) -> OfferingCapacity:
    return OfferingCapacity.objects.create(offering=offering, cluster=cluster, computed_at=timezone.now(), **figures)


@pytest.fixture
def catalog() -> dict[str, Offering]:
    """Three offerings with prices and capacity, hourly history for one, and a DRA fleet of 2 L40S + 1 A100."""
    cluster = ClusterFactory(name="lab")
    attributes = {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA L40S"}}
    for node in ("l40s-a", "l40s-b"):
        DraDeviceFactory(
            cluster=cluster,
            node_name=node,
            path="dra",
            mode="dra-device",
            driver="gpu.nvidia.com",
            model="NVIDIA L40S",
            attributes=attributes,
            capacities={"memory": {"value": "48Gi"}},
        )
    DraDeviceFactory(
        cluster=cluster,
        node_name="a100-a",
        path="dra",
        mode="dra-device",
        driver="gpu.nvidia.com",
        attributes={"type": {"string": "gpu"}, "productName": {"string": "NVIDIA A100-SXM4-80GB"}},
    )
    DeviceClassFactory(
        cluster=cluster,
        name="gpu.nvidia.com",
        raw={"spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}},
    )

    h100 = OfferingFactory(
        slug="h100",
        name="H100 whole card",
        resource_name="nvidia.com/gpu",
        model="NVIDIA-H100-80GB-HBM3",
        memory_mib=81920,
        cuda_max="12.8",
        compute_capability="9.0",
        architecture="hopper",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        request_sizes=[1, 2, 4, 8],
        compute_share="1 card",
        fault_domain="own card",
    )
    t4 = OfferingFactory(
        slug="t4",
        name="T4 time-slice replica",
        unit_kind="time-slicing",
        resource_name="nvidia.com/gpu",
        model="Tesla-T4",
        memory_mib=15360,
        cuda_max="12.2",
        compute_capability="7.5",
        units_per_card=4,
        compute_share="1 of 4 replicas",
    )
    l40s = OfferingFactory(
        slug="l40s",
        name="L40S DRA device",
        unit_kind="dra-device",
        device_class_name="gpu.nvidia.com",
        cel_selector=L40S,
        model="NVIDIA L40S",
        memory_mib=49152,
        cuda_max="12.8",
        compute_capability="8.9",
        request_sizes=[1, 2],
    )
    OfferingPriceFactory(offering=h100, unit_price=Decimal("2.5"))
    OfferingPriceFactory(offering=t4, unit_price=Decimal("0.25"))
    OfferingPriceFactory(offering=l40s, unit_price=Decimal("1.2"))
    capacity(
        h100,
        cluster,
        total_units=16,
        allocatable=15,
        held=12,
        free=3,
        largest_placeable=3,
        feasible_nodes=2,
        cards=16,
        stranded=3,
        fragmentation=1.0,
        pending_pods=3,
        granted_quota=72,
        quota_capacity=67,
        free_by_node={"h100-000": 3},
    )
    capacity(
        t4,
        cluster,
        total_units=32,
        allocatable=32,
        held=7,
        free=25,
        largest_placeable=16,
        feasible_nodes=2,
        cards=8,
        free_by_node={"t4-000": 9, "t4-001": 16},
    )
    capacity(
        l40s,
        cluster,
        total_units=2,
        allocatable=2,
        held=0,
        free=2,
        largest_placeable=1,
        feasible_nodes=2,
        cards=2,
        free_by_node={"l40s-a": 1, "l40s-b": 1},
    )
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    for hours_ago in range(48, 0, -1):
        held = 8 + (hours_ago * 7) % 8
        CapacitySample.objects.create(
            offering=h100,
            cluster=cluster,
            hour=now - dt.timedelta(hours=hours_ago),
            total_units=16,
            allocatable=15,
            held=held,
            free=15 - held,
        )
    return {"h100": h100, "t4": t4, "l40s": l40s}


def test_tenant_filters_compares_and_copies_a_snippet(page: Page, live_server, catalog) -> None:
    make_user("alice", Role.TENANT_MEMBER)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    log_in(page, live_server, "alice", "/catalog/")
    expect(page.locator("nav.nav a").first).to_have_text("Catalog")
    expect(page.locator("nav.nav a").first).to_have_attribute("aria-current", "page")
    rows = page.locator("#results tbody tr[data-offering]")
    expect(rows).to_have_count(3)
    expect(page.locator("text=New offering")).to_have_count(0)
    page.evaluate("window.__noReload = true")

    page.fill("#id_requirement", "cuda 12.4, sm_80+")
    h100 = page.locator("#results tr[data-offering='h100']")
    t4 = page.locator("#results tr[data-offering='t4']")
    expect(h100).to_have_attribute("data-qualifies", "true")
    expect(h100.locator("td.fit")).to_contain_text("qualifies")
    expect(t4).to_have_attribute("data-qualifies", "false")
    expect(t4.locator("td.fit")).to_contain_text("driver supports CUDA up to 12.2, the image needs 12.4")
    expect(t4.locator("td.fit")).to_contain_text("compute capability 7.5 is below 8.0")
    expect(rows.last).to_have_attribute("data-offering", "t4")  # qualifying rows first
    expect(page).to_have_url(re.compile(r"requirement=cuda"))  # hx-push-url
    assert page.evaluate("window.__noReload") is True  # swapped by htmx, not a full page load

    page.fill("#id_requirement", "cuda banana")
    expect(page.locator("#results [data-requirement-error]")).to_contain_text("is not a version")
    page.fill("#id_requirement", "cuda 12.4, sm_80+")
    expect(t4).to_have_attribute("data-qualifies", "false")
    shot(page, "catalog-list")

    page.check("#pick-h100")
    page.check("#pick-t4")
    expect(page.locator("[data-compare-count]")).to_have_text("2 selected.")
    page.click("#compare-button")
    expect(page).to_have_url(re.compile(r"/catalog/compare/\?.*o=h100&o=t4"))
    table = page.locator("table.compare")
    expect(table.locator("thead th[data-offering]")).to_have_count(2)
    expect(table.locator("thead")).to_contain_text("H100 whole card")
    expect(table.locator("thead")).to_contain_text("T4 time-slice replica")
    expect(table).to_contain_text("Time-slice replica")
    expect(table).to_contain_text("2.50 EUR")
    expect(table.locator("tr.fit")).to_contain_text("does not qualify")
    shot(page, "catalog-compare")

    table.locator("thead a", has_text="H100 whole card").click()
    expect(page).to_have_url(f"{live_server.url}/catalog/o/h100/")
    expect(page.locator("#history svg polyline")).to_have_count(3)
    expect(page.locator("#free-by-node svg rect")).to_have_count(1)
    copy = page.locator("[data-copy-target='snippet-extended']")
    expect(page.locator("#snippet-extended")).to_contain_text("nvidia.com/gpu: 1")
    copy.click()
    expect(copy).to_have_text("Copied")
    expect(copy).to_have_attribute("data-copy-state", "copied")
    try:
        clipboard = page.evaluate("navigator.clipboard.readText()")
    except PlaywrightError:
        clipboard = None  # clipboard-read not available in this Chromium: the visible state is what we assert
    if clipboard is not None:
        assert "nvidia.com/gpu: 1" in clipboard
        assert "nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3" in clipboard
    shot(page, "catalog-detail")
    expect(copy).to_have_text("Copy", timeout=5000)  # resets

    page.goto(f"{live_server.url}/catalog/o/l40s/")
    expect(page.locator("#snippet-dra")).to_contain_text("kind: ResourceClaimTemplate")
    expect(page.locator("#snippet-dra")).to_contain_text("deviceClassName: gpu.nvidia.com")
    expect(page.locator("#history")).to_contain_text("No history yet")


def test_admin_edits_a_dra_selector_with_live_match_count(page: Page, live_server, catalog) -> None:
    make_user("root", Role.PLATFORM_ADMIN, superuser=True)
    log_in(page, live_server, "root", "/catalog/o/l40s/edit/")
    check = page.locator("#selector-check")
    expect(check).to_contain_text("matches 2 devices on 2 nodes")
    expect(check).to_contain_text("(in 1 cluster)")

    page.fill("#id_cel_selector", A100)
    expect(check).to_contain_text("matches 1 device on 1 node")

    page.fill("#id_cel_selector", "device.driver == ")
    error = check.locator("pre.cel-error")
    expect(error).to_contain_text("line 1, column 18")
    expect(error).to_contain_text("device.driver == \n" + " " * 17 + "^")
    shot(page, "catalog-edit-invalid-cel")

    page.fill("#id_cel_selector", L40S.replace("L40S", "H100"))
    expect(check).to_contain_text("Matches no device")

    # Saving an invalid selector keeps the offering as it was and shows the position on the field.
    page.fill("#id_cel_selector", "device.attributes[")
    page.click("#offering-form button[type=submit]")
    expect(page.locator("[data-field='cel_selector'] pre.field-error")).to_contain_text("line 1, column")
    assert Offering.objects.get(slug="l40s").cel_selector == L40S

    page.fill("#id_cel_selector", A100)
    expect(check).to_contain_text("matches 1 device on 1 node")
    page.click("#offering-form button[type=submit]")
    expect(page).to_have_url(f"{live_server.url}/catalog/o/l40s/")
    expect(page.locator(".messages")).to_contain_text("Saved offering L40S DRA device.")
    assert Offering.objects.get(slug="l40s").cel_selector == A100

    page.goto(f"{live_server.url}/catalog/o/l40s/edit/")
    page.fill("#id_unit_price", "1.5")
    page.fill("#id_effective_from", "2001-01-01T00:00")
    page.click("#price-form button[type=submit]")
    expect(page.locator("#prices [data-field='effective_from']")).to_contain_text("cannot start in the past")
    shot(page, "catalog-edit")

    page.goto(f"{live_server.url}/catalog/proposals/")
    page.click("text=Run discovery now")
    expect(page.locator(".messages")).to_contain_text("Discovery ran:")
    shot(page, "catalog-proposals")
