"""The capacity recomputation remembers selector outcomes by each device's selector hash: unchanged devices are
neither read nor evaluated again, a device whose attributes changed is, and the figures stay those of a fresh
evaluation."""

from __future__ import annotations

from typing import Any

import pytest

from catalog.models import OfferingCapacity
from catalog.services import matching
from catalog.services.capacity import capacity_refresh
from catalog.services.matching import SELECTOR_OUTCOMES, ClusterDevices, SelectorOutcomes
from inventory.models import Device
from inventory.representations import device_selector_hash
from tests.catalog.factories import OfferingFactory
from tests.inventory.factories import DraDeviceFactory, gpu_device, meta, node, resource_slice

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def cluster(handmade_cluster):
    return handmade_cluster


@pytest.fixture
def evaluated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many devices each selector evaluation was given (the real evaluation still runs)."""
    calls: list[int] = []
    real = matching.cel.match_devices

    def counting(selectors: Any, devices: Any, **kwargs: Any) -> Any:
        calls.append(len(devices))
        return real(selectors, devices, **kwargs)

    monkeypatch.setattr(matching.cel, "match_devices", counting)
    SELECTOR_OUTCOMES.clear()
    yield calls
    SELECTOR_OUTCOMES.clear()


def _slice(products: list[str], version: int) -> dict[str, Any]:
    item = resource_slice("n1-gpus", "n1", node_name="n1",
                          devices=[gpu_device(f"gpu-{i}", productName={"string": p}) for i, p in enumerate(products)])
    item["metadata"]["resourceVersion"] = str(version)
    return item


def _matched(offering: Any) -> int:
    return OfferingCapacity.objects.get(offering=offering).matched_devices


def test_only_devices_whose_attributes_changed_are_evaluated_again(cluster, apply, evaluated) -> None:
    apply("nodes", node("n1"))
    apply("deviceclasses", {"metadata": meta("gpu.nvidia.com"),
                            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}})
    apply("resourceslices", _slice([H100, H100, H100], 1000))
    offering = OfferingFactory(unit_kind="dra-device", device_class_name="gpu.nvidia.com",
                               cel_selector=f'device.attributes["gpu.nvidia.com"].productName == "{H100}"')

    # The derivation stores the digest, and a row read back from jsonb (keys reordered) hashes the same: what the
    # migration backfills for existing rows agrees with what the derivation writes.
    for device in Device.objects.filter(cluster=cluster):
        assert device.selector_hash
        assert device.selector_hash == device_selector_hash(device)

    # Two selector lists: the offering's, and the class alone (the quota's physical capacity of the class).
    capacity_refresh(clusters=[cluster])
    assert _matched(offering) == 3
    assert evaluated == [3, 3]

    # Nothing changed: no device is evaluated (nor are attributes read).
    capacity_refresh(clusters=[cluster])
    assert _matched(offering) == 3
    assert evaluated == [3, 3]

    # One device changes product: it alone is evaluated again, and it no longer matches.
    apply("resourceslices", _slice([H100, "NVIDIA A100-SXM4-80GB", H100], 1001), event="MODIFIED")
    capacity_refresh(clusters=[cluster])
    assert _matched(offering) == 2
    assert OfferingCapacity.objects.get(offering=offering).quota_capacity == 3  # the class still has all three
    assert evaluated == [3, 3, 1, 1]

    # A fresh process (empty memo) computes the same figures from scratch.
    SELECTOR_OUTCOMES.clear()
    capacity_refresh(clusters=[cluster])
    assert _matched(offering) == 2
    assert evaluated == [3, 3, 1, 1, 3, 3]


def test_rows_without_a_hash_are_evaluated_every_time(cluster, apply, evaluated) -> None:
    apply("deviceclasses", {"metadata": meta("gpu.nvidia.com"), "spec": {}})
    DraDeviceFactory(cluster=cluster, selector_hash="")  # a row the derivation did not write
    offering = OfferingFactory(unit_kind="dra-device", device_class_name="gpu.nvidia.com",
                               cel_selector='device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"')
    for _ in range(2):
        assert len(ClusterDevices(cluster, attributes=False).match(offering).devices) == 1
    assert evaluated == [1, 1]


def test_a_device_deleted_between_the_two_reads_is_left_out(cluster, apply, evaluated) -> None:
    apply("nodes", node("n1"))
    apply("deviceclasses", {"metadata": meta("gpu.nvidia.com"), "spec": {}})
    apply("resourceslices", _slice([H100, H100], 1000))
    offering = OfferingFactory(unit_kind="dra-device", device_class_name="gpu.nvidia.com")
    loaded = ClusterDevices(cluster, attributes=False)
    assert all("attributes" not in d for d in loaded.devices)
    Device.objects.filter(cluster=cluster, device_name="gpu-1").delete()
    match = loaded.match(offering)
    assert [d["device_name"] for d in match.devices] == ["gpu-0"]
    assert match.selector_errors == 0


def test_the_memo_is_bounded() -> None:
    memo = SelectorOutcomes(max_lists=2, max_entries=3)
    first = memo.memo(("a",))
    first.update({"h1": True, "h2": False})
    assert memo.memo(("a",)) is first
    memo.memo(("b",))
    memo.memo(("c",))  # evicts the least recently used list, ("a",)
    assert memo.memo(("a",)) == {}
    grown = memo.memo(("c",))
    grown.update({f"h{i}": True for i in range(4)})
    assert memo.memo(("c",)) == {}  # past max_entries it starts afresh


def test_the_migration_fills_the_hash_of_existing_rows(cluster) -> None:
    import importlib

    from django.apps import apps
    from django.db import connection

    migration = importlib.import_module("inventory.migrations.0019_device_selector_hash")
    devices = [DraDeviceFactory(cluster=cluster, selector_hash=""), DraDeviceFactory(cluster=cluster, selector_hash="")]
    with connection.schema_editor() as editor:
        migration.fill(apps, editor)
    for device in devices:
        device.refresh_from_db()
        assert device.selector_hash == device_selector_hash(device)
