"""Catalog pages: permission matrix, htmx partials, filters and compatibility, compare, detail (capacity, plots,
snippets), curator writes through the services (create/edit, prices, lifecycle, proposals), the live selector
check, escaping and a query-count guard."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
import yaml
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEvent
from catalog.models import CapacitySample, Lifecycle, Offering, OfferingCapacity, OfferingPrice
from inventory.models import Cluster
from tests.catalog.factories import OfferingFactory, OfferingPriceFactory
from tests.inventory.factories import ClusterFactory, DeviceClassFactory, DraDeviceFactory

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
EVIL = "<script>alert(1)</script>"
TENANTS = ["member", "lead", "finance", "approver"]
L40S = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"'


def capacity(offering: Offering, cluster: Cluster, **figures: object) -> OfferingCapacity:
    defaults = {
        "total_units": 8,
        "allocatable": 8,
        "held": 3,
        "free": 5,
        "largest_placeable": 4,
        "feasible_nodes": 2,
        "cards": 8,
        "free_by_node": {"gpu-a": 4, "gpu-b": 1},
    }
    return OfferingCapacity.objects.create(
        offering=offering, cluster=cluster, computed_at=timezone.now(), **{**defaults, **figures}
    )


@pytest.fixture
def world() -> dict[str, object]:
    cluster = ClusterFactory(name="lab")
    h100 = OfferingFactory(
        slug="h100",
        name="H100 whole card",
        resource_name="nvidia.com/gpu",
        model="NVIDIA-H100",
        memory_mib=81920,
        cuda_max="12.8",
        compute_capability="9.0",
        architecture="hopper",
        node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        tolerations=[{"key": "dedicated", "value": "training", "effect": "NoSchedule"}],
    )
    t4 = OfferingFactory(
        slug="t4",
        name="T4 time-slice",
        unit_kind="time-slicing",
        resource_name="nvidia.com/gpu",
        memory_mib=15360,
        cuda_max="12.2",
        compute_capability="7.5",
        units_per_card=4,
    )
    l40s = OfferingFactory(
        slug="l40s",
        name="L40S DRA",
        unit_kind="dra-device",
        device_class_name="gpu.nvidia.com",
        cel_selector=L40S,
        memory_mib=49152,
        cuda_max="12.8",
        compute_capability="8.9",
    )
    OfferingPriceFactory(offering=h100, unit_price=Decimal("2.5"))
    OfferingPriceFactory(offering=t4, unit_price=Decimal("0.25"), currency="USD")
    capacity(h100, cluster)
    capacity(t4, cluster, total_units=32, allocatable=32, held=7, free=25, largest_placeable=16)
    proposal = OfferingFactory(
        slug="proposed-a100",
        name="A100 proposal",
        resource_name="nvidia.com/gpu",
        lifecycle=Lifecycle.PROPOSED,
        curated=False,
        discovery_key="dp:whole:x:y",
    )
    return {"cluster": cluster, "h100": h100, "t4": t4, "l40s": l40s, "proposal": proposal}


@pytest.fixture
def l40s_fleet() -> Cluster:
    """Two L40S and one A100 DRA device, and the mirrored DeviceClass that selects the driver's devices."""
    cluster = ClusterFactory(name="dra-lab")
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
    return cluster


def offering_data(**overrides: object) -> dict[str, object]:
    data = {
        "name": "H200 whole card",
        "slug": "h200",
        "description": "",
        "unit_kind": "whole",
        "model": "NVIDIA-H200",
        "memory_mib": "144384",
        "compute_share": "1 card",
        "isolation": "",
        "fault_domain": "own card",
        "units_per_card": "1",
        "request_sizes": "[1, 2, 4, 8]",
        "resource_name": "nvidia.com/gpu",
        "device_class_name": "",
        "cel_selector": "",
        "node_selector": "nvidia.com/gpu.product: NVIDIA-H200",
        "tolerations": "- {key: dedicated, value: training, effect: NoSchedule}",
        "driver_min": "550.54",
        "driver_max": "",
        "cuda_min": "",
        "cuda_max": "12.8",
        "compute_capability": "9.0",
        "architecture": "hopper",
        "cpu_architectures": '["amd64"]',
        "kubernetes_min": "",
        "kubernetes_max": "",
        "runtime_class": "",
        "owner_team": "platform",
        "health_criteria": "",
        "upgrade_window": "",
    }
    return {**data, **overrides}


def tenant_urls(world: dict[str, object]) -> list[str]:
    return [
        reverse("catalog:offering_list"),
        reverse("catalog:offering_compare") + "?o=h100&o=t4",
        world["h100"].get_absolute_url(),
        world["l40s"].get_absolute_url(),
    ]


