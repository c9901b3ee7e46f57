"""Catalog units counted right (issue 17 §2): sharing declared by DeviceClass config, MIG single-strategy slices,
capacity changing while a node is repartitioned, consumable-capacity devices."""

from __future__ import annotations

import pytest

from catalog.errors import OfferingValidationError
from catalog.models import Isolation, OfferingCapacity, UnitKind
from catalog.services.capacity import capacity_refresh
from catalog.services.discovery import _proposals, discovery_run
from catalog.services.matching import ClusterDevices, offering_warnings
from catalog.services.offerings import offering_create, offering_update
from tests.catalog.factories import OfferingFactory
from tests.inventory.factories import (
    ClusterFactory,
    DeviceClassFactory,
    DraDeviceFactory,
    NodeFactory,
    PluginDeviceFactory,
)

pytestmark = pytest.mark.django_db

GPU_SELECTOR = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


def device_class(cluster, name: str, config: list | None = None):
    spec = {"selectors": [{"cel": {"expression": GPU_SELECTOR}}]}
    if config is not None:
        spec["config"] = config
    return DeviceClassFactory(cluster=cluster, name=name, raw={"kind": "DeviceClass", "metadata": {"name": name},
                                                               "spec": spec})


def nvidia(sharing: dict | None = None, kind: str = "GpuConfig") -> list[dict]:
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind}
    if sharing is not None:
        parameters["sharing"] = sharing
    return [{"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}]


TIME_SLICING = nvidia({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
MPS = nvidia({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25,
                                               "defaultPinnedDeviceMemoryLimit": "16Gi"}})
OTHER_DRIVER = [{"opaque": {"driver": "gpu.example.com", "parameters": {"apiVersion": "x/v1", "kind": "Share"}}}]


@pytest.fixture
def cluster():
    cluster = ClusterFactory(name="c1")
    DraDeviceFactory(cluster=cluster, node_name="n1", device_name="gpu-0")
    return cluster


def proposals(cluster) -> dict[str, dict]:
    return _proposals(ClusterDevices(cluster))


def test_discovery_states_isolation_and_guarantee_from_the_class_config(cluster) -> None:
    device_class(cluster, "plain.nvidia.com")
    device_class(cluster, "ts.nvidia.com", TIME_SLICING)
    device_class(cluster, "mps.nvidia.com", MPS)
    device_class(cluster, "other.example.com", OTHER_DRIVER)
    device_class(cluster, "vfio.nvidia.com", nvidia(kind="VfioDeviceConfig"))
    found = {p["device_class_name"]: p for p in proposals(cluster).values()}
    assert found["plain.nvidia.com"]["isolation"] == Isolation.EXCLUSIVE
    assert found["vfio.nvidia.com"]["isolation"] == Isolation.EXCLUSIVE
    ts = found["ts.nvidia.com"]
    assert (ts["isolation"], ts["compute_share"], ts["fault_domain"]) == (
        Isolation.NONE, "1 card, time-sliced between the claim's pods (interval Long)",
        "shared with the claim's other pods (no memory isolation)")
    mps = found["mps.nvidia.com"]
    assert (mps["isolation"], mps["compute_share"], mps["memory_mib"]) == (
        Isolation.LIMITED, "MPS, up to 25% of the SMs per pod", 16 * 1024)
    # Config of a driver the portal does not understand: unknown isolation, never exclusive.
    assert found["other.example.com"]["isolation"] == Isolation.UNKNOWN


def test_an_exclusive_offering_on_a_sharing_class_is_refused(cluster, platform_admin) -> None:
    device_class(cluster, "ts.nvidia.com", TIME_SLICING)
    data = {"slug": "ts", "name": "TS", "unit_kind": "dra-device", "device_class_name": "ts.nvidia.com"}
    with pytest.raises(OfferingValidationError) as caught:
        offering_create(actor=platform_admin, data={**data, "isolation": "exclusive"})
    assert "declares time-sliced (interval Long)" in caught.value.errors["isolation"][0]
    # Without an explicit isolation the offering takes the one the config declares.
    assert offering_create(actor=platform_admin, data=data).isolation == Isolation.NONE
    device_class(cluster, "odd.example.com", OTHER_DRIVER)
    with pytest.raises(OfferingValidationError):
        offering_create(actor=platform_admin, data={**data, "slug": "odd", "device_class_name": "odd.example.com",
                                                    "isolation": "hardware"})


def test_an_existing_exclusive_offering_is_flagged_once_the_class_shares(cluster, platform_admin) -> None:
    offering = OfferingFactory(unit_kind=UnitKind.DRA_DEVICE, device_class_name="later.nvidia.com",
                               resource_name="", isolation=Isolation.EXCLUSIVE)
    device_class(cluster, "later.nvidia.com", MPS)
    assert any("declares MPS" in w for w in offering_warnings(offering))
    with pytest.raises(OfferingValidationError):
        offering_update(actor=platform_admin, offering_id=offering.pk, data={"name": "renamed"})


MIG_SINGLE_LABELS = {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
                     "nvidia.com/mig.config": "all-1g.10gb"}


def test_mig_single_slices_are_proposed_as_slices_selected_by_their_product_label() -> None:
    cluster = ClusterFactory(name="c2")
    NodeFactory(cluster=cluster, name="single-0", labels=MIG_SINGLE_LABELS)
    PluginDeviceFactory(cluster=cluster, node_name="single-0", mode="mig", mig_profile="1g.10gb",
                        unit="nvidia.com/gpu MIG-1g.10gb", model="NVIDIA-A100-SXM4-80GB", memory_mib=9728,
                        units_per_card=7, capacity=28, allocatable=28, in_use=0, cards=4.0)
    [proposal] = proposals(cluster).values()
    assert proposal["unit_kind"] == UnitKind.MIG
    assert proposal["name"] == "NVIDIA-A100-SXM4-80GB — MIG slice (1g.10gb, single strategy)"
    assert (proposal["resource_name"], proposal["node_selector"]) == (
        "nvidia.com/gpu", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"})
    assert (proposal["units_per_card"], proposal["memory_mib"], proposal["isolation"]) == (7, 9728, "hardware")
    # A whole-card offering on nvidia.com/gpu never sells these slices.
    whole = OfferingFactory(unit_kind=UnitKind.WHOLE, resource_name="nvidia.com/gpu", node_selector={})
    assert ClusterDevices(cluster).match(whole).devices == []


def test_capacity_is_changing_while_a_node_is_repartitioned(platform_admin) -> None:
    cluster = ClusterFactory(name="c3")
    NodeFactory(cluster=cluster, name="single-0", labels={**MIG_SINGLE_LABELS,
                                                          "nvidia.com/mig.config.state": "pending"})
    NodeFactory(cluster=cluster, name="single-1", labels={**MIG_SINGLE_LABELS,
                                                          "nvidia.com/mig.config.state": "success"})
    for name in ("single-0", "single-1"):
        PluginDeviceFactory(cluster=cluster, node_name=name, mode="mig", mig_profile="1g.10gb", capacity=28,
                            allocatable=28, in_use=0, units_per_card=7)
    discovery_run(actor=platform_admin)
    capacity_refresh(clusters=[cluster])
    [row] = OfferingCapacity.objects.filter(cluster=cluster)
    assert (row.total_units, row.capacity_changing) == (56, True)


def test_offering_pages_show_declared_sharing_and_capacity_changing(cluster, client, platform_admin) -> None:
    device_class(cluster, "ts.nvidia.com", TIME_SLICING)
    offering = OfferingFactory(slug="ts", unit_kind=UnitKind.DRA_DEVICE, device_class_name="ts.nvidia.com",
                               resource_name="", isolation=Isolation.EXCLUSIVE)
    OfferingCapacity.objects.create(offering=offering, cluster=cluster, computed_at="2026-01-01T00:00:00Z",
                                    capacity_changing=True, total_units=1, allocatable=1, free=1)
    client.force_login(platform_admin)
    page = client.get(offering.get_absolute_url()).content.decode()
    assert 'data-testid="declared-sharing">time-sliced (interval Long)' in page
    assert 'data-testid="isolation-problem"' in page  # the stored "exclusive" contradicts the class
    assert 'data-testid="capacity-changing"' in page
    assert 'data-testid="cluster-capacity-changing"' in page
    listing = client.get("/catalog/").content.decode()
    assert 'data-testid="capacity-changing"' in listing
