"""Benchmark: gang explanations (catalog/feasibility/gang.py) over the simulator's `large` scenario (5,000 nodes).

No database and no simulator process: the scenario is expanded in-process and indexed by `snapshot_from_objects`
(as bench/explain_large.py does). Each case is a Job of 64 Indexed pods explained as a gang — all 64 placed in
order on a copy of the snapshot, the first failing pod explained — --repeat times (best and median; the first,
cold run is reported too, since it fills the snapshot's CEL memo):

  (a) 64 pods x 8 nvidia.com/gpu, no node selector (any pool that sells nvidia.com/gpu);
  (b) 64 pods x 8 nvidia.com/gpu on the full whole-h100 pool (no pod fits);
  (c) 64 pods x a DRA ResourceClaimTemplate of 8 GPUs on the dra-h100 pool;
  (d) 64 pods x a DRA ResourceClaimTemplate of 1 GPU on the dra-h100 pool (every pod fits).

Target (DESIGN.md §5): a gang of 64 pods x 8 GPUs explained over "large" in under 1 s.

    .venv/bin/python bench/gang_large.py [--repeat 3] [--pods 64]
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.test")

from catalog.feasibility import scenario_snapshot  # noqa: E402 - after sys.path is set up
from catalog.feasibility.gang import explain_gang, gang_pods  # noqa: E402
from kubesim.scenario import load_scenario  # noqa: E402

TARGET_MS = 1000.0
NAMESPACE = "tenant-01"
POOL_LABEL = "kubesim.io/node-pool"


def _job(name: str, pods: int, resources: dict[str, Any], **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "nvcr.io/nvidia/pytorch:25.01-py3", "resources": resources}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                     "template": {"spec": {"containers": [container], "restartPolicy": "Never", **spec}}}}


def _template(name: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": count}}]}}}}


def cases(pods: int) -> list[tuple[str, list[dict[str, Any]]]]:
    eight = {"requests": {"cpu": "32", "memory": "256Gi"}, "limits": {"nvidia.com/gpu": "8"}}
    small = {"requests": {"cpu": "8", "memory": "64Gi"}}
    dra = {POOL_LABEL: "dra-h100"}
    return [
        (f"(a) {pods} x 8 nvidia.com/gpu, any pool", [_job("a", pods, eight)]),
        (f"(b) {pods} x 8 nvidia.com/gpu, whole-h100 (full)",
         [_job("b", pods, eight, nodeSelector={POOL_LABEL: "whole-h100"})]),
        (f"(c) {pods} x DRA 8 GPUs, dra-h100",
         [_job("c", pods, small, nodeSelector=dra,
               resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "eight"}]), _template("eight", 8)]),
        (f"(d) {pods} x DRA 1 GPU, dra-h100",
         [_job("d", pods, small, nodeSelector=dra,
               resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "one"}]), _template("one", 1)]),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pods", type=int, default=64)
    args = parser.parse_args()
    if args.repeat < 1:
        raise SystemExit("--repeat must be at least 1")

    started = time.perf_counter()
    objects = load_scenario("large")
    print(f"scenario expanded in {time.perf_counter() - started:.2f}s", flush=True)
    gc.collect()
    gc.freeze()
    started = time.perf_counter()
    snapshot = scenario_snapshot(objects)
    build_s = time.perf_counter() - started
    gc.collect()
    gc.freeze()
    print(f"snapshot: {snapshot!r}; built in {build_s:.2f}s")

    rows = []
    for label, objects in cases(args.pods):
        pods, claims, templates, _ = gang_pods(objects)
        times = []
        for _ in range(args.repeat + 1):  # the first run is the cold one
            started = time.perf_counter()
            result = explain_gang(pods, snapshot, extra_claims=claims, extra_claim_templates=templates)
            times.append((time.perf_counter() - started) * 1000)
        cold, warm = times[0], times[1:]
        rows.append({
            "case": label,
            "pods": result.total_pods,
            "schedulable": result.schedulable,
            "largest_gang": result.largest,
            "nodes_used": len(result.nodes_used()),
            "message": result.message,
            "hints": result.hints[:3],
            "cold_ms": round(cold, 1),
            "best_ms": round(min(warm), 1),
            "median_ms": round(statistics.median(warm), 1),
            "within_target": max(cold, statistics.median(warm)) <= TARGET_MS,
        })

    print()
    print(f"{'case':<46} {'placed':>7} {'cold ms':>8} {'best ms':>8} {'median ms':>10}  target")
    for row in rows:
        print(f"{row['case']:<46} {row['largest_gang']:>3}/{row['pods']:<3} {row['cold_ms']:>8.1f} "
              f"{row['best_ms']:>8.1f} {row['median_ms']:>10.1f}  {'ok' if row['within_target'] else 'MISSED'}")
    for row in rows:
        print(f"\n{row['case']}: {row['message'][:300]}")
        for hint in row["hints"]:
            print(f"  hint: {hint[:200]}")

    result_doc = {"scenario": "large", "snapshot_build_s": round(build_s, 2), "repeat": args.repeat,
                  "target_ms": TARGET_MS, "cases": rows, "python": platform.python_version(),
                  "machine": platform.machine(), "cpus": os.cpu_count()}
    out = ROOT / "bench" / "results" / "gang_large.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result_doc, indent=2) + "\n")
    print(f"\nwritten {out.relative_to(ROOT)}")
    return 0 if all(row["within_target"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
