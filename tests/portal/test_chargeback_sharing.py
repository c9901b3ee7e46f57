"""End to end through the simulator ("sharing" scenario): a pod asking for `nvidia.com/gpu: 2` on a DRA-only node is
served by the scheduler's generated claim. Its two devices are counted and billed once (as the claim's devices), and
pods the kubelet rejected because the device plugin refuses more than one shared unit are billed nothing."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from catalog.models import OfferingPrice
from inventory.models import AllocationInterval, Device
from portal.chargeback import services as cb
from tests.catalog.factories import OfferingFactory

WINDOW = (dt.datetime(2026, 1, 14, 12, tzinfo=dt.UTC), dt.datetime(2026, 1, 15, tzinfo=dt.UTC))  # 12 hours
HOURS = Decimal(12)


def _price(offering, amount: str) -> None:
    OfferingPrice.objects.create(offering=offering, unit_price=Decimal(amount), currency="EUR",
                                 effective_from=dt.datetime(2025, 1, 1, tzinfo=dt.UTC))


def test_dra_backed_extended_resource_is_counted_and_billed_once(live_sharing) -> None:
    _sim, cluster = live_sharing
    pods = AllocationInterval.objects.filter(cluster=cluster, holder_kind="pod")
    # trainer (2 whole H100), 3 notebooks (1 replica each), mps-infer (1 share); no dra-ext, no rejected pod.
    assert sorted((i.name.rsplit("-", 2)[0], i.resource, i.quantity) for i in pods) == [
        ("mps-infer", "nvidia.com/gpu", 1), ("notebook", "nvidia.com/gpu.shared", 1),
        ("notebook", "nvidia.com/gpu.shared", 1), ("notebook", "nvidia.com/gpu.shared", 1),
        ("trainer", "nvidia.com/gpu", 2)]
    claims = AllocationInterval.objects.filter(cluster=cluster, holder_kind="claim")
    assert sorted(claims.values_list("resource", "quantity")) == [("gpu.nvidia.com/l40s-dra-000/gpu-0", 1),
                                                                  ("gpu.nvidia.com/l40s-dra-000/gpu-1", 1)]
    assert {c.name.split("-extended-resources-")[0].rsplit("-", 2)[0] for c in claims} == {"dra-ext"}
    # In use: the DRA devices once; no device plugin serves nvidia.com/gpu on the DRA node.
    assert sorted(Device.objects.filter(cluster=cluster, path="dra", in_use=1).values_list("device_name", flat=True)) \
        == ["gpu-0", "gpu-1"]
    assert not Device.objects.filter(cluster=cluster, path="device-plugin", node_name="l40s-dra-000").exists()
    plugin = {d.node_name: d.in_use for d in Device.objects.filter(cluster=cluster, path="device-plugin")}
    assert plugin == {"h100-000": 2, "t4-renamed-000": 3, "l4-mps-000": 1}  # the rejected pods hold nothing

    h100 = OfferingFactory(slug="h100", unit_kind="whole", resource_name="nvidia.com/gpu",
                           node_selector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    l40s = OfferingFactory(slug="l40s", unit_kind="dra-device", device_class_name="gpu.nvidia.com",
                           cel_selector='device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"')
    t4 = OfferingFactory(slug="t4", unit_kind="time-slicing", resource_name="nvidia.com/gpu.shared",
                         node_selector={"nvidia.com/gpu.product": "Tesla-T4"}, units_per_card=4)
    l4 = OfferingFactory(slug="l4", unit_kind="mps", resource_name="nvidia.com/gpu",
                         node_selector={"nvidia.com/gpu.sharing-strategy": "mps"})
    for offering, amount in ((h100, "3.00"), (l40s, "2.00"), (t4, "0.10"), (l4, "0.30")):
        _price(offering, amount)

    pieces = cb.pieces(*WINDOW, step="day", scope=cb.Scope(True, set()), now=WINDOW[1])
    by_offering = {row["offering"]: row for row in cb.aggregate(pieces, ("offering",), period=WINDOW[0])}
    assert {k: v["unit_hours"] for k, v in by_offering.items()} == {
        "h100": 2 * HOURS, "l40s": 2 * HOURS, "t4": 3 * HOURS, "l4": 1 * HOURS}
    assert not any(p.unpriced for p in pieces)
    [total] = cb.totals(pieces)
    assert total["unit_hours"] == 8 * HOURS  # 2 + 2 + 3 + 1 units: the DRA-backed two once
    assert total["cost"] == HOURS * (2 * 3 + 2 * 2 + 3 * Decimal("0.10") + Decimal("0.30"))
