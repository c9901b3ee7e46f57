"""REST API of the catalog: reads for everyone signed in, writes for curators, clear 400s that change nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import AuditEvent
from catalog.models import CapacitySample, Lifecycle, Offering, OfferingCapacity, OfferingPrice
from inventory.models import Device, DeviceClass
from tests.catalog.factories import OfferingFactory, OfferingPriceFactory
from tests.inventory.factories import ClusterFactory

pytestmark = pytest.mark.django_db

BASE = "/api/v1/catalog"


def _client(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def _capacity(offering: Offering, cluster, **values) -> OfferingCapacity:
    return OfferingCapacity.objects.create(offering=offering, cluster=cluster, computed_at=timezone.now(), **values)


def test_list_shows_capacity_prices_and_hides_proposals_from_tenants(member, platform_admin) -> None:
    cluster_a, cluster_b = ClusterFactory(name="a"), ClusterFactory(name="b")
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu", memory_mib=81559)
    OfferingPriceFactory(offering=offering)
    _capacity(offering, cluster_a, total_units=16, allocatable=15, held=12, free=3, largest_placeable=3, stranded=3)
    _capacity(offering, cluster_b, total_units=8, allocatable=8, held=0, free=8, largest_placeable=8)
    OfferingFactory(slug="proposal", resource_name="nvidia.com/gpu", lifecycle=Lifecycle.PROPOSED)

    response = _client(member).get(f"{BASE}/offerings/")
    assert response.status_code == 200
    (row,) = response.json()["results"]
    assert row["slug"] == "h100"
    assert row["capacity"]["free"] == 11
    assert row["capacity"]["largest_placeable"] == 8
    assert row["capacity"]["fragmentation"] == pytest.approx(3 / 11, abs=1e-4)
    assert [c["cluster"]["name"] for c in row["clusters"]] == ["a", "b"]
    assert row["current_price"]["currency"] == "EUR"
    assert row["current_price"]["unit_price"] == "2.5000"
    # Tenants cannot widen the list; curators can.
    assert len(_client(member).get(f"{BASE}/offerings/?all=1").json()["results"]) == 1
    assert len(_client(platform_admin).get(f"{BASE}/offerings/?all=1").json()["results"]) == 2


def test_capacity_history_endpoint(member) -> None:
    cluster = ClusterFactory(name="a")
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    for hours_ago, free in ((2, 5), (1, 3), (500, 9)):
        CapacitySample.objects.create(offering=offering, cluster=cluster, hour=now - dt.timedelta(hours=hours_ago),
                                      free=free)
    response = _client(member).get(f"{BASE}/offerings/{offering.pk}/capacity-history/?hours=48")
    assert response.status_code == 200
    assert [s["free"] for s in response.json()] == [5, 3]
    assert _client(member).get(f"{BASE}/offerings/{offering.pk}/capacity-history/?hours=x").status_code == 400


def test_compatibility_endpoint(member) -> None:
    OfferingFactory(slug="h100", name="H100", resource_name="nvidia.com/gpu", cuda_max="12.4",
                    compute_capability="9.0")
    OfferingFactory(slug="t4", name="T4", resource_name="nvidia.com/gpu", cuda_max="12.2", compute_capability="7.5")
    response = _client(member).get(f"{BASE}/compatibility/", {"requirement": "cuda 12.4, sm_80+"})
    assert response.status_code == 200
    body = response.json()
    verdicts = {v["slug"]: v for v in body["offerings"]}
    assert verdicts["h100"]["qualifies"]
    assert not verdicts["t4"]["qualifies"]
    assert "driver supports CUDA up to 12.2, the image needs 12.4" in verdicts["t4"]["reasons"]
    bad = _client(member).get(f"{BASE}/compatibility/", {"requirement": "gimme gpus"})
    assert bad.status_code == 400
    assert "Not understood" in bad.json()["requirement"][0]


def test_writes_need_the_curate_permission(member, finance) -> None:
    payload = {"slug": "x", "name": "X", "unit_kind": "whole", "resource_name": "nvidia.com/gpu"}
    for user in (member, finance):
        assert _client(user).post(f"{BASE}/offerings/", payload, format="json").status_code == 403
    assert _client().post(f"{BASE}/offerings/", payload, format="json").status_code in (401, 403)
    assert not Offering.objects.exists()


def test_curator_creates_updates_and_changes_lifecycle(platform_admin) -> None:
    client = _client(platform_admin)
    created = client.post(f"{BASE}/offerings/", {
        "slug": "l40s", "name": "L40S", "unit_kind": "dra-device", "device_class_name": "gpu.nvidia.com",
        "cel_selector": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'",
    }, format="json")
    assert created.status_code == 201, created.content
    # No L40S in any cluster: saved, with a warning rather than an error.
    assert created.json()["warnings"] == ["The offering matches no device in any cluster right now."]
    pk = created.json()["id"]
    patched = client.patch(f"{BASE}/offerings/{pk}/", {"memory_mib": 46068}, format="json")
    assert patched.status_code == 200
    assert patched.json()["memory_mib"] == 46068
    other = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    lifecycle = client.post(f"{BASE}/offerings/{pk}/lifecycle/", {
        "lifecycle": "deprecated", "replacement": other.pk,
        "retire_on": (timezone.localdate() + dt.timedelta(days=60)).isoformat()}, format="json")
    assert lifecycle.status_code == 200
    assert lifecycle.json()["replacement"] == "h100"
    assert list(AuditEvent.objects.order_by("id").values_list("verb", flat=True)) == [
        "offering.created", "offering.updated", "offering.lifecycle_changed"]


def test_retiring_an_offering_answers_with_it_even_though_lists_hide_retired_ones(platform_admin) -> None:
    """Found by the schema fuzzer: the answer re-read the offering through the list's filters, which hide retired
    offerings (and other unit kinds under ?unit_kind=), so retiring one was a 500."""
    client = _client(platform_admin)
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    retired = client.post(f"{BASE}/offerings/{offering.pk}/lifecycle/?unit_kind=whole", {"lifecycle": "retired"},
                          format="json")
    assert retired.status_code == 200, retired.content
    assert retired.json()["lifecycle"] == "retired"


def test_bad_input_is_a_400_with_field_errors_and_changes_nothing(platform_admin) -> None:
    client = _client(platform_admin)
    bad_cel = client.post(f"{BASE}/offerings/", {
        "slug": "l40s", "name": "L40S", "unit_kind": "dra-device", "device_class_name": "gpu.nvidia.com",
        "cel_selector": "device.attributes[\"gpu.nvidia.com\"].productName ==",
    }, format="json")
    assert bad_cel.status_code == 400
    assert "cel_selector" in bad_cel.json()
    shape = client.post(f"{BASE}/offerings/", {"slug": "x", "unit_kind": "warp-drive"}, format="json")
    assert shape.status_code == 400
    assert "unit_kind" in shape.json()
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    past = client.post(f"{BASE}/offerings/{offering.pk}/lifecycle/", {
        "lifecycle": "retired", "retire_on": "2020-01-01"}, format="json")
    assert past.status_code == 400
    assert "retire_on" in past.json()
    price = client.post(f"{BASE}/offerings/{offering.pk}/prices/", {
        "unit_price": "1.5", "currency": "EUR",
        "effective_from": (timezone.now() - dt.timedelta(days=2)).isoformat()}, format="json")
    assert price.status_code == 400
    assert "effective_from" in price.json()
    garbage = client.post(f"{BASE}/offerings/", "[1, 2", content_type="application/json")
    assert garbage.status_code == 400
    assert Offering.objects.count() == 1
    assert not OfferingPrice.objects.exists()
    assert not AuditEvent.objects.exists()


def test_prices_action(platform_admin) -> None:
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    response = _client(platform_admin).post(f"{BASE}/offerings/{offering.pk}/prices/",
                                            {"unit_price": "2.75", "currency": "USD"}, format="json")
    assert response.status_code == 201
    assert response.json()["unit_price"] == "2.7500"


def test_selector_check_counts_matches_and_reports_errors(platform_admin) -> None:
    cluster = ClusterFactory(name="a")
    DeviceClass.objects.create(cluster=cluster, uid="dc", name="gpu.nvidia.com", resource_version="1", raw={
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}})
    for n, product in enumerate(["NVIDIA L40S", "NVIDIA L40S", "NVIDIA H100"]):
        Device.objects.create(cluster=cluster, key=f"gpu.nvidia.com/node-{n}/gpu-0", path="dra", mode="dra-device",
                              unit="gpu.nvidia.com gpu", node_name=f"node-{n}", driver="gpu.nvidia.com",
                              attributes={"type": {"string": "gpu"}, "productName": {"string": product}},
                              capacities={"memory": {"value": "48Gi"}}, capacity=1, allocatable=1, free=1)
    client = _client(platform_admin)
    payload = {"unit_kind": "dra-device", "device_class_name": "gpu.nvidia.com",
               "cel_selector": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA L40S'"}
    body = client.post(f"{BASE}/selector-check/", payload, format="json").json()
    assert (body["devices"], body["nodes"], body["clusters"], body["warning"]) == (2, 2, 1, "")
    none = client.post(f"{BASE}/selector-check/", {**payload, "cel_selector": "device.driver == 'x'"},
                       format="json").json()
    assert none["devices"] == 0
    assert none["warning"]
    missing = client.post(f"{BASE}/selector-check/", {
        **payload, "cel_selector": "device.attributes['gpu.nvidia.com'].nosuch == 1"}, format="json").json()
    assert missing["selector_errors"] == 3
    assert missing["devices"] == 0
    broken = client.post(f"{BASE}/selector-check/", {**payload, "cel_selector": "device.driver ="}, format="json")
    assert broken.status_code == 400
    assert "^" in broken.json()["error"]


def test_openapi_documents_the_catalog(member) -> None:
    schema = _client(member).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    for path in ("/api/v1/catalog/offerings/", "/api/v1/catalog/offerings/{id}/capacity-history/",
                 "/api/v1/catalog/compatibility/", "/api/v1/catalog/offerings/{id}/prices/"):
        assert path in paths


def test_home_is_the_catalog(client, member) -> None:
    client.force_login(member)
    response = client.get("/")
    assert response.status_code == 302
    assert response.url == "/catalog/"
