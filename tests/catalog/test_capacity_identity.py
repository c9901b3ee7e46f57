"""held + free + unknown = allocatable for every offering, in the cases where the device figures do not add up by
themselves: pods still holding a unit that turned unhealthy, claims in an incomplete DRA pool, and whole cards or
partitions blocked through shared counters. Fragmentation is 1 - largest placeable / free."""

from __future__ import annotations

from typing import Any

import pytest

from catalog.services.capacity import cluster_capacity
from catalog.services.matching import ClusterDevices
from tests.catalog.factories import OfferingFactory
from tests.inventory.factories import claim, gpu_device, meta, node, pod, resource_slice

SELECTOR = "device.driver == 'gpu.nvidia.com'"


@pytest.fixture
def cluster(handmade_cluster):
    """Objects made by hand, applied with `apply` (tests/conftest.py): no simulator."""
    return handmade_cluster


def _part(name: str, memory: str) -> dict[str, Any]:
    return {**gpu_device(name, type={"string": "mig"}, profile={"string": "3g.40gb"}, parentUUID={"string": "GPU-0"}),
            "consumesCounters": [{"counterSet": "gpu-0-cs", "counters": {"memory": {"value": memory}}}]}


def test_every_allocatable_unit_is_held_free_or_unknown(cluster, apply) -> None:
    # Device plugin: 8 cards, 6 healthy, pods still hold 7 (bound pods do not move when a card fails).
    apply("nodes", node("n1", capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "6"}),
          node("d1"), node("p1"))
    apply("pods", pod("a", "n1", {"nvidia.com/gpu": "4"}), pod("b", "n1", {"nvidia.com/gpu": "3"}))
    apply("deviceclasses", {"metadata": meta("gpu.nvidia.com"),
                            "spec": {"selectors": [{"cel": {"expression": SELECTOR}}]}})
    # An incomplete DRA pool (1 of 2 slices) with one of its two devices claimed.
    apply("resourceslices",
          resource_slice("d1-a", "d1", count=2, node_name="d1", devices=[gpu_device("gpu-0"), gpu_device("gpu-1")]))
    # A complete partitionable card: the whole card and two halves share one counter set; one half is claimed.
    full = {**gpu_device("gpu-0"), "consumesCounters": [{"counterSet": "gpu-0-cs",
                                                         "counters": {"memory": {"value": "80Gi"}}}]}
    apply("resourceslices",
          resource_slice("p1-c", "p1", count=2, node_name="p1",
                         counters=[{"name": "gpu-0-cs", "counters": {"memory": {"value": "80Gi"}}}]),
          resource_slice("p1-d", "p1", count=2, node_name="p1", devices=[full, _part("mig-a", "40Gi"),
                                                                          _part("mig-b", "40Gi")]))
    apply("resourceclaims", claim("c-d1", [("gpu.nvidia.com", "d1", "gpu-0")]),
          claim("c-p1", [("gpu.nvidia.com", "p1", "mig-a")]))

    offerings = {
        "plugin": OfferingFactory(unit_kind="whole", resource_name="nvidia.com/gpu"),
        "cards": OfferingFactory(unit_kind="dra-device", device_class_name="gpu.nvidia.com"),
        "halves": OfferingFactory(unit_kind="dra-partition", device_class_name="gpu.nvidia.com"),
    }
    figures = cluster_capacity(ClusterDevices(cluster), list(offerings.values()))
    got = {name: {k: figures[o.pk][k] for k in ("allocatable", "held", "free", "unknown", "blocked")}
           for name, o in offerings.items()}
    assert got == {
        # 7 held by pods but only 6 allocatable: held counts the allocatable ones (the 7th is on a failed card).
        "plugin": {"allocatable": 6, "held": 6, "free": 0, "unknown": 0, "blocked": 0},
        # d1: gpu-0 claimed (held), gpu-1 unknown; p1's whole card is blocked by its claimed half.
        "cards": {"allocatable": 3, "held": 2, "free": 0, "unknown": 1, "blocked": 1},
        "halves": {"allocatable": 2, "held": 1, "free": 1, "unknown": 0, "blocked": 0},
    }
    for name, values in got.items():
        assert values["held"] + values["free"] + values["unknown"] == values["allocatable"], name


def test_fragmentation_is_one_minus_largest_placeable_over_free(cluster, apply) -> None:
    apply("nodes", *[node(f"n{i}", capacity={"nvidia.com/gpu": "8"}) for i in range(4)])
    apply("pods", *[pod(f"p{i}", f"n{i}", {"nvidia.com/gpu": "6"}) for i in range(4)])  # 2 free on each node
    offering = OfferingFactory(unit_kind="whole", resource_name="nvidia.com/gpu", request_sizes=[8])
    values = cluster_capacity(ClusterDevices(cluster), [offering])[offering.pk]
    assert (values["free"], values["largest_placeable"], values["stranded"]) == (8, 2, 8)
    assert values["fragmentation"] == 0.75  # 1 - 2/8: a user can check it from the two numbers on the page