def curator_get_urls(world: dict[str, object]) -> list[str]:
    return [
        reverse("catalog:offering_create"),
        reverse("catalog:offering_edit", kwargs={"slug": "h100"}),
        reverse("catalog:proposals"),
        reverse("catalog:selector_check") + "?unit_kind=whole&resource_name=nvidia.com/gpu",
    ]


def post_urls(world: dict[str, object]) -> list[str]:
    price = world["h100"].prices.get()
    return [
        reverse("catalog:offering_create"),
        reverse("catalog:offering_edit", kwargs={"slug": "h100"}),
        reverse("catalog:offering_lifecycle", kwargs={"slug": "h100"}),
        reverse("catalog:offering_price", kwargs={"slug": "h100"}),
        reverse("catalog:price_delete", kwargs={"pk": price.pk}),
        reverse("catalog:selector_check"),
        reverse("catalog:proposal_decide", kwargs={"pk": world["proposal"].pk}),
        reverse("catalog:discovery_run"),
    ]


# Permission matrix ------------------------------------------------------------------------------------------------


def test_anonymous_is_sent_to_login_everywhere(client: Client, world) -> None:
    for url in [*tenant_urls(world), *curator_get_urls(world)]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    for url in post_urls(world):
        response = client.post(url, {})
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    assert Offering.objects.count() == 4


@pytest.mark.parametrize("role", TENANTS)
def test_tenants_browse_but_cannot_curate(client: Client, world, role: str, request: pytest.FixtureRequest) -> None:
    client.force_login(request.getfixturevalue(role))
    for url in tenant_urls(world):
        assert client.get(url).status_code == 200, url
    for url in curator_get_urls(world):
        assert client.get(url).status_code == 403, url
    for url in post_urls(world):
        assert client.post(url, offering_data(decision="accept", lifecycle="retired")).status_code == 403, url
    assert Offering.objects.count() == 4
    assert not AuditEvent.objects.exists()
    assert Offering.objects.get(slug="proposed-a100").lifecycle == Lifecycle.PROPOSED


def test_platform_admin_reaches_every_page(client: Client, platform_admin: User, world) -> None:
    client.force_login(platform_admin)
    for url in [*tenant_urls(world), *curator_get_urls(world)]:
        assert client.get(url).status_code == 200, url
    for url in post_urls(world):
        assert client.post(url, {}).status_code in {200, 302}, url


def test_curator_group_without_superuser_can_curate(client: Client, db: None) -> None:
    from portal.tenancy.roles import Role
    from tests.conftest import make_user

    client.force_login(make_user("curator", Role.PLATFORM_ADMIN))  # permission granted to the group by migration
    assert client.get(reverse("catalog:offering_create")).status_code == 200


@pytest.mark.parametrize("name", ["catalog:offering_detail", "catalog:offering_edit"])
def test_unknown_slug_is_404(client: Client, platform_admin: User, name: str) -> None:
    client.force_login(platform_admin)
    assert client.get(reverse(name, kwargs={"slug": "no-such-offering"})).status_code == 404


@pytest.mark.parametrize("name", ["catalog:offering_lifecycle", "catalog:offering_price"])
def test_unknown_slug_post_is_404(client: Client, platform_admin: User, name: str) -> None:
    client.force_login(platform_admin)
    assert client.post(reverse(name, kwargs={"slug": "no-such-offering"}), {}).status_code == 404


def test_tenants_do_not_see_retired_or_proposed_offerings(client: Client, member: User, world) -> None:
    OfferingFactory(slug="old", resource_name="nvidia.com/gpu", lifecycle=Lifecycle.RETIRED)
    client.force_login(member)
    assert client.get(reverse("catalog:offering_detail", kwargs={"slug": "old"})).status_code == 404
    assert client.get(world["proposal"].get_absolute_url()).status_code == 404
    slugs = [row.offering.slug for row in client.get(reverse("catalog:offering_list")).context["rows"]]
    assert slugs == ["h100", "l40s", "t4"]


def test_catalog_is_the_first_nav_item_and_current(client: Client, member: User, world) -> None:
    client.force_login(member)
    html = client.get(world["h100"].get_absolute_url()).content.decode()
    nav = html[html.index('id="site-nav"') :]
    first = nav[nav.index("<a ") : nav.index("</a>")]
    assert f'href="{reverse("catalog:offering_list")}"' in first
    assert 'aria-current="page"' in first


# List, filters, htmx ------------------------------------------------------------------------------------------------


def test_htmx_gets_only_the_results_partial(client: Client, member: User, world) -> None:
    client.force_login(member)
    partial = client.get(reverse("catalog:offering_list"), {"q": "h100"}, headers=HTMX)
    assert b"<html" not in partial.content
    assert partial.content.decode().lstrip().startswith('<div id="results"')
    assert "HX-Request" in partial["Vary"]
    assert [r.offering.slug for r in partial.context["rows"]] == ["h100"]
    full = client.get(reverse("catalog:offering_list")).content.decode()
    assert "<html" in full
    assert 'id="results"' in full
    for attr in [
        'hx-get="/catalog/"',
        'hx-target="#results"',
        'hx-trigger="input delay:300ms, change"',
        'hx-push-url="true"',
        'name="requirement"',
        'action="/catalog/compare/"',
    ]:
        assert attr in full


