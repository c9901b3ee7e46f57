"""Derivation rules on hand-made objects, applied through the real watch-batch path (`_apply_events`)."""

from __future__ import annotations

from typing import Any

import pytest

from inventory.models import AllocationInterval, Cluster, Device, Finding, Health, Mode
from inventory.overview import accelerator_overview
from inventory.services.derive import derive_cluster
from tests.inventory.conftest import device
from tests.inventory.factories import claim, gpu_device, node, pod, resource_slice

GFD_H100 = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper",
            "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/cuda.driver-version.full": "570.124.06", "nvidia.com/cuda.runtime-version.full": "12.8"}


@pytest.fixture
def cluster(handmade_cluster: Cluster) -> Cluster:
    """Objects made by hand, applied with `apply` (tests/conftest.py): no simulator."""
    return handmade_cluster


def findings(cluster: Cluster, kind: str) -> list[Finding]:
    return list(Finding.objects.filter(cluster=cluster, kind=kind))


def test_in_use_comes_from_pod_requests_not_capacity_minus_allocatable(cluster, apply) -> None:
    apply("nodes", node("n1", capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "6"}, labels=GFD_H100))
    apply("pods", pod("a", "n1", {"nvidia.com/gpu": "3"}), pod("done", "n1", {"nvidia.com/gpu": "4"},
                                                                  phase="Succeeded"))
    row = device(cluster, "node/n1/nvidia.com/gpu")
    assert (row.capacity, row.allocatable, row.in_use, row.free, row.unhealthy) == (8, 6, 3, 3, 2)
    assert row.health == Health.DEGRADED
    assert (row.mode, row.model, row.cards, row.memory_mib, row.compute_capability) == (
        Mode.WHOLE, "NVIDIA-H100-80GB-HBM3", 8.0, 81559, "9.0")
    [finding] = findings(cluster, Finding.Kind.UNHEALTHY_DEVICES)
    assert finding.evidence == {"resource": "nvidia.com/gpu", "capacity": 8, "allocatable": 6}

    apply("pods", pod("a", "n1", {"nvidia.com/gpu": "3"}), event="DELETED")
    assert device(cluster, "node/n1/nvidia.com/gpu").in_use == 0


def test_time_slicing_replicas_are_units_not_cards(cluster, apply) -> None:
    labels = {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.count": "4",
              "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    apply("nodes", node("t4", capacity={"nvidia.com/gpu": "16"}, labels=labels))
    apply("pods", *[pod(f"p{i}", "t4", {"nvidia.com/gpu": "1"}) for i in range(5)])
    row = device(cluster, "node/t4/nvidia.com/gpu")
    assert (row.mode, row.model, row.units_per_card, row.cards) == (Mode.TIME_SLICING, "Tesla-T4", 4, 4.0)
    assert (row.capacity, row.in_use, row.free) == (16, 5, 11)


def test_mig_slices_belong_to_parent_cards_and_profiles_are_separate_units(cluster, apply) -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "2",
              "nvidia.com/mig-1g.10gb.count": "14", "nvidia.com/mig-1g.10gb.memory": "9984",
              "nvidia.com/mig-3g.40gb.count": "4"}
    apply("nodes", node("mig", capacity={"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"},
                        labels=labels))
    apply("pods", pod("small", "mig", {"nvidia.com/mig-1g.10gb": "2"}))
    small, large = device(cluster, "node/mig/nvidia.com/mig-1g.10gb"), device(cluster, "node/mig/nvidia.com/mig-3g.40gb")
    assert (small.mode, small.mig_profile, small.units_per_card, small.cards, small.memory_mib) == (
        Mode.MIG, "1g.10gb", 7, 2.0, 9984)
    assert (small.in_use, small.free) == (2, 12)
    assert (large.memory_mib, large.units_per_card, large.free) == (40 * 1024, 2, 4)
    rows = {r.unit: r for r in accelerator_overview(Device.objects.filter(cluster=cluster))}
    assert set(rows) == {"nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"}  # never summed together


