"""Benchmark: feasibility explanations (catalog/feasibility) over the simulator's `large` scenario (5,000 nodes).

No database and no simulator process: the scenario is expanded in-process (`kubesim.scenario.load_scenario`) and
grouped by kind; `snapshot_from_objects` indexes it (timed, best and median of --builds). Then three pods are
explained over all 5,000 nodes, --repeat times each (best and median; the first, cold run is reported too, since
it fills the snapshot's CEL memo):

  (a) 8 nvidia.com/gpu with a nodeSelector for the whole-h100 pool (which is full: every node fails);
  (b) a DRA ResourceClaimTemplate for 2 GPUs with a CEL selector (memory >= 40Gi), no node selector;
  (c) an impossible pod asking 64 nvidia.com/gpu.

Target (DESIGN.md §5): one explanation over 5,000 nodes ≤ 300 ms.

    .venv/bin/python bench/explain_large.py [--repeat 5] [--builds 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.test")

from catalog.feasibility import explain_pod, snapshot_from_objects  # noqa: E402 - after sys.path is set up
from kubesim.scenario import load_scenario  # noqa: E402

TARGET_MS = 300.0
NAMESPACE = "tenant-01"
POOL_LABEL = "kubesim.io/node-pool"
MEMORY_SELECTOR = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"


def _pod(name: str, resources: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3", "resources": resources}],
                 **spec},
    }


def cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    two_gpus = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-big-gpus", "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": 2,
            "selectors": [{"cel": {"expression": MEMORY_SELECTOR}}]}}]}}},
    }
    return [
        ("(a) 8 GPUs, nodeSelector whole-h100",
         _pod("a", {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": "8"}},
              nodeSelector={POOL_LABEL: "whole-h100"}), {}),
        ("(b) DRA template, 2 GPUs, CEL selector",
         _pod("b", {"requests": {"cpu": "8", "memory": "64Gi"}},
              resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "two-big-gpus"}]),
         {"extra_claim_templates": [two_gpus]}),
        ("(c) impossible: 64 GPUs", _pod("c", {"limits": {"nvidia.com/gpu": "64"}}), {}),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--builds", type=int, default=3)
    args = parser.parse_args()

    started = time.perf_counter()
    objects = load_scenario("large")
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in objects:
        by_kind[obj["kind"]].append(obj)
    expand_s = time.perf_counter() - started
    counts = {kind: len(items) for kind, items in sorted(by_kind.items())}
    print(f"scenario expanded in {expand_s:.2f}s: {counts}", flush=True)
    gc.collect()
    gc.freeze()  # the scenario's objects are long-lived; keep the collector out of the timings

    builds = []
    snapshot = None
    for _ in range(args.builds):
        snapshot = None
        gc.collect()
        started = time.perf_counter()
        snapshot = snapshot_from_objects(
            nodes=by_kind["Node"], pods=by_kind["Pod"], resource_slices=by_kind["ResourceSlice"],
            device_classes=by_kind["DeviceClass"], resource_claims=by_kind["ResourceClaim"],
            resource_claim_templates=by_kind["ResourceClaimTemplate"],
        )
        builds.append(time.perf_counter() - started)
    if snapshot is None:
        raise SystemExit("--builds must be at least 1")
    gc.collect()
    gc.freeze()  # a served snapshot is long-lived too
    print(f"snapshot: {snapshot!r}; build best {min(builds):.2f}s, median {statistics.median(builds):.2f}s")

    rows = []
    for label, pod, extra in cases():
        times = []
        explanation = None
        for _ in range(args.repeat + 1):  # the first run is the cold one
            started = time.perf_counter()
            explanation = explain_pod(pod, snapshot, **extra)
            times.append((time.perf_counter() - started) * 1000)
        if explanation is None:
            raise SystemExit("--repeat must be at least 0")
        cold, warm = times[0], times[1:]
        rows.append({
            "case": label,
            "nodes": explanation.total_nodes,
            "schedulable": explanation.schedulable,
            "fitting_nodes": len(explanation.fitting_nodes),
            "message": explanation.message,
            "hints": explanation.hints,
            "cold_ms": round(cold, 1),
            "best_ms": round(min(warm), 1),
            "median_ms": round(statistics.median(warm), 1),
            "within_target": max(cold, statistics.median(warm)) <= TARGET_MS,
        })

    print()
    print(f"{'case':<42} {'nodes':>6} {'fit':>5} {'cold ms':>8} {'best ms':>8} {'median ms':>10}  target")
    for row in rows:
        print(f"{row['case']:<42} {row['nodes']:>6} {row['fitting_nodes']:>5} {row['cold_ms']:>8.1f} "
              f"{row['best_ms']:>8.1f} {row['median_ms']:>10.1f}  {'ok' if row['within_target'] else 'MISSED'}")
    for row in rows:
        print(f"\n{row['case']}: {row['message'][:300]}")
        for hint in row["hints"][:4]:
            print(f"  hint: {hint[:200]}")

    result = {
        "scenario": "large",
        "objects": counts,
        "scenario_expand_s": round(expand_s, 2),
        "snapshot_build_best_s": round(min(builds), 3),
        "snapshot_build_median_s": round(statistics.median(builds), 3),
        "snapshot_builds": args.builds,
        "repeat": args.repeat,
        "target_ms": TARGET_MS,
        "cases": rows,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    out = ROOT / "bench" / "results" / "explain_large.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwritten {out.relative_to(ROOT)}")
    return 0 if all(row["within_target"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