def test_list_row_shows_price_capacity_and_compare_checkbox(client: Client, member: User, world) -> None:
    client.force_login(member)
    html = client.get(reverse("catalog:offering_list")).content.decode()
    row = re.search(r'<tr data-offering="h100".*?</tr>', html, re.S).group(0)
    assert 'name="o" value="h100"' in row
    assert "2.50 EUR" in row
    assert "80 GiB" in row
    assert re.search(r"<b class=\"has-free\">5</b> / 8", row)
    assert 'data-col="largest">4<' in row
    assert "0.25 USD" in html
    assert "New offering" not in html


def test_filters_narrow_the_list(client: Client, member: User, world) -> None:
    client.force_login(member)

    def slugs(**params: object) -> list[str]:
        return [r.offering.slug for r in client.get(reverse("catalog:offering_list"), params).context["rows"]]

    assert slugs(unit_kind="time-slicing") == ["t4"]
    assert slugs(memory_gib_min=40) == ["h100", "l40s"]
    assert slugs(isolation="none") == ["t4"]
    assert slugs(price_max="1") == ["t4"]
    assert slugs(available="on") == ["h100", "t4"]
    assert slugs(memory_gib_min="lots") == ["h100", "l40s", "t4"]  # an invalid field is ignored, not a 500


def test_requirement_marks_qualifying_offerings_first_and_explains_the_rest(
    client: Client, member: User, world
) -> None:
    client.force_login(member)
    response = client.get(reverse("catalog:offering_list"), {"requirement": "cuda 12.4, sm_80+"}, headers=HTMX)
    rows = response.context["rows"]
    assert [(r.offering.slug, r.verdict.qualifies) for r in rows] == [("h100", True), ("l40s", True), ("t4", False)]
    html = response.content.decode()
    h100 = re.search(r'<tr data-offering="h100".*?</tr>', html, re.S).group(0)
    assert 'data-qualifies="true"' in h100
    assert "qualifies" in h100
    t4 = re.search(r'<tr data-offering="t4".*?</tr>', html, re.S).group(0)
    assert 'data-qualifies="false"' in t4
    assert "driver supports CUDA up to 12.2, the image needs 12.4" in t4
    assert "compute capability 7.5 is below 8.0" in t4
    assert '<input type="hidden" name="requirement" value="cuda 12.4, sm_80+">' in html


def test_bad_requirement_shows_the_parsers_message(client: Client, member: User, world) -> None:
    client.force_login(member)
    response = client.get(reverse("catalog:offering_list"), {"requirement": "cuda banana"}, headers=HTMX)
    assert response.status_code == 200
    assert "&#x27;banana&#x27; is not a version" in response.content.decode()
    assert "data-requirement-error" in response.content.decode()


def test_curator_sees_new_offering_and_proposal_count(client: Client, platform_admin: User, world) -> None:
    client.force_login(platform_admin)
    html = client.get(reverse("catalog:offering_list")).content.decode()
    assert "New offering" in html
    assert "Proposals (1)" in html


def test_deprecated_offering_links_its_replacement(client: Client, member: User, world) -> None:
    Offering.objects.filter(pk=world["t4"].pk).update(
        lifecycle=Lifecycle.DEPRECATED, replacement=world["h100"], retire_on=dt.date(2099, 1, 1)
    )
    client.force_login(member)
    html = client.get(reverse("catalog:offering_list")).content.decode()
    t4 = re.search(r'<tr data-offering="t4".*?</tr>', html, re.S).group(0)
    assert 'data-lifecycle="deprecated"' in t4
    assert f'href="{world["h100"].get_absolute_url()}"' in t4
    assert "retires 2099-01-01" in t4
    detail = client.get(world["t4"].get_absolute_url()).content.decode()
    assert "data-deprecated" in detail
    assert "H100 whole card</a> instead" in detail


