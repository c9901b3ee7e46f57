"""kubesim's "sharing" scenario synced and derived: a renamed time-sliced pool, pods the kubelet rejected because the
device plugin refuses more than one shared unit, and a DRA-backed nvidia.com/gpu request."""

from __future__ import annotations

from inventory.models import AllocationInterval, Device, Mode, Pod
from inventory.podstatus import LAYER_NODE_SETUP


def test_renamed_pool_derives_replicas_of_the_labelled_cards(live_sharing) -> None:
    _sim, cluster = live_sharing
    row = Device.objects.get(cluster=cluster, key="node/t4-renamed-000/nvidia.com/gpu.shared")
    assert (row.mode, row.model, row.units_per_card, row.cards) == (Mode.TIME_SLICING, "Tesla-T4", 4, 2.0)
    assert (row.capacity, row.in_use, row.free) == (8, 3, 5)  # 3 notebooks; the greedy one was rejected
    mps = Device.objects.get(cluster=cluster, key="node/l4-mps-000/nvidia.com/gpu")
    assert (mps.mode, mps.model, mps.cards, mps.in_use) == (Mode.MPS, "NVIDIA-L4", 2.0, 1)


def test_pods_rejected_by_the_device_plugin_are_typed_and_hold_nothing(live_sharing) -> None:
    _sim, cluster = live_sharing
    rejected = Pod.objects.filter(cluster=cluster, name__startswith="greedy-")
    assert rejected.count() == 2
    for pod in rejected:
        assert (pod.phase, pod.stage_layer) == ("Failed", LAYER_NODE_SETUP)
        assert "maximum request size for shared resources is 1; found 2" in pod.stage_detail
        assert not AllocationInterval.objects.filter(cluster=cluster, holder_uid=pod.uid).exists()