def test_pool_rules_highest_generation_and_incomplete(cluster, apply) -> None:
    apply("nodes", node("d1"))
    old = resource_slice("old", "d1", generation=1, node_name="d1", devices=[gpu_device("gpu-0"), gpu_device("gpu-9")])
    new_a = resource_slice("new-a", "d1", generation=2, count=2, node_name="d1", devices=[gpu_device("gpu-0")])
    apply("resourceslices", old, new_a)
    # generation 2 is current but only 1 of 2 slices is there: incomplete, nothing free, gpu-9 (gen 1) ignored
    assert set(Device.objects.filter(cluster=cluster).values_list("key", flat=True)) == {"gpu.nvidia.com/d1/gpu-0"}
    gpu0 = device(cluster, "gpu.nvidia.com/d1/gpu-0")
    assert (gpu0.pool_complete, gpu0.free, gpu0.health, gpu0.pool_generation) == (False, 0, Health.UNKNOWN, 2)
    assert findings(cluster, Finding.Kind.POOL_INCOMPLETE)[0].evidence["resourceSliceCount"] == 2
    assert findings(cluster, Finding.Kind.POOL_STALE_GENERATION)

    apply("resourceslices", resource_slice("new-b", "d1", generation=2, count=2, node_name="d1",
                                           devices=[gpu_device("gpu-1")]))
    assert {d.key: d.free for d in Device.objects.filter(cluster=cluster)} == {
        "gpu.nvidia.com/d1/gpu-0": 1, "gpu.nvidia.com/d1/gpu-1": 1}
    assert not findings(cluster, Finding.Kind.POOL_INCOMPLETE)
    apply("resourceslices", old, event="DELETED")
    assert not findings(cluster, Finding.Kind.POOL_STALE_GENERATION)


def test_shared_counters_block_parent_and_sibling_partitions(cluster, apply) -> None:
    apply("nodes", node("p1"))
    counters = [{"name": "gpu-0-cs", "counters": {"memory": {"value": "80Gi"}}}]

    def part(name: str, memory: str, profile: str) -> dict[str, Any]:
        return {**gpu_device(name, type={"string": "mig"}, profile={"string": profile},
                             parentUUID={"string": "GPU-0"}),
                "consumesCounters": [{"counterSet": "gpu-0-cs", "counters": {"memory": {"value": memory}}}]}

    full = {**gpu_device("gpu-0"), "consumesCounters": [{"counterSet": "gpu-0-cs",
                                                         "counters": {"memory": {"value": "80Gi"}}}]}
    apply("resourceslices",
          resource_slice("counters", "p1", count=2, node_name="p1", counters=counters),
          resource_slice("devices", "p1", count=2, node_name="p1",
                         devices=[full, part("mig-a", "40Gi", "3g.40gb"), part("mig-b", "40Gi", "3g.40gb")]))
    assert {d.device_name: d.free for d in Device.objects.filter(cluster=cluster)} == {
        "gpu-0": 1, "mig-a": 1, "mig-b": 1}

    apply("resourceclaims", claim("c-a", [("gpu.nvidia.com", "p1", "mig-a")]))
    rows = {d.device_name: d for d in Device.objects.filter(cluster=cluster)}
    assert (rows["mig-a"].in_use, rows["mig-a"].claim_name) == (1, "c-a")
    assert rows["gpu-0"].free == 0  # the parent is not free
    assert "mig-a" in rows["gpu-0"].blocked_by
    assert rows["mig-b"].free == 1  # its sibling still fits in the remaining counter
    overview = {r.mode: r for r in accelerator_overview(Device.objects.filter(cluster=cluster))}
    assert (overview[Mode.DRA_DEVICE].free, overview[Mode.DRA_PARTITION].free) == (0, 1)
    assert overview[Mode.DRA_PARTITION].cards == 1  # one physical card behind both partitions