def test_list_query_count_does_not_grow_with_offerings(
    client: Client, member: User, django_assert_max_num_queries
) -> None:
    clusters = [ClusterFactory(name="east"), ClusterFactory(name="west")]
    replacement = OfferingFactory(slug="successor", resource_name="nvidia.com/gpu")
    for n in range(20):
        offering = OfferingFactory(
            slug=f"o-{n}",
            resource_name="nvidia.com/gpu",
            memory_mib=1024 * n,
            cuda_max="12.4",
            compute_capability="8.0",
            lifecycle=Lifecycle.DEPRECATED if n % 5 == 0 else Lifecycle.ACTIVE,
            replacement=replacement if n % 5 == 0 else None,
        )
        OfferingPriceFactory(offering=offering)
        for cluster in clusters:
            capacity(offering, cluster)
    client.force_login(member)
    client.get(reverse("catalog:offering_list"))  # warm the session
    with django_assert_max_num_queries(8):  # session, user, 2 permission lookups, offerings + 2 prefetches
        response = client.get(reverse("catalog:offering_list"), {"requirement": "cuda 12.4"})
    assert len(response.context["rows"]) == 21


# Compare ------------------------------------------------------------------------------------------------------------


def test_compare_shows_offerings_side_by_side(client: Client, member: User, world) -> None:
    client.force_login(member)
    response = client.get(reverse("catalog:offering_compare"), {"o": ["t4", "h100"], "requirement": "sm_80+"})
    assert response.status_code == 200
    html = response.content.decode()
    assert [c.offering.slug for c in response.context["columns"]] == ["t4", "h100"]
    assert 'data-columns="2"' in html
    for text in (
        "Time-slice replica",
        "Whole card",
        "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
        "dedicated=training:NoSchedule",
        "≤ 12.8",
        "2.50 EUR",
        "0.25 USD",
        "Largest placeable",
        "Fragmentation",
        "compute capability 7.5 is below 8.0",
    ):
        assert text in html, text


@pytest.mark.parametrize(
    ("slugs", "message"),
    [
        ([], "Select at least 2 offerings"),
        (["h100"], "Select at least 2 offerings"),
        (["h100", "h100"], "Select at least 2 offerings"),
        (["h100", "t4", "l40s", "h100x", "t4x"], "at most 4"),
        (["h100", "nope"], "Unknown offering: nope."),
        (["h100", "proposed-a100"], "Unknown offering: proposed-a100."),
    ],
)
def test_compare_rejects_bad_selections_clearly(client: Client, member: User, world, slugs, message) -> None:
    client.force_login(member)
    response = client.get(reverse("catalog:offering_compare"), {"o": slugs})
    assert response.status_code == 400
    assert message in response.content.decode()


# Detail: capacity, plots, snippets ------------------------------------------------------------------------------


def test_detail_shows_unit_price_history_and_capacity_per_cluster(client: Client, member: User, world) -> None:
    h100 = world["h100"]
    OfferingCapacity.objects.filter(offering=h100).update(
        stranded=1, fragmentation=0.2, contested=2, pending_pods=3, granted_quota=12, quota_capacity=8
    )
    client.force_login(member)
    response = client.get(h100.get_absolute_url())
    html = response.content.decode()
    assert response.context["price"].unit_price == Decimal("2.5")
    assert 'id="price-history"' in html
    assert 'data-price-state="current"' in html
    row = re.search(r'<tr data-cluster="lab">.*?</tr>', html, re.S).group(0)
    assert "either/or with other offerings on the same cards" in row
    assert "12 / 8" in row
    assert "1.50\N{MULTIPLICATION SIGN}" in row
    assert "20%" in row
    assert "Edit" not in re.search(r'<div class="page-head">.*?</div>', html, re.S).group(0)


def test_history_plot_is_server_side_svg(client: Client, member: User, world) -> None:
    h100, cluster = world["h100"], world["cluster"]
    client.force_login(member)
    html = client.get(h100.get_absolute_url()).content.decode()
    assert "No history yet" in html
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    for hours_ago, held in ((3, 1), (2, 4), (1, 6)):
        CapacitySample.objects.create(
            offering=h100,
            cluster=cluster,
            hour=now - dt.timedelta(hours=hours_ago),
            allocatable=8,
            held=held,
            free=8 - held,
            total_units=8,
        )
    response = client.get(h100.get_absolute_url())
    html = response.content.decode()
    assert "No history yet" not in html
    assert html.count('<polyline class="line line-') == 3
    assert "<svg" in html
    assert not re.search(r'(?:src|href)="[^"]*cdn', html, re.IGNORECASE)  # no asset from a CDN (the CSRF token may
    # contain the letters by chance)
    # The range links reload only the #history partial.
    partial = client.get(h100.get_absolute_url(), {"hours": 24}, headers=HTMX)
    assert b"<html" not in partial.content
    assert partial.content.decode().lstrip().startswith('<section id="history"')
    assert re.search(r'hx-get="\?hours=24"[^>]*aria-current="true">24 hours<', partial.content.decode())


def test_free_by_node_bars(client: Client, member: User, world) -> None:
    client.force_login(member)
    html = client.get(world["h100"].get_absolute_url()).content.decode()
    chart = re.search(r'<section class="card chart-card" id="free-by-node">.*?</section>', html, re.S).group(0)
    assert chart.count("<rect ") == 2
    assert "gpu-a: 4 free" in chart
    assert "gpu-b: 1 free" in chart


