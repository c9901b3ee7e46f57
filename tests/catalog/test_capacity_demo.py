"""Capacity of each unit kind on the demo scenario equals values computed by hand from kubesim/scenarios/demo.yaml.

The inventory's per-device figures are checked in tests/inventory/test_overview_demo.py; here the catalog's
offering-level figures (feasible nodes, largest placeable, stranded, fragmentation, pending pods, quota) are.
"""

from __future__ import annotations

import pytest

from catalog.models import CapacitySample, Offering, OfferingCapacity
from catalog.services.capacity import capacity_refresh
from tests.catalog.factories import OfferingFactory

H100 = "NVIDIA-H100-80GB-HBM3"

# The demo's ResourceQuotas: requests.nvidia.com/gpu 40 + 12 + 16 + 4; gpu.nvidia.com devices 16; mig-1g 4.
GPU_QUOTA = 72
# Allocatable nvidia.com/gpu units of every device-plugin pool (that key counts them all, replicas included):
# H100 15 + A100-40GB 4 + H200 8 + T4 32 replicas + L4 8 MPS shares + 28 MIG 1g.10gb slices that the
# single-strategy pool (a100-mig-single, 2 nodes x 14) advertises under the same name.
GPU_KEY_CAPACITY = 95


def _offerings() -> dict[str, Offering]:
    return {
        # h100: 2 nodes x 8; h100-000 has 1 unhealthy card and llm-finetune-small (4); h100-001 is full.
        "h100": OfferingFactory(slug="h100", unit_kind="whole", resource_name="nvidia.com/gpu",
                                node_selector={"nvidia.com/gpu.product": H100}, request_sizes=[1, 2, 4, 8]),
        # The H200 pool is tainted dedicated=training; the offering carries the toleration.
        "h200": OfferingFactory(slug="h200", unit_kind="whole", resource_name="nvidia.com/gpu",
                                node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"}, request_sizes=[8],
                                tolerations=[{"key": "dedicated", "value": "training", "effect": "NoSchedule"}]),
        "h200-untolerated": OfferingFactory(slug="h200-no-tol", unit_kind="whole", resource_name="nvidia.com/gpu",
                                            node_selector={"nvidia.com/gpu.product": "NVIDIA-H200"}),
        # t4-shared: 2 nodes x 4 cards x 4 replicas; triton-t4 (6) + flaky-worker (1) on t4-shared-000.
        "t4": OfferingFactory(slug="t4", unit_kind="time-slicing", resource_name="nvidia.com/gpu",
                              node_selector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}, units_per_card=4),
        # A "whole card" offering on the same nodes matches nothing: replicas are never sold as cards.
        "t4-as-card": OfferingFactory(slug="t4-card", unit_kind="whole", resource_name="nvidia.com/gpu",
                                      node_selector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"}),
        "mig-1g": OfferingFactory(slug="mig-1g", unit_kind="mig", resource_name="nvidia.com/mig-1g.10gb"),
        # The single strategy sells the same slices as nvidia.com/gpu, selected by the product label.
        "mig-single": OfferingFactory(slug="mig-single", unit_kind="mig", resource_name="nvidia.com/gpu",
                                      node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"},
                                      units_per_card=7),
        "l4-mps": OfferingFactory(slug="l4-mps", unit_kind="mps", resource_name="nvidia.com/gpu",
                                  node_selector={"nvidia.com/gpu.sharing-strategy": "mps"}),
        "l40s": OfferingFactory(slug="l40s", unit_kind="dra-device", device_class_name="gpu.nvidia.com",
                                cel_selector='device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"',
                                request_sizes=[1, 2, 4]),
        "a100-dra": OfferingFactory(
            slug="a100-dra", unit_kind="dra-device", device_class_name="gpu.nvidia.com",
            cel_selector='device.attributes["gpu.nvidia.com"].productName == "NVIDIA A100-SXM4-80GB"'),
        "a100-dra-1g": OfferingFactory(
            slug="a100-dra-1g", unit_kind="dra-partition", device_class_name="mig.nvidia.com",
            cel_selector='device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'),
        "a100-dra-3g": OfferingFactory(
            slug="a100-dra-3g", unit_kind="dra-partition", device_class_name="mig.nvidia.com",
            cel_selector='device.attributes["gpu.nvidia.com"].profile == "3g.40gb"'),
        "missing-class": OfferingFactory(slug="nope", unit_kind="dra-device", device_class_name="nope.example.com"),
    }


