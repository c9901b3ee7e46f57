"""Seeded random kubesim scenarios for the cross-feature invariants: node pools of every kind (whole cards, MIG,
time-slicing, MPS, DRA, CPU-only; taints, labels, a cordoned pool), namespaces, claim templates, and workloads that the
simulator places with its own scheduler (running) or leaves Pending with its own FailedScheduling message.

The generator proposes; the simulator disposes. Running workloads that do not fit and Pending ones that would fit are
dropped by asking the simulator (`load_scenario` raises for both), so every scenario it returns is one the simulator
itself built and scheduled.
"""

from __future__ import annotations

import random
from typing import Any

from kubesim.scenario import ScenarioError, load_scenario

MODELS = ["NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "Tesla-T4", "NVIDIA-L4", "NVIDIA-L40S"]
NAMESPACES = ["team-a", "team-b", "batch"]
TAINT = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}


def _pools(rng: random.Random) -> list[dict[str, Any]]:
    pools: list[dict[str, Any]] = [{"name": "cpu", "count": rng.randint(1, 3), "cpu": 32, "memory": "128Gi",
                                    "mode": "cpu"}]
    kinds = rng.sample(["whole", "mig", "time-slicing", "mps", "dra", "whole-tainted", "cordoned"], k=rng.randint(3, 6))
    for index, kind in enumerate(kinds):
        pool: dict[str, Any] = {"name": f"p{index}-{kind.split('-')[0]}", "count": rng.randint(1, 3),
                                "cpu": rng.choice([16, 64, 128]), "memory": rng.choice(["128Gi", "512Gi"])}
        if kind in ("whole", "whole-tainted", "cordoned"):
            pool.update(mode="whole", gpu={"model": rng.choice(MODELS), "perNode": rng.choice([1, 2, 4, 8])})
            if kind == "whole-tainted":
                pool.update(taints=[TAINT], labels={"dedicated": "training"})
            if kind == "cordoned":
                pool["unschedulable"] = True
            if rng.random() < 0.3:
                pool["unhealthy"] = 1
        elif kind == "mig":
            pool.update(mode="mig", gpu={"model": "NVIDIA-A100-SXM4-80GB", "perNode": rng.choice([1, 2])},
                        mig={"config": rng.choice(["all-1g.10gb", "all-balanced", "all-3g.40gb"])})
        elif kind in ("time-slicing", "mps"):
            key = "timeSlicing" if kind == "time-slicing" else "mps"
            pool.update(mode=kind, gpu={"model": rng.choice(["Tesla-T4", "NVIDIA-L4"]), "perNode": rng.choice([1, 2])})
            pool[key] = {"replicas": rng.choice([2, 4])}
        else:  # dra
            pool.update(mode="dra", gpu={"model": "NVIDIA-A100-SXM4-80GB", "perNode": rng.choice([1, 2, 4])})
        pools.append(pool)
    return pools


def _resource(pool: dict[str, Any]) -> tuple[str, int] | None:
    """The extended resource a pool sells and how many units one node has."""
    mode, gpu = pool.get("mode"), pool.get("gpu") or {}
    if mode in ("whole",):
        return "nvidia.com/gpu", gpu["perNode"]
    if mode in ("time-slicing", "mps"):
        key = "timeSlicing" if mode == "time-slicing" else "mps"
        return "nvidia.com/gpu", gpu["perNode"] * pool[key]["replicas"]
    if mode == "mig":
        profile = {"all-1g.10gb": ("1g.10gb", 7), "all-3g.40gb": ("3g.40gb", 2), "all-balanced": ("1g.10gb", 2)}
        name, per_card = profile[pool["mig"]["config"]]
        return f"nvidia.com/mig-{name}", per_card * gpu["perNode"]
    return None


def _workload(rng: random.Random, index: int, pools: list[dict[str, Any]], state: str) -> dict[str, Any]:
    pool = rng.choice(pools)
    workload: dict[str, Any] = {"name": f"w{index}", "namespace": rng.choice(NAMESPACES), "count": rng.randint(1, 3),
                                "state": state, "controller": "None", "cpu": rng.choice([1, 4, 8]),
                                "memory": rng.choice(["4Gi", "16Gi", "64Gi"])}
    if rng.random() < 0.85 or state != "pending":
        workload["pool"] = pool["name"]
    else:
        workload["nodeSelector"] = {"kubesim.io/node-pool": "nowhere"}  # a selector no node matches
    sold = _resource(pool)
    if pool.get("mode") == "dra":
        workload["claimTemplate"] = "one-gpu"
    elif sold is not None:
        name, per_node = sold
        amount = rng.randint(1, per_node)
        if state == "pending" and rng.random() < 0.5:
            amount = per_node + rng.randint(1, 4)  # more than any node of the pool has
        workload["resources"] = {name: amount}
    if state == "pending" and pool.get("taints") and rng.random() < 0.5:
        workload["pool"] = pool["name"]
    return workload


def random_scenario(seed: int, *, workloads: int = 14) -> dict[str, Any]:
    """A scenario the simulator accepts, with running and pending pods of every pool kind."""
    rng = random.Random(seed)
    spec: dict[str, Any] = {
        "name": f"random-{seed}", "kubernetesVersion": "v1.35.0", "schedulerTaintMessage": "generic",
        "nodePools": _pools(rng),
        "deviceClasses": [{"name": "gpu.nvidia.com", "match": {"attributes": {"type": "gpu"}}}],
        "namespaces": [{"name": n, "labels": {"portal.example.com/tenant": n}} for n in NAMESPACES],
        "claimTemplates": [{"name": "one-gpu", "namespace": n, "requests": [{"deviceClassName": "gpu.nvidia.com"}]}
                           for n in NAMESPACES],
        "workloads": [],
    }
    for index in range(workloads):
        state = "pending" if rng.random() < 0.35 else "running"
        candidate = _workload(rng, index, spec["nodePools"], state)
        try:
            load_scenario({**spec, "workloads": [*spec["workloads"], candidate]}, seed=seed)
        except ScenarioError:
            continue  # running that does not fit, or pending that would: the simulator says no
        spec["workloads"].append(candidate)
    return spec