def test_device_plugin_snippet_and_no_dra(client: Client, member: User, world) -> None:
    client.force_login(member)
    response = client.get(world["h100"].get_absolute_url())
    snippets = response.context["snippets"]
    (pod,) = yaml.safe_load_all(snippets["extended"])
    spec = pod["spec"]
    assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["tolerations"] == [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    assert snippets["dra"] == ""
    html = response.content.decode()
    assert "DRA (ResourceClaims) is not how this unit is requested" in html
    assert 'data-copy-target="snippet-extended"' in html
    assert '<code id="snippet-extended">' in html
    assert "catalog.js" in html
    assert "<script>" not in html


def test_dra_snippet_claim_template_and_extended_resource_mapping(client: Client, member: User, world) -> None:
    client.force_login(member)
    response = client.get(world["l40s"].get_absolute_url())
    snippets = response.context["snippets"]
    template, pod = yaml.safe_load_all(snippets["dra"])
    assert template["apiVersion"] == "resource.k8s.io/v1"
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "accelerator",
            "exactly": {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": L40S}}], "count": 1},
        }
    ]
    assert pod["spec"]["resourceClaims"] == [{"name": "accelerator", "resourceClaimTemplateName": "l40s"}]
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "accelerator"}]}
    assert snippets["extended"] == ""
    assert "has no extendedResourceName" in response.content.decode()

    DeviceClassFactory(cluster=world["cluster"], name="gpu.nvidia.com", extended_resource_name="example.com/l40s")
    snippets = client.get(world["l40s"].get_absolute_url()).context["snippets"]
    (pod,) = yaml.safe_load_all(snippets["extended"])
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"example.com/l40s": 1}}
    assert "CEL selector is not applied" in snippets["extended_note"]


def test_dra_snippet_without_selector_has_no_selectors_key(client: Client, member: User) -> None:
    OfferingFactory(slug="any-gpu", unit_kind="dra-device", device_class_name="gpu.nvidia.com")
    client.force_login(member)
    snippets = client.get(reverse("catalog:offering_detail", kwargs={"slug": "any-gpu"})).context["snippets"]
    template, _pod = yaml.safe_load_all(snippets["dra"])
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "count": 1,
    }


# Escaping ---------------------------------------------------------------------------------------------------------


def test_hostile_text_is_escaped_everywhere(client: Client, member: User, platform_admin: User) -> None:
    cluster = ClusterFactory(name=EVIL)
    evil = OfferingFactory(
        slug="evil",
        name=EVIL,
        model=EVIL,
        description=EVIL,
        unit_kind="dra-device",
        device_class_name="gpu.nvidia.com",
        cel_selector=f'device.driver == "{EVIL}"',
        node_selector={"team": EVIL},
        tolerations=[{"key": EVIL, "operator": "Exists"}],
        owner_team=EVIL,
        compute_share=EVIL,
    )
    other = OfferingFactory(slug="other", resource_name="nvidia.com/gpu", lifecycle=Lifecycle.ACTIVE)
    Offering.objects.filter(pk=other.pk).update(lifecycle=Lifecycle.DEPRECATED, replacement=evil)
    OfferingPriceFactory(offering=evil, currency="EUR")
    capacity(evil, cluster, free_by_node={EVIL: 3, "ok-node": 1})
    CapacitySample.objects.create(offering=evil, cluster=cluster, hour=timezone.now(), allocatable=4, free=3)
    urls = [
        reverse("catalog:offering_list"),
        reverse("catalog:offering_list") + "?requirement=" + EVIL,
        reverse("catalog:offering_compare") + "?o=evil&o=other",
        reverse("catalog:offering_compare") + "?o=evil&o=" + EVIL,
        evil.get_absolute_url(),
    ]
    client.force_login(member)
    for url in urls:
        html = client.get(url).content.decode()
        assert EVIL not in html, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, url
    detail = client.get(evil.get_absolute_url())
    assert EVIL in detail.context["snippets"]["dra"]  # the YAML carries it; the page escapes it
    svg = re.search(
        r'<section class="card chart-card" id="free-by-node">.*?</section>', detail.content.decode(), re.S
    ).group(0)
    assert "&lt;script&gt;" in svg
    assert "<script" not in svg
    client.force_login(platform_admin)
    for url in (reverse("catalog:offering_edit", kwargs={"slug": "evil"}), reverse("catalog:proposals")):
        assert EVIL not in client.get(url).content.decode(), url
    check = client.post(reverse("catalog:selector_check"), {"unit_kind": "dra-device", "cel_selector": EVIL})
    assert EVIL not in check.content.decode()
    assert "&lt;script&gt;" in check.content.decode()