def test_admin_access_does_not_consume_the_device(cluster, apply) -> None:
    apply("nodes", node("a1"))
    apply("resourceslices", resource_slice("s", "a1", node_name="a1", devices=[gpu_device("gpu-0")]))
    apply("resourceclaims", claim("monitor", [("gpu.nvidia.com", "a1", "gpu-0")], admin=True, reserved=["dcgm"]))
    row = device(cluster, "gpu.nvidia.com/a1/gpu-0")
    assert (row.in_use, row.free, row.admin_access, row.claim_name) == (0, 1, True, "monitor")
    assert row.reserved_for == [{"name": "dcgm", "uid": "uid-dcgm", "resource": "pods"}]


def test_device_taints_make_a_device_unhealthy(cluster, apply) -> None:
    apply("nodes", node("t1"))
    tainted = {**gpu_device("gpu-0"), "taints": [{"key": "ecc", "value": "x", "effect": "NoSchedule"}]}
    apply("resourceslices", resource_slice("s", "t1", node_name="t1", devices=[tainted]))
    row = device(cluster, "gpu.nvidia.com/t1/gpu-0")
    assert (row.free, row.unhealthy, row.health) == (0, 1, Health.UNHEALTHY)
    assert findings(cluster, Finding.Kind.DEVICE_TAINTED)


