"""Units counted right (issue 17 §2): MIG single strategy, sharing declared by opaque config, consumable capacity.

Hand-made objects applied through the real watch-batch path, as in test_derive.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from inventory.models import AllocationInterval, ClaimAllocation, Device, Finding, Mode
from inventory.overview import accelerator_overview
from inventory.services.derive import derive_cluster
from tests.inventory.conftest import device
from tests.inventory.factories import claim, gpu_device, node, pod, resource_slice

MIG_SINGLE = {  # GFD with --mig-strategy=single on 4 A100 80GB cards partitioned all-1g.10gb (28 MIG devices)
    "nvidia.com/gpu.present": "true", "nvidia.com/mig.strategy": "single", "nvidia.com/mig.capable": "true",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "nvidia.com/gpu.count": "28",
    "nvidia.com/gpu.memory": "9728", "nvidia.com/gpu.multiprocessors": "14", "nvidia.com/gpu.slices.gi": "1",
    "nvidia.com/gpu.slices.ci": "1", "nvidia.com/gpu.family": "ampere", "nvidia.com/mig.config": "all-1g.10gb",
    "nvidia.com/mig.config.state": "success",
}
WHOLE_A100 = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
              "nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.family": "ampere"}


@pytest.fixture
def cluster(handmade_cluster):
    """Objects made by hand, applied with `apply` (tests/conftest.py): no simulator."""
    return handmade_cluster


def findings(cluster, kind: str) -> list[Finding]:
    return list(Finding.objects.filter(cluster=cluster, kind=kind))


# ----------------------------------------------------------------------------------------- MIG single strategy


def test_mig_single_strategy_slices_are_slices_of_their_parent_cards(cluster, apply) -> None:
    apply("nodes", node("single", capacity={"nvidia.com/gpu": "28"}, labels=MIG_SINGLE),
          node("whole", capacity={"nvidia.com/gpu": "4"}, labels=WHOLE_A100))
    apply("pods", pod("a", "single", {"nvidia.com/gpu": "3"}))
    row = device(cluster, "node/single/nvidia.com/gpu")
    # Mode, profile, units per card and cards as with the mixed strategy; the memory is the slice's (GFD overrides
    # gpu.memory), the model the card's without the -MIG- suffix.
    assert (row.mode, row.mig_profile, row.units_per_card, row.cards, row.memory_mib, row.model) == (
        Mode.MIG, "1g.10gb", 7, 4.0, 9728, "NVIDIA-A100-SXM4-80GB")
    assert (row.capacity, row.in_use, row.free, row.unit) == (28, 3, 25, "nvidia.com/gpu MIG-1g.10gb")
    assert device(cluster, "node/whole/nvidia.com/gpu").mode == Mode.WHOLE
    rows = {(r.mode, r.unit): (r.cards, r.units) for r in accelerator_overview(Device.objects.filter(cluster=cluster))}
    # Same resource name, same model: the slices are never summed with the whole cards.
    assert rows == {("mig", "nvidia.com/gpu MIG-1g.10gb"): (4.0, 28), ("whole", "nvidia.com/gpu"): (4.0, 4)}


@pytest.mark.parametrize(("profile", "slices", "per_card", "cards"), [
    ("3g.40gb", 8, 2, 4.0), ("2g.20gb", 6, 3, 2.0), ("7g.80gb", 2, 1, 2.0), ("1g.10gb", 10, 7, 10 / 7),
])
def test_mig_single_slices_per_card_from_the_profile(cluster, apply, profile, slices, per_card, cards) -> None:
    labels = {**MIG_SINGLE, "nvidia.com/gpu.product": f"NVIDIA-A100-SXM4-80GB-MIG-{profile}"}
    labels.pop("nvidia.com/gpu.memory")
    apply("nodes", node("n", capacity={"nvidia.com/gpu": str(slices)}, labels=labels))
    row = device(cluster, "node/n/nvidia.com/gpu")
    assert (row.units_per_card, row.cards, row.memory_mib) == (per_card, pytest.approx(cards),
                                                              int(profile.split(".")[1][:-2]) * 1024)


def test_single_strategy_without_mig_devices_is_whole_cards(cluster, apply) -> None:
    # mig.strategy=single on a node whose GPUs are not partitioned: GFD keeps the plain product label.
    apply("nodes", node("n", capacity={"nvidia.com/gpu": "4"},
                        labels={**WHOLE_A100, "nvidia.com/mig.strategy": "single"}))
    assert device(cluster, "node/n/nvidia.com/gpu").mode == Mode.WHOLE


@pytest.mark.parametrize(("state", "severity"), [("pending", "warning"), ("rebooting", "warning"),
                                                 ("failed", "error")])
def test_mig_config_state_other_than_success_is_a_finding(cluster, apply, state, severity) -> None:
    apply("nodes", node("single", capacity={"nvidia.com/gpu": "28"},
                        labels={**MIG_SINGLE, "nvidia.com/mig.config": "all-3g.40gb",
                                "nvidia.com/mig.config.state": state}))
    [finding] = findings(cluster, Finding.Kind.MIG_RECONFIGURING)
    assert (finding.subject, finding.severity, finding.node_name) == ("node/single/mig-config", severity, "single")
    assert finding.evidence == {"config": "all-3g.40gb", "state": state, "strategy": "single"}
    apply("nodes", node("single", capacity={"nvidia.com/gpu": "28"}, labels=MIG_SINGLE), event="MODIFIED")
    assert not findings(cluster, Finding.Kind.MIG_RECONFIGURING)


# ------------------------------------------------------------------------------------ sharing declared by config


def with_config(obj: dict[str, Any], *configs: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["allocation"]["devices"]["config"] = list(configs)
    return obj


TIME_SLICING = {"source": "FromClass", "requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
    "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}}}
UNKNOWN = {"source": "FromClaim", "requests": [], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
    "apiVersion": "resource.nvidia.com/v1beta1", "kind": "SomethingNew"}}}


def test_holder_sharing_comes_from_the_config_that_applies(cluster, apply) -> None:
    apply("nodes", node("d"))
    apply("resourceslices", resource_slice("s", "d", node_name="d",
                                           devices=[gpu_device(f"gpu-{i}") for i in range(3)]))
    apply("resourceclaims", with_config(claim("ts", [("gpu.nvidia.com", "d", "gpu-0")]), TIME_SLICING),
          with_config(claim("odd", [("gpu.nvidia.com", "d", "gpu-1")]), UNKNOWN),
          claim("plain", [("gpu.nvidia.com", "d", "gpu-2")]))
    shared, odd, plain = (device(cluster, f"gpu.nvidia.com/d/gpu-{i}") for i in range(3))
    assert (shared.sharing, shared.sharing_detail, shared.holders) == ("time-slicing", "time-sliced (interval Long)",
                                                                       1)
    assert odd.sharing == "unknown"
    assert plain.sharing == "exclusive"
    assert ClaimAllocation.objects.get(cluster=cluster, claim_name="ts").sharing == "time-slicing"


# ------------------------------------------------------------------------------------------ consumable capacity


def shared_gpu(name: str) -> dict[str, Any]:
    out = gpu_device(name, capacity={"memory": {"value": "80Gi", "requestPolicy": {
        "default": "10Gi", "validRange": {"min": "10Gi", "max": "80Gi", "step": "10Gi"}}}})
    out["allowMultipleAllocations"] = True
    return out


def share_claim(name: str, device_name: str, memory: str) -> dict[str, Any]:
    obj = claim(name, [("gpu.nvidia.com", "d", device_name)])
    result = obj["status"]["allocation"]["devices"]["results"][0]
    result["shareID"] = f"share-{name}"
    result["consumedCapacity"] = {"memory": memory}
    return obj


def test_consumable_capacity_is_counted_per_device(cluster, apply) -> None:
    apply("nodes", node("d"))
    apply("resourceslices", resource_slice("s", "d", node_name="d", devices=[shared_gpu("gpu-0")]))
    apply("resourceclaims", share_claim("a", "gpu-0", "20Gi"), share_claim("b", "gpu-0", "40Gi"))
    row = device(cluster, "gpu.nvidia.com/d/gpu-0")
    # Held by two claims and still free: another allocation of at least 10Gi fits in the 20Gi left.
    assert (row.in_use, row.free, row.holders, row.consumed_share) == (1, 1, 2, 0.75)
    assert row.consumed_capacity == {"memory": {"value": "80Gi", "consumed": "60Gi", "left": "20Gi",
                                                "request_policy": "range 10Gi..80Gi in steps of 10Gi; default 10Gi"}}
    # Billing by consumed capacity: each interval holds its share of the device.
    shares = {i.name: (i.share, i.consumed_capacity) for i in AllocationInterval.objects.filter(cluster=cluster)}
    assert shares == {"a": (0.25, {"memory": "20Gi"}), "b": (0.5, {"memory": "40Gi"})}

    apply("resourceclaims", share_claim("c", "gpu-0", "20Gi"))
    row = device(cluster, "gpu.nvidia.com/d/gpu-0")
    assert (row.free, row.consumed_share, row.consumed_capacity["memory"]["left"]) == (0, 1.0, "0")

    # An allocation without a shareID (made as exclusive) takes the whole device.
    apply("resourceclaims", claim("x", [("gpu.nvidia.com", "d", "gpu-9")]))
    apply("resourceslices", resource_slice("s", "d", node_name="d", devices=[shared_gpu("gpu-0"), shared_gpu("gpu-9")]),
          event="MODIFIED")
    whole = device(cluster, "gpu.nvidia.com/d/gpu-9")
    assert (whole.in_use, whole.free, whole.consumed_share) == (1, 0, 1.0)


def test_interval_shares_follow_the_published_capacity(cluster, apply) -> None:
    apply("nodes", node("d"))
    apply("resourceclaims", share_claim("a", "gpu-0", "20Gi"))  # the claim arrives before its pool
    apply("resourceslices", resource_slice("s", "d", node_name="d", devices=[shared_gpu("gpu-0")]))
    assert AllocationInterval.objects.get(cluster=cluster, name="a").share == 0.25
    before = sorted(AllocationInterval.objects.filter(cluster=cluster).values_list("name", "share"))
    with transaction.atomic():
        derive_cluster(cluster_id=cluster.pk)
        assert sorted(AllocationInterval.objects.filter(cluster=cluster).values_list("name", "share")) == before