# Create / edit ------------------------------------------------------------------------------------------------------


def test_create_writes_the_offering_and_its_audit_event(client: Client, platform_admin: User) -> None:
    client.force_login(platform_admin)
    response = client.post(reverse("catalog:offering_create"), offering_data())
    assert response.status_code == 302
    offering = Offering.objects.get(slug="h200")
    assert response["Location"] == offering.get_absolute_url()
    assert offering.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H200"}  # YAML accepted
    assert offering.tolerations == [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]
    assert offering.request_sizes == [1, 2, 4, 8]
    assert offering.cpu_architectures == ["amd64"]
    assert offering.memory_mib == 144384
    assert offering.isolation == "exclusive"
    event = AuditEvent.objects.get(verb="offering.created")
    assert event.target_id == str(offering.pk)
    assert event.actor_id == platform_admin.pk
    page = client.get(response["Location"]).content.decode()
    assert "Created offering H200 whole card." in page


def test_create_with_invalid_cel_shows_the_position_and_writes_nothing(client: Client, platform_admin: User) -> None:
    client.force_login(platform_admin)
    data = offering_data(
        unit_kind="dra-device", resource_name="", device_class_name="gpu.nvidia.com", cel_selector="device.driver == "
    )
    response = client.post(reverse("catalog:offering_create"), data)
    assert response.status_code == 200
    html = response.content.decode()
    assert "line 1, column 18" in html
    errors = response.context["form"].errors["cel_selector"]
    assert any("^" in e.split("\n")[-1] for e in errors)  # the caret line
    assert "Nothing was saved" in html
    assert not Offering.objects.exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("node_selector", "a: [", "Not valid JSON or YAML"),
        ("node_selector", "[1, 2]", "Expected a mapping"),
        ("tolerations", "{key: x}", "Expected a list"),
        ("request_sizes", "a: &x [1]\nb: *x", "anchors and aliases"),
        ("node_selector", "a: " + "[" * 100 + "]" * 100, "nested deeper"),
        ("node_selector", "a: x\na: y", "duplicate key"),
        ("node_selector", "a: x\n---\nb: y", "one document"),
        ("request_sizes", "[0, -1]", "positive integers"),
        ("slug", "Not A Slug", "lowercase letters"),
        ("cuda_max", "twelve", "is not a version"),
    ],
)
def test_create_field_errors(client: Client, platform_admin: User, field: str, value: str, message: str) -> None:
    client.force_login(platform_admin)
    response = client.post(reverse("catalog:offering_create"), offering_data(**{field: value}))
    assert response.status_code == 200
    assert any(message in error for error in response.context["form"].errors[field]), response.context["form"].errors
    assert not Offering.objects.exists()


def test_create_form_wires_the_live_selector_check(client: Client, platform_admin: User) -> None:
    client.force_login(platform_admin)
    html = client.get(reverse("catalog:offering_create")).content.decode()
    cel = re.search(r"<textarea[^>]*id=\"id_cel_selector\"[^>]*>", html).group(0)
    assert f'hx-post="{reverse("catalog:selector_check")}"' in cel
    assert 'hx-trigger="input changed delay:400ms"' in cel
    assert 'hx-target="#selector-check"' in cel
    assert "#id_unit_kind" in cel
    assert "#id_node_selector" in cel
    assert 'id="selector-check"' in html
    assert 'hx-trigger="load"' in html


def test_edit_updates_through_the_service(client: Client, platform_admin: User, world) -> None:
    client.force_login(platform_admin)
    url = reverse("catalog:offering_edit", kwargs={"slug": "h100"})
    form = client.get(url).context["form"]
    data = {name: form[name].value() for name in form.fields}
    data = {k: ("" if v is None else v) for k, v in data.items()}
    for name in ("node_selector", "tolerations", "request_sizes", "cpu_architectures"):
        data[name] = form.fields[name].prepare_value(data[name])
    data.update(name="H100 (renamed)", memory_mib="81559")
    response = client.post(url, data)
    assert response.status_code == 302, response.context["form"].errors if response.context else ""
    h100 = Offering.objects.get(slug="h100")
    assert h100.name == "H100 (renamed)"
    assert h100.memory_mib == 81559
    assert h100.node_selector == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert h100.tolerations == world["h100"].tolerations
    event = AuditEvent.objects.get(verb="offering.updated")
    assert set(event.data["changes"]) == {"name", "memory_mib"}


def test_edit_with_invalid_cel_changes_nothing(client: Client, platform_admin: User, world) -> None:
    client.force_login(platform_admin)
    data = offering_data(
        slug="l40s",
        name="L40S DRA",
        unit_kind="dra-device",
        resource_name="",
        device_class_name="gpu.nvidia.com",
        cel_selector="device.attributes[",
    )
    response = client.post(reverse("catalog:offering_edit", kwargs={"slug": "l40s"}), data)
    assert response.status_code == 200
    assert "line 1, column" in response.content.decode()
    assert Offering.objects.get(slug="l40s").cel_selector == L40S
    assert not AuditEvent.objects.exists()