def test_plugin_missing_double_counting_and_gfd_mismatch(cluster, apply) -> None:
    apply("nodes", node("missing", labels=GFD_H100),
          node("double", capacity={"nvidia.com/gpu": "8"}, labels=GFD_H100),
          node("dra-only", labels={**GFD_H100, "nvidia.com/gpu.count": "1"}))
    apply("resourceslices",
          resource_slice("s-double", "double", node_name="double", devices=[gpu_device("gpu-0")]),
          resource_slice("s-dra", "dra-only", node_name="dra-only", devices=[gpu_device(
              "gpu-0", productName={"string": "NVIDIA A100-SXM4-40GB"}, capacity={"memory": {"value": "40Gi"}})]))
    [missing] = findings(cluster, Finding.Kind.PLUGIN_MISSING)
    assert missing.node_name == "missing"
    assert missing.evidence["gpu_labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    [double] = findings(cluster, Finding.Kind.DOUBLE_COUNTING)
    assert double.node_name == "double"
    assert double.evidence == {"device_plugin": {"nvidia.com/gpu": "8"}, "dra_devices": ["gpu.nvidia.com/double/gpu-0"]}
    mismatches = {f.node_name: f.evidence["mismatches"] for f in findings(cluster, Finding.Kind.GFD_DRA_MISMATCH)}
    assert set(mismatches["dra-only"]) == {"model", "memory_mib"}
    assert "gpu_count" in mismatches["double"]  # 8 cards labelled, 1 DRA device: the rest are not published

    apply("nodes", node("missing", labels=GFD_H100), event="DELETED")
    assert not findings(cluster, Finding.Kind.PLUGIN_MISSING)


def test_allocation_intervals_from_object_timestamps(cluster, apply) -> None:
    apply("nodes", node("n1", capacity={"nvidia.com/gpu": "8"}))
    running, finished = pod("run", "n1", {"nvidia.com/gpu": "2"}), pod("fin", "n1", {"nvidia.com/gpu": "1"},
                                                                       phase="Succeeded")
    apply("pods", running, finished)
    intervals = {i.name: i for i in AllocationInterval.objects.filter(cluster=cluster)}
    assert intervals["run"].started_at.isoformat() == "2026-01-01T00:59:00+00:00"
    assert intervals["run"].ended_at is None
    assert intervals["run"].quantity == 2
    assert intervals["fin"].ended_at.isoformat() == "2026-01-01T03:00:00+00:00"

    apply("pods", pod("run", "n1", {"nvidia.com/gpu": "2"}, deleted=True), event="DELETED")
    ended = AllocationInterval.objects.get(cluster=cluster, name="run").ended_at
    assert ended.isoformat() == "2026-01-01T05:00:00+00:00"  # from deletionTimestamp, right across downtime

    apply("resourceslices", resource_slice("s", "n1", node_name="n1", devices=[gpu_device("gpu-0")]))
    apply("resourceclaims", claim("c", [("gpu.nvidia.com", "n1", "gpu-0")]))
    interval = AllocationInterval.objects.get(cluster=cluster, holder_kind="claim")
    assert (interval.resource, interval.started_at.isoformat()) == ("gpu.nvidia.com/n1/gpu-0",
                                                                   "2026-01-02T00:00:00+00:00")


def test_incremental_equals_from_scratch_for_handmade_cluster(cluster, apply) -> None:
    apply("nodes", node("n1", capacity={"nvidia.com/gpu": "8"}, labels=GFD_H100), node("d1", labels=GFD_H100))
    apply("pods", pod("a", "n1", {"nvidia.com/gpu": "3"}))
    apply("resourceslices", resource_slice("s", "d1", node_name="d1", devices=[gpu_device("gpu-0")]))
    apply("resourceclaims", claim("c", [("gpu.nvidia.com", "d1", "gpu-0")]))
    before = sorted(Device.objects.filter(cluster=cluster).values_list("key", "in_use", "free", "health"))
    derive_cluster(cluster_id=cluster.pk)
    assert sorted(Device.objects.filter(cluster=cluster).values_list("key", "in_use", "free", "health")) == before


def test_dra_backed_extended_resource_is_counted_once_as_the_claims_devices(cluster, apply) -> None:
    """DRAExtendedResource: a pod asking `example.com/gpu: 2` on a node whose DeviceClass maps that name gets a
    scheduler-generated claim. The claim's devices hold the units: no pod interval, no device-plugin in use."""
    apply("nodes", node("n1", capacity={"example.com/gpu": "4"}))
    apply("resourceslices", resource_slice("s", "n1", node_name="n1", driver="gpu.example.com",
                                           devices=[gpu_device("gpu-0"), gpu_device("gpu-1")]))
    generated = claim("infer-extended-resources-q8mzt", [("gpu.example.com", "n1", "gpu-0"),
                                                         ("gpu.example.com", "n1", "gpu-1")], reserved=["infer"])
    generated["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    apply("resourceclaims", generated)
    dra_backed = pod("infer", "n1", {"example.com/gpu": "2"})
    dra_backed["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "infer-extended-resources-q8mzt",
        "requestMappings": [{"containerName": "main", "requestName": "container-0-request-0",
                             "resourceName": "example.com/gpu"}]}
    plugin_served = pod("plain", "n1", {"example.com/gpu": "1"})
    apply("pods", dra_backed, plugin_served)

    intervals = sorted(AllocationInterval.objects.filter(cluster=cluster).values_list(
        "holder_kind", "name", "resource", "quantity"))
    assert intervals == [
        ("claim", "infer-extended-resources-q8mzt", "gpu.example.com/n1/gpu-0", 1),
        ("claim", "infer-extended-resources-q8mzt", "gpu.example.com/n1/gpu-1", 1),
        ("pod", "plain", "example.com/gpu", 1),
    ]
    # The device plugin serves only the plain pod; the DRA devices are held by the claim.
    assert device(cluster, "node/n1/example.com/gpu").in_use == 1
    assert {d.device_name: d.in_use for d in Device.objects.filter(cluster=cluster, path="dra")} == {
        "gpu-0": 1, "gpu-1": 1}
    derive_cluster(cluster_id=cluster.pk)  # from scratch: the same rows
    assert sorted(AllocationInterval.objects.filter(cluster=cluster).values_list(
        "holder_kind", "name", "resource", "quantity")) == intervals


def test_rename_by_default_gpu_shared_units_are_time_slice_replicas(cluster, apply) -> None:
    """renameByDefault: the device plugin advertises nvidia.com/gpu.shared, and GFD leaves the product label without
    -SHARED (the resource name marks the sharing). The units are replicas of the labelled cards."""
    labels = {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "2", "nvidia.com/gpu.memory": "15360",
              "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    apply("nodes", node("t4", capacity={"nvidia.com/gpu.shared": "8"}, allocatable={"nvidia.com/gpu.shared": "4"},
                        labels=labels))
    apply("pods", *[pod(f"nb{i}", "t4", {"nvidia.com/gpu.shared": "1"}) for i in range(3)])
    row = device(cluster, "node/t4/nvidia.com/gpu.shared")
    assert (row.mode, row.model, row.resource_name, row.unit) == (
        Mode.TIME_SLICING, "Tesla-T4", "nvidia.com/gpu.shared", "nvidia.com/gpu.shared")
    assert (row.units_per_card, row.cards, row.memory_mib) == (4, 2.0, 15360)  # 8 replicas of 2 cards
    assert (row.capacity, row.allocatable, row.in_use, row.free, row.unhealthy) == (8, 4, 3, 1, 4)
    assert not Device.objects.filter(cluster=cluster, resource_name="nvidia.com/gpu").exists()
    # Even without the strategy label (an older GFD), the .shared name alone says "replicas".
    apply("nodes", node("t4", capacity={"nvidia.com/gpu.shared": "8"},
                        labels={**labels, "nvidia.com/gpu.sharing-strategy": "none"}), event="MODIFIED")
    assert device(cluster, "node/t4/nvidia.com/gpu.shared").mode == Mode.TIME_SLICING
    overview = {r.unit: r for r in accelerator_overview(Device.objects.filter(cluster=cluster))}
    assert overview["nvidia.com/gpu.shared"].cards == 2


def test_a_whole_cluster_derivation_goes_pool_chunk_by_chunk(cluster, apply, monkeypatch) -> None:
    """Bounded memory: a whole-cluster derivation reads and writes POOL_CHUNK pools at a time, with the same rows as
    one step, and still removes the devices and findings of a pool whose slices went away behind its back."""
    from django.utils import timezone

    from inventory.models import ResourceSlice
    from inventory.services.derive import entrypoints

    names = [f"d{i}" for i in range(5)]
    apply("nodes", *[node(name, labels=GFD_H100) for name in names])
    apply("resourceslices", *[resource_slice(f"s-{name}", name, node_name=name, count=2 if name == "d0" else 1,
                                             devices=[gpu_device("gpu-0"), gpu_device("gpu-1")]) for name in names])
    apply("resourceclaims", claim("c", [("gpu.nvidia.com", "d3", "gpu-1")]))

    def rows() -> tuple[list[tuple], list[tuple]]:
        return (sorted(Device.objects.filter(cluster=cluster).values_list("key", "in_use", "free", "health",
                                                                          "pool_complete")),
                sorted(Finding.objects.filter(cluster=cluster).values_list("kind", "scope", "subject")))

    before = rows()
    assert (Finding.Kind.POOL_INCOMPLETE, "pool/gpu.nvidia.com/d0", "pool/gpu.nvidia.com/d0") in before[1]
    chunks: list[int] = []
    states = entrypoints.pool_states
    monkeypatch.setattr(entrypoints, "POOL_CHUNK", 2)
    monkeypatch.setattr(entrypoints, "pool_states", lambda cid, pools: chunks.append(len(pools)) or states(cid, pools))
    derive_cluster(cluster_id=cluster.pk)
    assert rows() == before
    assert chunks == [2, 2, 1]

    ResourceSlice.objects.filter(cluster=cluster, name__in=["s-d0", "s-d4"]).update(deleted_at=timezone.now())
    derive_cluster(cluster_id=cluster.pk)
    devices, found = rows()
    assert {key.split("/")[1] for key, *_ in devices} == {"d1", "d2", "d3"}
    assert [scope for _, scope, _ in found if scope.startswith("pool/")] == []  # d0's incomplete pool is gone


def test_pods_and_capacity_changes_leave_the_nodes_dra_pools_alone_cordons_do_not(cluster, apply) -> None:
    """The most frequent batches (pods, a node's allocatable flapping) touch only the node's device-plugin devices
    and findings; the DRA devices carry none of what they change. A cordon changes what the DRA devices carry
    (their schedulability): their pool is re-derived."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    n1 = node("n1", capacity={"nvidia.com/gpu": "8"}, labels=GFD_H100)
    apply("nodes", n1)
    apply("resourceslices", resource_slice("s", "n1", node_name="n1", devices=[gpu_device("gpu-0")]))

    def slice_reads(kind: str, *objects: dict[str, Any]) -> int:
        with CaptureQueriesContext(connection) as queries:
            apply(kind, *objects)
        return sum('FROM "inventory_resourceslice"' in q["sql"] for q in queries.captured_queries)

    assert slice_reads("pods", pod("a", "n1", {"nvidia.com/gpu": "3"})) == 0
    assert device(cluster, "node/n1/nvidia.com/gpu").in_use == 3
    assert slice_reads("nodes", node("n1", capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "7"},
                                     labels=GFD_H100)) == 0
    assert device(cluster, "node/n1/nvidia.com/gpu").unhealthy == 1
    assert device(cluster, "gpu.nvidia.com/n1/gpu-0").node_schedulable

    assert slice_reads("nodes", node("n1", capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "7"},
                                     labels=GFD_H100, unschedulable=True)) > 0
    assert not device(cluster, "gpu.nvidia.com/n1/gpu-0").node_schedulable
    before = sorted(Device.objects.filter(cluster=cluster).values_list("key", "in_use", "free", "node_schedulable"))
    derive_cluster(cluster_id=cluster.pk)
    assert sorted(Device.objects.filter(cluster=cluster).values_list(
        "key", "in_use", "free", "node_schedulable")) == before


def test_a_pod_batch_re_derives_only_the_nodes_where_what_its_pods_hold_changed(cluster, apply) -> None:
    """A node's device-plugin devices depend on its pods only through what each adds to the in-use counts
    (`plugin_share`). A bound pod going Pending → Running, or any change to a pod without accelerators, changes no
    share: the node is left alone. A pod ending, arriving, or whose request a DRA claim takes over changes one."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    apply("nodes", node("n1", capacity={"nvidia.com/gpu": "8"}, labels=GFD_H100))

    def node_reads(*objects: dict[str, Any]) -> int:
        with CaptureQueriesContext(connection) as queries:
            apply("pods", *objects)
        return sum('FROM "inventory_node"' in q["sql"] for q in queries.captured_queries)

    assert node_reads(pod("a", "n1", {"nvidia.com/gpu": "3"}, phase="Pending")) > 0  # arrives: holds 3
    assert device(cluster, "node/n1/nvidia.com/gpu").in_use == 3
    assert node_reads(pod("a", "n1", {"nvidia.com/gpu": "3"})) == 0  # starts: still 3
    assert node_reads(pod("web", "n1", {"cpu": "1"}), pod("web2", "n1", {"cpu": "1"}, phase="Succeeded")) == 0
    served = pod("a", "n1", {"nvidia.com/gpu": "3"})
    served["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": "a-extended", "requestMappings": [
        {"containerName": "main", "requestName": "container-0-request-0", "resourceName": "nvidia.com/gpu"}]}
    assert node_reads(served) > 0  # the claim's devices hold them now
    assert device(cluster, "node/n1/nvidia.com/gpu").in_use == 0
    assert node_reads(pod("a", "n1", {"nvidia.com/gpu": "3"})) > 0
    assert device(cluster, "node/n1/nvidia.com/gpu").in_use == 3
    assert node_reads(pod("a", "n1", {"nvidia.com/gpu": "3"}, phase="Succeeded")) > 0  # ends: frees 3
    assert device(cluster, "node/n1/nvidia.com/gpu").in_use == 0
    before = sorted(Device.objects.filter(cluster=cluster).values_list("key", "in_use", "free"))
    derive_cluster(cluster_id=cluster.pk)
    assert sorted(Device.objects.filter(cluster=cluster).values_list("key", "in_use", "free")) == before


def test_a_slice_batch_re_derives_a_node_only_when_what_its_findings_read_changed(cluster, apply) -> None:
    """Node findings read the node's DRA devices' keys and NODE_FINDING_DEVICE_FIELDS. A device tainted (the most
    frequent slice update) re-derives its pool only; a device whose model changes, or that goes, re-derives its
    node's findings too."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    labels = {**GFD_H100, "nvidia.com/gpu.count": "1"}
    apply("nodes", node("n1", labels=labels))
    apply("resourceslices", resource_slice("s", "n1", node_name="n1", devices=[gpu_device("gpu-0")]))
    assert not findings(cluster, Finding.Kind.GFD_DRA_MISMATCH)

    def node_derivations(*objects: dict[str, Any], event: str = "MODIFIED") -> int:  # they read the node's pods
        with CaptureQueriesContext(connection) as queries:
            apply("resourceslices", *objects, event=event)
        return sum('FROM "inventory_pod"' in q["sql"] for q in queries.captured_queries)

    tainted = {**gpu_device("gpu-0"), "taints": [{"key": "ecc", "value": "x", "effect": "NoSchedule"}]}
    assert node_derivations(resource_slice("s", "n1", node_name="n1", devices=[tainted])) == 0
    assert device(cluster, "gpu.nvidia.com/n1/gpu-0").health == Health.UNHEALTHY
    a100 = gpu_device("gpu-0", productName={"string": "NVIDIA A100-SXM4-80GB"})
    assert node_derivations(resource_slice("s", "n1", node_name="n1", devices=[a100])) > 0
    [mismatch] = findings(cluster, Finding.Kind.GFD_DRA_MISMATCH)
    assert set(mismatch.evidence["mismatches"]) == {"model"}
    assert node_derivations(resource_slice("s", "n1", node_name="n1", devices=[a100]), event="DELETED") > 0
    assert not findings(cluster, Finding.Kind.GFD_DRA_MISMATCH)
    assert findings(cluster, Finding.Kind.PLUGIN_MISSING)  # GPU labels, and neither plugin nor DRA devices now
    before = sorted(Finding.objects.filter(cluster=cluster).values_list("kind", "subject", "evidence"))
    derive_cluster(cluster_id=cluster.pk)
    assert sorted(Finding.objects.filter(cluster=cluster).values_list("kind", "subject", "evidence")) == before


def test_a_dra_device_moving_to_another_node_re_derives_both_nodes(cluster, apply) -> None:
    """A device published with its own nodeName keeps its key when that node changes: the node it left has lost a
    DRA device too, and its findings must say so."""
    labels = {**GFD_H100, "nvidia.com/gpu.count": "1"}
    apply("nodes", node("n1", labels=labels), node("n2", labels=labels))
    apply("resourceslices", resource_slice("s", "p", devices=[{**gpu_device("gpu-0"), "nodeName": "n1"}]))
    assert {f.node_name for f in findings(cluster, Finding.Kind.PLUGIN_MISSING)} == {"n2"}
    apply("resourceslices", resource_slice("s", "p", devices=[{**gpu_device("gpu-0"), "nodeName": "n2"}]))
    assert {f.node_name for f in findings(cluster, Finding.Kind.PLUGIN_MISSING)} == {"n1"}
    before = sorted(Finding.objects.filter(cluster=cluster).values_list("kind", "subject", "evidence"))
    derive_cluster(cluster_id=cluster.pk)
    assert sorted(Finding.objects.filter(cluster=cluster).values_list("kind", "subject", "evidence")) == before


def test_derivation_reads_skip_the_models_display_ordering(cluster, apply) -> None:
    """Device and ClaimAllocation are ordered by their cluster's name for display. A derivation's read of them needs
    no order: with it, every read joined the cluster table and sorted, and a DISTINCT over pools went over the
    ordering's columns too (one row per device)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        apply("nodes", node("n1", capacity={"nvidia.com/gpu": "8"}, labels=GFD_H100))
        apply("resourceslices", resource_slice("s", "n1", node_name="n1", devices=[gpu_device("gpu-0")]))
        apply("pods", pod("a", "n1", {"nvidia.com/gpu": "3"}))
        apply("resourceclaims", claim("c", [("gpu.nvidia.com", "n1", "gpu-0")]))
        derive_cluster(cluster_id=cluster.pk)
    joined = [q["sql"] for q in queries.captured_queries if 'JOIN "inventory_cluster"' in q["sql"]]
    assert not joined, joined[0]
