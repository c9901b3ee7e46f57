"""Benchmark: generate and validate a manifest end to end against the `large` inventory (5,000 nodes).

Needs the `large` scenario synced into `portal_bench` (bench/sync_large.py or bench/capacity_large.py leave it
there). Times, in one process: generating a Job for a whole-card offering and a DRA claim template, then
`manifest_validate` with every layer except the dry run (parse, schema, semantics, policy, quota, feasibility over
all nodes). The first validation builds the cluster's scheduling snapshot from the database (reported as "cold");
later ones reuse it for PORTAL_FEASIBILITY_SNAPSHOT_SECONDS, as the pages and the API do ("warm", the figure the
500 ms target applies to).

    .venv/bin/python bench/validate_large.py [--db portal_bench] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="portal_bench")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    os.environ.update({"DJANGO_SETTINGS_MODULE": "portal.settings.base", "DJANGO_SECRET_KEY": "bench",
                       "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{args.db}",
                       "PORTAL_FEASIBILITY_SNAPSHOT_SECONDS": "3600"})
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
    import django

    django.setup()
    from catalog.generator import WorkloadSpec, generate
    from catalog.models import Offering
    from catalog.services.manifests import manifest_validate, snapshot_forget
    from inventory.models import Cluster, Node

    cluster = Cluster.objects.get(name="large")
    nodes = Node.objects.live().filter(cluster=cluster).count()
    whole = Offering.objects.filter(unit_kind="whole").order_by("pk").first()
    dra = Offering.objects.filter(unit_kind="dra-device").order_by("pk").first()
    if whole is None:
        raise SystemExit("no whole-card offering: run bench/capacity_large.py first (its discovery creates them)")
    namespace = "default"
    results: dict[str, object] = {"nodes": nodes}
    for label, offering, shape in (("job-whole-card", whole, "job"), ("claim-template-job", dra, "claim-template-job")):
        if offering is None:
            continue
        offering.lifecycle = "active"  # discovery proposals, used as they would be once curated (not saved)
        spec = WorkloadSpec(offering=offering, namespace=namespace, name="bench", shape=shape, count=4,
                            min_memory_gib=40 if offering.is_dra else None)
        started = time.perf_counter()
        generated = generate(spec)
        generate_ms = (time.perf_counter() - started) * 1000
        snapshot_forget()
        started = time.perf_counter()
        report = manifest_validate(text=generated.yaml, cluster=cluster, user=None)
        cold = (time.perf_counter() - started) * 1000
        warm = []
        for _ in range(args.runs):
            started = time.perf_counter()
            report = manifest_validate(text=generated.yaml, cluster=cluster, user=None)
            warm.append((time.perf_counter() - started) * 1000)
        feasibility = next((f.message for f in report.findings if f.layer == "feasibility"), "")
        results[label] = {
            "offering": offering.slug, "generate_ms": round(generate_ms, 1), "cold_ms": round(cold, 1),
            "warm_best_ms": round(min(warm), 1), "warm_median_ms": round(statistics.median(warm), 1),
            "ok": report.ok, "findings": len(report.findings), "feasibility": feasibility[:160],
        }
        print(f"{label:20s} generate {generate_ms:6.1f} ms | validate cold {cold:8.1f} ms | warm best "
              f"{min(warm):6.1f} ms, median {statistics.median(warm):6.1f} ms | {feasibility[:90]}", flush=True)
    results["target_ms"] = 500
    print(json.dumps(results, indent=2))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "validate_large.json").write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