FIELDS = ("total_units", "allocatable", "held", "free", "unknown", "cards", "feasible_nodes", "largest_placeable",
          "stranded", "fragmentation", "pending_pods", "granted_quota", "quota_capacity", "free_cards", "contested",
          "blocked")

EXPECTED = {
    # 3 free on h100-000 only: one pod can get all 3, fragmentation 1 - 3/3 = 0; reference request 8 → all 3
    # stranded. Pending: the two llm-eval-xl pods (node-pool h100) and detector-train (no selector, 16 GPUs).
    "h100": (16, 15, 12, 3, 0, 16, 2, 3, 3, 0.0, 3, GPU_QUOTA, GPU_KEY_CAPACITY, 0, 0, 0),
    # All 8 held by llm-pretrain; the node is feasible (tolerated). detector-train has no toleration: not counted.
    "h200": (8, 8, 8, 0, 0, 8, 1, 0, 0, 0.0, 0, GPU_QUOTA, GPU_KEY_CAPACITY, 0, 0, 0),
    # Without the toleration the tainted node is not feasible.
    "h200-untolerated": (8, 8, 8, 0, 0, 8, 0, 0, 0, 0.0, 0, GPU_QUOTA, GPU_KEY_CAPACITY, 0, 0, 0),
    # 32 replicas on 8 cards; 9 free on t4-shared-000, 16 on t4-shared-001: fragmentation 1 - 16/25.
    # detector-train waits for any GPU.
    "t4": (32, 32, 7, 25, 0, 8, 2, 16, 0, 0.36, 1, GPU_QUOTA, GPU_KEY_CAPACITY, 0, 0, 0),
    "t4-as-card": (0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, GPU_QUOTA, GPU_KEY_CAPACITY, 0, 0, 0),
    # 8 cards x 2 1g slices; embed-mig holds 3. Quota requests.nvidia.com/mig-1g.10gb = 4 (ml-inference).
    "mig-1g": (16, 16, 3, 13, 0, 8, 1, 13, 0, 0.0, 0, 4, 16, 0, 0, 0),
    # a100-mig-single: 2 nodes x 2 cards x 7 slices = 28 slices on 4 cards; notebook-mig holds 1 on node 001, so
    # 14 free on node 000 and 13 on node 001: fragmentation 1 - 14/27. detector-train (16 nvidia.com/gpu, no
    # selector) could run there as far as labels and taints go: pending 1.
    "mig-single": (28, 28, 1, 27, 0, 4, 2, 14, 0, 0.4815, 1, GPU_QUOTA, GPU_KEY_CAPACITY, 0, 0, 0),
    # 4 L4 x 2 MPS shares; mps-infer holds 2.
    "l4-mps": (8, 8, 2, 6, 0, 4, 1, 6, 0, 0.0, 1, GPU_QUOTA, GPU_KEY_CAPACITY, 0, 0, 0),
    # 2 nodes x 4 L40S; held: 3 dra-train, shared-l40s, warm-spare → free 3 (gpu-health-probe is admin access).
    # dra-big (eight-gpus template, node-pool l40s-dra) is Pending. The 3 free (all on l40s-dra-001) fit one pod:
    # fragmentation 0; reference request 4: they are stranded.
    # The gpu.nvidia.com quota (16) counts every device of the class: L40S 8 + H100 5 + A100 4 allocatable.
    "l40s": (8, 8, 5, 3, 0, 8, 2, 3, 3, 0.0, 1, 16, 17, 3, 0, 0),
    # 4 partitionable A100s: gpu-0 is held through its allocated partitions (blocked); gpu-1..3 are free whole or
    # in partitions — either/or, so every free unit is contested and each card counts once.
    "a100-dra": (4, 4, 1, 3, 0, 4, 1, 3, 0, 0.0, 0, 16, 17, 3, 3, 1),
    # gpu-0's 1g partitions: 4 held by mig-dra-infer, 3 blocked by them and seg-mig3g's 3g.40gb on the same card.
    "a100-dra-1g": (28, 28, 7, 21, 0, 4, 1, 21, 0, 0.0, 0, 2, 36, 3, 21, 3),
    "a100-dra-3g": (8, 8, 2, 6, 0, 4, 1, 6, 0, 0.0, 0, 2, 36, 3, 6, 1),
    "missing-class": (0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0, 0, None, 0, 0, 0, 0),
}