# Prices -----------------------------------------------------------------------------------------------------------


def _local(moment: dt.datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%dT%H:%M")


def test_add_price_closes_the_current_one(client: Client, platform_admin: User, world) -> None:
    client.force_login(platform_admin)
    start = timezone.now() + dt.timedelta(days=3)
    response = client.post(
        reverse("catalog:offering_price", kwargs={"slug": "h100"}),
        {"unit_price": "3.10", "currency": "eur", "effective_from": _local(start)},
    )
    assert response.status_code == 302
    prices = list(OfferingPrice.objects.filter(offering=world["h100"]).order_by("effective_from"))
    assert [p.unit_price for p in prices] == [Decimal("2.5"), Decimal("3.10")]
    assert prices[0].effective_to == prices[1].effective_from
    assert prices[1].currency == "EUR"
    assert AuditEvent.objects.filter(verb="price.set").count() == 1


def test_price_in_the_past_is_refused_inline(client: Client, platform_admin: User, world) -> None:
    client.force_login(platform_admin)
    past = timezone.now() - dt.timedelta(days=2)
    response = client.post(
        reverse("catalog:offering_price", kwargs={"slug": "h100"}),
        {"unit_price": "3", "currency": "EUR", "effective_from": _local(past)},
        headers=HTMX,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html
    assert html.lstrip().startswith('<section id="prices"')
    assert "cannot start in the past" in html
    assert OfferingPrice.objects.filter(offering=world["h100"]).count() == 1
    assert not AuditEvent.objects.exists()


def test_overlapping_price_is_refused_and_nothing_written(client: Client, platform_admin: User, world) -> None:
    h100 = world["h100"]
    OfferingPriceFactory(offering=h100, unit_price=Decimal(4), effective_from=timezone.now() + dt.timedelta(days=10))
    OfferingPrice.objects.filter(offering=h100, unit_price=Decimal("2.5")).update(
        effective_to=timezone.now() + dt.timedelta(days=10)
    )
    before = list(OfferingPrice.objects.filter(offering=h100).order_by("pk").values())
    client.force_login(platform_admin)
    response = client.post(
        reverse("catalog:offering_price", kwargs={"slug": "h100"}),
        {"unit_price": "3", "currency": "EUR", "effective_from": _local(timezone.now() + dt.timedelta(days=5))},
    )
    assert response.status_code == 200
    assert "<html" in response.content.decode()  # without htmx: the whole edit page with the inline error
    assert "Overlaps the price period starting" in response.context["price_form"].errors["effective_from"][0]
    assert list(OfferingPrice.objects.filter(offering=h100).order_by("pk").values()) == before


def test_htmx_price_success_redirects_the_client(client: Client, platform_admin: User, world) -> None:
    client.force_login(platform_admin)
    response = client.post(
        reverse("catalog:offering_price", kwargs={"slug": "t4"}), {"unit_price": "0.3", "currency": "USD"}, headers=HTMX
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("catalog:offering_edit", kwargs={"slug": "t4"})
    assert OfferingPrice.objects.filter(offering=world["t4"]).count() == 2


def test_only_scheduled_prices_can_be_deleted(client: Client, platform_admin: User, world) -> None:
    h100 = world["h100"]
    current = h100.prices.get()
    future = OfferingPriceFactory(
        offering=h100, unit_price=Decimal(9), effective_from=timezone.now() + dt.timedelta(days=5)
    )
    client.force_login(platform_admin)
    edit = client.get(reverse("catalog:offering_edit", kwargs={"slug": "h100"})).content.decode()
    assert reverse("catalog:price_delete", kwargs={"pk": future.pk}) in edit
    assert reverse("catalog:price_delete", kwargs={"pk": current.pk}) not in edit
    response = client.post(reverse("catalog:price_delete", kwargs={"pk": current.pk}), follow=True)
    assert "Only a price that has not started yet can be deleted" in response.content.decode()
    assert OfferingPrice.objects.filter(pk=current.pk).exists()
    client.post(reverse("catalog:price_delete", kwargs={"pk": future.pk}))
    assert not OfferingPrice.objects.filter(pk=future.pk).exists()
    assert AuditEvent.objects.filter(verb="price.deleted").count() == 1


# Lifecycle ---------------------------------------------------------------------------------------------------------


def test_deprecating_needs_a_replacement(client: Client, platform_admin: User, world) -> None:
    client.force_login(platform_admin)
    url = reverse("catalog:offering_lifecycle", kwargs={"slug": "t4"})
    response = client.post(url, {"lifecycle": "deprecated"}, headers=HTMX)
    assert response.status_code == 200
    assert response.content.decode().lstrip().startswith('<section id="lifecycle"')
    assert "needs a replacement" in response.content.decode()
    yesterday = timezone.localdate() - dt.timedelta(days=1)
    response = client.post(
        url, {"lifecycle": "deprecated", "replacement": world["h100"].pk, "retire_on": yesterday.isoformat()}
    )
    assert "is in the past" in response.content.decode()
    assert Offering.objects.get(slug="t4").lifecycle == Lifecycle.ACTIVE
    response = client.post(url, {"lifecycle": "deprecated", "replacement": world["h100"].pk, "retire_on": "2099-01-01"})
    assert response.status_code == 302
    t4 = Offering.objects.get(slug="t4")
    assert (t4.lifecycle, t4.replacement_id, t4.retire_on) == (
        Lifecycle.DEPRECATED,
        world["h100"].pk,
        dt.date(2099, 1, 1),
    )
    assert AuditEvent.objects.filter(verb="offering.lifecycle_changed").count() == 1


# Live selector check ---------------------------------------------------------------------------------------------


def test_selector_check_counts_matching_devices(client: Client, platform_admin: User, l40s_fleet) -> None:
    client.force_login(platform_admin)
    url = reverse("catalog:selector_check")
    base = {"unit_kind": "dra-device", "device_class_name": "gpu.nvidia.com", "resource_name": "", "node_selector": ""}
    html = client.post(url, {**base, "cel_selector": L40S}, headers=HTMX).content.decode()
    assert "<html" not in html
    assert "matches 2 devices on 2 nodes</b> (in 1 cluster)" in html
    html = client.post(url, {**base, "cel_selector": ""}).content.decode()
    assert "matches 3 devices on 3 nodes" in html
    html = client.get(url, {**base, "cel_selector": L40S.replace("L40S", "A100-SXM4-80GB")}).content.decode()
    assert "matches 1 device on 1 node</b>" in html
    html = client.post(url, {**base, "cel_selector": L40S.replace("L40S", "H100")}).content.decode()
    assert "Matches no device." in html
    assert 'data-check="warning"' in html
    html = client.post(url, {**base, "cel_selector": "device.driver == "}).content.decode()
    assert 'data-check="error"' in html
    assert re.search(r'<pre class="cel-error">line 1, column 18: .*\ndevice.driver == \n {17}\^</pre>', html, re.S)
    html = client.post(url, {**base, "cel_selector": L40S, "node_selector": "a: ["}).content.decode()
    assert 'data-check="invalid"' in html
    assert "Not valid JSON or YAML" in html
    html = client.post(url, {"unit_kind": ""}).content.decode()
    assert 'data-check="idle"' in html


# Proposals ---------------------------------------------------------------------------------------------------------


def test_proposals_accept_and_dismiss(client: Client, platform_admin: User, world) -> None:
    other = OfferingFactory(
        slug="proposed-t4",
        resource_name="nvidia.com/gpu",
        lifecycle=Lifecycle.PROPOSED,
        curated=False,
        discovery_key="dp:x",
    )
    client.force_login(platform_admin)
    html = client.get(reverse("catalog:proposals")).content.decode()
    assert 'data-offering="proposed-a100"' in html
    assert 'data-offering="proposed-t4"' in html
    assert 'data-offering="h100"' not in html
    response = client.post(
        reverse("catalog:proposal_decide", kwargs={"pk": world["proposal"].pk}), {"decision": "accept"}, follow=True
    )
    assert "Accepted A100 proposal." in response.content.decode()
    client.post(reverse("catalog:proposal_decide", kwargs={"pk": other.pk}), {"decision": "dismiss"})
    assert Offering.objects.get(slug="proposed-a100").lifecycle == Lifecycle.ACTIVE
    assert Offering.objects.get(slug="proposed-t4").lifecycle == Lifecycle.DISMISSED
    again = client.post(
        reverse("catalog:proposal_decide", kwargs={"pk": other.pk}), {"decision": "accept"}, follow=True
    )
    assert "is not a proposal" in again.content.decode()
    assert Offering.objects.get(slug="proposed-t4").lifecycle == Lifecycle.DISMISSED
    assert client.get(reverse("catalog:proposal_decide", kwargs={"pk": other.pk})).status_code == 405


def test_run_discovery_proposes_from_the_inventory(client: Client, platform_admin: User, l40s_fleet) -> None:
    client.force_login(platform_admin)
    response = client.post(reverse("catalog:discovery_run"), follow=True)
    html = response.content.decode()
    assert "Discovery ran: 2 new" in html
    assert Offering.objects.filter(lifecycle=Lifecycle.PROPOSED).count() == 2
    assert "NVIDIA L40S" in html
