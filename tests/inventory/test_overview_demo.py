"""The accelerator overview of the demo scenario equals values computed by hand from kubesim/scenarios/demo.yaml."""

from __future__ import annotations

from inventory.models import Device, Finding
from inventory.overview import accelerator_overview

# (model, mode, unit): (cards, units, allocatable, in_use, free, unhealthy, unknown, largest placeable, nodes)
EXPECTED = {
    # h100 pool: 2 nodes x 8 cards, h100-000 reports 1 unhealthy (allocatable 7). llm-finetune (8) can only fit on
    # h100-001, llm-finetune-small (4) on h100-000; the two llm-eval-xl pods (8 each) are Pending and hold nothing.
    ("NVIDIA-H100-80GB-HBM3", "whole", "nvidia.com/gpu"): (16, 16, 15, 12, 3, 1, 0, 3, 2),
    # a100-40: a100-40-000 lost its device plugin (no nvidia.com/gpu at all); vllm-a100 holds all 4 of a100-40-001;
    # the two OOMKilled resnet-train pods are Failed, so they hold nothing.
    ("NVIDIA-A100-SXM4-40GB", "whole", "nvidia.com/gpu"): (4, 4, 4, 4, 0, 0, 0, 0, 1),
    # train-h200: 8 cards, llm-pretrain holds all 8.
    ("NVIDIA-H200", "whole", "nvidia.com/gpu"): (8, 8, 8, 8, 0, 0, 0, 0, 1),
    # a100-mig: 8 parent cards in all-balanced layout: per card 2x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb.
    # embed-mig holds 3 of the 1g slices; data-loader (ContainerCreating, bound) holds one 2g slice.
    ("NVIDIA-A100-SXM4-80GB", "mig", "nvidia.com/mig-1g.10gb"): (8, 16, 16, 3, 13, 0, 0, 13, 1),
    ("NVIDIA-A100-SXM4-80GB", "mig", "nvidia.com/mig-2g.20gb"): (8, 8, 8, 1, 7, 0, 0, 7, 1),
    ("NVIDIA-A100-SXM4-80GB", "mig", "nvidia.com/mig-3g.40gb"): (8, 8, 8, 0, 8, 0, 0, 8, 1),
    # a100-mig-single: 2 nodes x 2 cards in all-1g.10gb with the single strategy: nvidia.com/gpu = 14 slices per
    # node, 7 per card — slices of 4 cards, not 28 cards. notebook-mig holds 1 slice on a100-mig-single-001.
    ("NVIDIA-A100-SXM4-80GB", "mig", "nvidia.com/gpu MIG-1g.10gb"): (4, 28, 28, 1, 27, 0, 0, 14, 2),
    # t4-shared: 2 nodes x 4 cards x 4 time-slicing replicas = 32 units on 8 cards (1 card = 4 units).
    # triton-t4 (6) and flaky-worker (1, crash-looping but bound) sit on t4-shared-000; t4-shared-001 is empty.
    ("Tesla-T4", "time-slicing", "nvidia.com/gpu"): (8, 32, 32, 7, 25, 0, 0, 16, 2),
    # l4-mps: 4 cards x 2 MPS replicas; mps-infer holds 2.
    ("NVIDIA-L4", "mps", "nvidia.com/gpu"): (4, 8, 8, 2, 6, 0, 0, 6, 1),
    # l40s-dra: 2 nodes x 4 DRA GPUs. Held: 3 dra-train claims, shared-l40s (one GPU for two pods), warm-spare.
    # gpu-health-probe uses adminAccess: it sees devices without consuming them.
    ("NVIDIA-L40S", "dra-device", "gpu.nvidia.com gpu"): (8, 8, 8, 5, 3, 0, 0, 3, 2),
    # h100-dra-upd: generation 2 is current (the generation-1 slice is ignored): gpu-0 held by dra-upd-train,
    # gpu-3 tainted NoSchedule (unhealthy, not allocatable), gpu-1/2 free. h100-dra-partial: 1 of 2 slices
    # published, so its 2 visible devices are "unknown" — neither free nor used.
    ("NVIDIA-H100-80GB-HBM3", "dra-device", "gpu.nvidia.com gpu"): (6, 6, 5, 1, 2, 1, 2, 2, 2),
    # a100-dra-mig: 4 partitionable cards. On gpu-0, four 1g partitions (mig-dra-infer) and one 3g (seg-mig3g)
    # are allocated; their counters block the whole card gpu-0, the remaining three 1g partitions of gpu-0 and
    # its other 3g partition. The other 3 cards are free whole or as 7x 1g / 2x 3g partitions (separate units).
    ("NVIDIA-A100-SXM4-80GB", "dra-device", "gpu.nvidia.com gpu"): (4, 4, 4, 0, 3, 0, 0, 3, 1),
    ("NVIDIA-A100-SXM4-80GB", "dra-partition", "gpu.nvidia.com mig 1g.10gb"): (4, 28, 28, 4, 21, 0, 0, 21, 1),
    ("NVIDIA-A100-SXM4-80GB", "dra-partition", "gpu.nvidia.com mig 3g.40gb"): (4, 8, 8, 1, 6, 0, 0, 6, 1),
}


def test_overview_equals_hand_computed_values(demo_cluster) -> None:
    rows = {
        (r.model, r.mode, r.unit): (r.cards, r.units, r.allocatable, r.in_use, r.free, r.unhealthy, r.unknown,
                                    r.largest_placeable, r.nodes)
        for r in accelerator_overview(Device.objects.filter(cluster=demo_cluster))
    }
    assert rows == EXPECTED


def test_demo_findings_show_the_drift_cases(demo_cluster) -> None:
    found = {(f.kind, f.subject) for f in Finding.objects.filter(cluster=demo_cluster)}
    assert (Finding.Kind.UNHEALTHY_DEVICES, "node/h100-000/nvidia.com/gpu") in found
    assert (Finding.Kind.PLUGIN_MISSING, "node/a100-40-000/plugin") in found
    assert (Finding.Kind.POOL_INCOMPLETE, "pool/gpu.nvidia.com/h100-dra-partial-000") in found
    assert (Finding.Kind.POOL_STALE_GENERATION, "pool/gpu.nvidia.com/h100-dra-upd-000/stale") in found
    assert (Finding.Kind.DEVICE_TAINTED, "gpu.nvidia.com/h100-dra-upd-000/gpu-3") in found
    # a100-mig-single-000 is labelled nvidia.com/mig.config.state=pending: it is being repartitioned.
    reconfiguring = Finding.objects.get(cluster=demo_cluster, kind=Finding.Kind.MIG_RECONFIGURING)
    assert (reconfiguring.subject, reconfiguring.evidence) == (
        "node/a100-mig-single-000/mig-config", {"config": "all-1g.10gb", "state": "pending", "strategy": "single"})
    # DRA nodes carry GPU labels but no device-plugin resource: that is not a missing plugin.
    assert not any(kind == Finding.Kind.PLUGIN_MISSING and "dra" in subject for kind, subject in found)
