"""Every page and API that shows an offering's capacity, rendered for the demo's offerings: free + held + unknown =
allocatable everywhere, fragmentation = 1 - largest placeable / free (with the definition on the page), and one
physical capacity per offering and cluster on the offering page, the quota request (page and API), the approval
queue and the oversubscription page — also after the inventory changed and before capacity was recomputed."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models import F
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from catalog.models import Offering
from catalog.services.capacity import capacity_refresh
from inventory.models import Device
from portal.quota.services import quota_request_create
from portal.tenancy.roles import Role
from tests.catalog.factories import OfferingFactory
from tests.conftest import make_user
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow

IDENTITY = ("free", "held", "unknown", "allocatable")
MINUS = "\N{MINUS SIGN}"


@pytest.fixture
def demo_catalog(live_demo) -> dict[str, Any]:
    _sim, cluster = live_demo
    call_command("catalog_seed", verbosity=0)
    # The demo's H100 DRA pools: one mid-update (a tainted device), one incomplete (unknown units).
    OfferingFactory(slug="h100-dra", unit_kind="dra-device", device_class_name="gpu.nvidia.com",
                    cel_selector='device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"')
    capacity_refresh(clusters=[cluster])
    lead = make_user("lead", Role.TENANT_LEAD, Role.TENANT_MEMBER)
    give_namespaces(lead, cluster, "ml-research", tenant_slug="ml-research", role="lead")
    approver = make_user("approver", Role.APPROVER)
    return {"cluster": cluster, "lead": lead, "approver": approver,
            "offerings": list(Offering.objects.browsable().order_by("slug"))}


def _attr_numbers(fragment: str, attribute: str) -> list[int]:
    return [int(v) for v in re.findall(rf'{attribute}="(\d+)"', fragment)]


def _figures(fragment: str) -> dict[str, float]:
    """`data-figure="name"` cells: the number in data-value (fragmentation) or the first number of the text."""
    out: dict[str, float] = {}
    for name, attrs, text, _tag in re.findall(r'data-figure="([a-z_]+)"([^>]*)>(.*?)</(td|b|span)>', fragment, re.S):
        value = re.search(r'data-value="([0-9.]+)"', attrs)
        out[name] = float(value.group(1)) if value else int(re.search(r"\d+", re.sub(r"<[^>]+>", "", text)).group(0))
    return out


def _check_identity(figures: dict[str, float], where: str) -> None:
    assert figures["free"] + figures["held"] + figures["unknown"] == figures["allocatable"], (where, figures)
    if "fragmentation" in figures:
        free, largest = figures["free"], figures["largest_placeable"]
        expected = round(1 - largest / free, 4) if free else 0.0
        assert figures["fragmentation"] == pytest.approx(expected, abs=1e-4), (where, figures)


def test_every_page_and_api_shows_numbers_that_add_up_and_agree(demo_catalog) -> None:
    cluster, offerings = demo_catalog["cluster"], demo_catalog["offerings"]
    member = make_user("member", Role.TENANT_MEMBER)
    browser = Client()
    browser.force_login(member)
    api = APIClient()
    api.force_authenticate(member)
    seen: dict[str, dict[str, float]] = {}

    listing = browser.get(reverse("catalog:offering_list")).content.decode()
    api_rows = {row["slug"]: row for row in api.get("/api/v1/catalog/offerings/?page_size=100").json()["results"]}
    for offering in offerings:
        # Offering list: free / allocatable, with held and unknown in the cell's attributes and title.
        row = re.search(rf'<tr data-offering="{offering.slug}".*?</tr>', listing, re.S).group(0)
        cell = re.search(r'<td class="num" data-col="free"([^>]*)>', row).group(1)
        listed = {name: int(re.search(rf'data-{name}="(\d+)"', cell).group(1)) for name in IDENTITY}
        listed["largest_placeable"] = int(re.search(r'data-col="largest">(\d+)<', row).group(1))
        _check_identity(listed, f"list {offering.slug}")

        # Detail: the summary (over clusters) and each cluster's row, with the definitions on the page.
        page = browser.get(offering.get_absolute_url()).content.decode()
        summary = re.search(r"<div class=\"counts card\" data-capacity>(.*?)</div>", page, re.S).group(1)
        detail = _figures(summary)
        _check_identity(detail, f"detail {offering.slug}")
        assert "data-capacity-definitions" in page
        assert f"1 {MINUS} largest placeable ÷ free" in htmllib.unescape(page)
        if detail["free"]:
            assert f"= 1 {MINUS} {detail['largest_placeable']} ÷ {detail['free']}" in htmllib.unescape(summary)
        cluster_row = re.search(rf'<tr data-cluster="{cluster.name}">(.*?)</tr>', page, re.S).group(1)
        per_cluster = _figures(cluster_row)
        _check_identity(per_cluster, f"detail row {offering.slug}")
        physical = _attr_numbers(cluster_row, "data-physical")

        # API: totals and the cluster row.
        capacity = api_rows[offering.slug]["capacity"]
        _check_identity(capacity, f"api {offering.slug}")
        [api_cluster] = api_rows[offering.slug]["clusters"]
        _check_identity(api_cluster, f"api cluster {offering.slug}")
        assert [api_cluster["quota_capacity"]] == physical

        # Every page shows the same numbers.
        for name in (*IDENTITY, "largest_placeable"):
            assert listed[name] == detail[name] == per_cluster[name] == capacity[name] == api_cluster[name], (
                offering.slug, name)
        assert detail["fragmentation"] == capacity["fragmentation"] == pytest.approx(api_cluster["fragmentation"])
        seen[offering.slug] = {**detail, "physical": physical[0]}

    # Compare, four at a time.
    slugs = [o.slug for o in offerings]
    for start in range(0, len(slugs), 4):
        group = slugs[start:start + 4] if len(slugs[start:start + 4]) >= 2 else slugs[-2:]
        page = browser.get(reverse("catalog:offering_compare"), {"o": group}).content.decode()
        assert "data-capacity-definitions" in page
        for slug in group:
            cells = "".join(re.findall(rf'<td[^>]*data-figure="[a-z_]+" data-offering="{slug}".*?</td>', page, re.S))
            compared = _figures(cells)
            _check_identity(compared, f"compare {slug}")
            for name, value in compared.items():
                if name in seen[slug]:
                    assert value == pytest.approx(seen[slug][name]), (slug, name)

    # Physical capacity: the same number on the quota request (page and API), the queue and the oversubscription page.
    _check_physical_capacity(demo_catalog, seen)

    # The inventory changes (a card turns unhealthy) and capacity is not recomputed yet: the pages still agree.
    Device.objects.filter(cluster=cluster, path="device-plugin", resource_name="nvidia.com/gpu").update(
        allocatable=F("allocatable") - 1)
    _check_physical_capacity(demo_catalog, seen)


def _check_physical_capacity(demo_catalog: dict[str, Any], seen: dict[str, dict[str, float]]) -> None:
    cluster, lead, approver = demo_catalog["cluster"], demo_catalog["lead"], demo_catalog["approver"]
    reviewer = Client()
    reviewer.force_login(approver)
    api = APIClient()
    api.force_authenticate(approver)
    oversubscription = reviewer.get(reverse("portal:oversubscription")).content.decode()
    queue = reviewer.get(reverse("portal:quota_queue")).content.decode()
    for offering in demo_catalog["offerings"]:
        request = quota_request_create(actor=lead, cluster_id=cluster.pk, namespace="ml-research",
                                       offering_id=offering.pk, units=1, justification="capacity check")
        physical = seen[offering.slug]["physical"]
        context = api.get(f"/api/v1/quota-requests/{request.pk}/").json()["context"]
        assert context["physical_capacity"] == physical, offering.slug
        page = reviewer.get(reverse("portal:quota_request_detail", args=[request.pk])).content.decode()
        assert _attr_numbers(page, "data-physical") == [physical], offering.slug
        row = re.search(rf'<tr data-offering="{offering.slug}" data-cluster="{cluster.name}">.*?</tr>',
                        oversubscription, re.S)
        if row:  # offerings whose quota key has granted quota
            assert _attr_numbers(row.group(0), "data-physical") == [physical], offering.slug
        request.delete()
    assert set(_attr_numbers(queue, "data-physical")) <= {v["physical"] for v in seen.values()}