@pytest.mark.slow
def test_capacity_of_each_unit_kind_equals_hand_computed_values(demo_cluster) -> None:
    offerings = _offerings()
    assert capacity_refresh(clusters=[demo_cluster]) == len(offerings)
    by_id = {c.offering_id: c for c in OfferingCapacity.objects.filter(cluster=demo_cluster)}
    for name, expected in EXPECTED.items():
        figures = by_id[offerings[name].pk]
        actual = tuple(getattr(figures, f) for f in FIELDS)
        for field, want, got in zip(FIELDS, expected, actual, strict=True):
            if want is not None:
                assert got == want, f"{name}.{field}: expected {want}, got {got}"
        # Every allocatable unit is exactly one of held, free or unknown.
        assert figures.held + figures.free + figures.unknown == figures.allocatable, name
    # The held L40S (dra-train x3, shared-l40s, warm-spare) fill l40s-dra-000 and one card of l40s-dra-001.
    assert by_id[offerings["l40s"].pk].free_by_node == {"l40s-dra-001": 3}
    # A whole card and its partitions are never both counted free: the three free cards are the same cards.
    a100 = [by_id[offerings[n].pk] for n in ("a100-dra", "a100-dra-1g", "a100-dra-3g")]
    assert all(c.contested == c.free for c in a100)
    assert {c.free_cards for c in a100} == {3}
    # a100-mig-single-000 is being repartitioned (mig.config.state=pending): its offering's capacity is changing.
    assert by_id[offerings["mig-single"].pk].capacity_changing
    assert not any(c.capacity_changing for pk, c in by_id.items() if pk != offerings["mig-single"].pk)
    # Time-slice replicas are units, not cards: 32 units on 8 cards.
    t4 = by_id[offerings["t4"].pk]
    assert (t4.total_units, t4.cards) == (32, 8)
    # The 1g and 3g offerings share the mig.nvidia.com quota key (2 in vision-team) and its capacity.
    assert by_id[offerings["a100-dra-1g"].pk].quota_capacity == by_id[offerings["a100-dra-3g"].pk].quota_capacity
    # History: this hour's sample equals the current figures; a second run overwrites it, no duplicate.
    capacity_refresh(clusters=[demo_cluster])
    assert CapacitySample.objects.filter(cluster=demo_cluster).count() == len(offerings)
    sample = CapacitySample.objects.get(cluster=demo_cluster, offering=offerings["h100"])
    assert (sample.free, sample.held, sample.stranded) == (3, 12, 3)


@pytest.mark.slow
def test_oversubscription_is_granted_quota_over_physical_capacity(demo_cluster) -> None:
    offering = OfferingFactory(slug="h100", unit_kind="whole", resource_name="nvidia.com/gpu",
                               node_selector={"nvidia.com/gpu.product": H100})
    capacity_refresh(clusters=[demo_cluster])
    figures = OfferingCapacity.objects.get(offering=offering, cluster=demo_cluster)
    assert figures.oversubscription == pytest.approx(GPU_QUOTA / GPU_KEY_CAPACITY)
