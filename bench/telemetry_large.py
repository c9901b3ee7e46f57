"""Benchmark: the hourly telemetry rollup of the `large` fleet (40,000 GPUs) from one hour of dcgm-exporter data at
15 s resolution in a real Prometheus (Debian's), joined to the synced inventory.

1. Syncs `large` into its own PostgreSQL database (or reuses it with --reuse).
2. Computes what each node's exporter reports (kubesim.dcgm: cards, MIG instances, DRA devices and partitions,
   which pod uses which) and writes one hour of samples every 15 s for the metrics the rollup reads
   (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`, `DCGM_FI_DEV_GPU_UTIL`, `DCGM_FI_DEV_FB_USED`, `DCGM_FI_DEV_GPU_TEMP`,
   `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, `DCGM_FI_DEV_XID_ERRORS`) with the exporter's label set, in chunks of
   nodes, each turned into TSDB blocks by `promtool tsdb create-blocks-from openmetrics` (niced: one core).
   Values follow the holder (training busy, inference bursty, 10 % of pods idle, free cards at zero) but are a
   cheap formula rather than kubesim's per-sample function, to keep the fill affordable.
3. Starts Prometheus on the blocks and times `rollup_hour` for that hour in a fresh process (wall time and peak RSS
   by wait4), reporting series, rollup rows, samples and series per second (in the hour / rollup seconds), and the
   load average around the run (the machine is shared: quote figures with it).

    .venv/bin/python bench/telemetry_large.py [--reuse] [--keep-data DIR]

Targets (docs/utilization.md): under 60 s and under 400 MB RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sync_large import large_database, run_measured

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
STEP = 15
CHUNK_NODES = 400

ROLLUP = """
import json, time, datetime as dt, django
django.setup()
from inventory.models import Cluster
from portal.models import TelemetrySource
from portal.telemetry.services import PrometheusClient, rollup_hour
cluster = Cluster.objects.get(name="large")
source, _ = TelemetrySource.objects.update_or_create(cluster=cluster, defaults={"prometheus_url": URL})
hour = dt.datetime.fromtimestamp(HOUR, dt.UTC)
t0 = time.perf_counter()
result = rollup_hour(cluster, hour, client=PrometheusClient(URL, timeout=300), source=source)
seconds = time.perf_counter() - t0
from portal.models import UtilizationRollup
rows = UtilizationRollup.objects.filter(cluster=cluster, hour=hour)
print(json.dumps({"seconds": round(seconds, 2), "series": result["series"], "rows": result["rows"],
                  "unmatched": result["unmatched"], "held_rows": rows.exclude(holder_uid="").count(),
                  "warnings": result["warnings"][:3]}))
"""


def _value(profile: str, k: int, i: int) -> float:
    if profile == "training":
        return 0.85 + ((i * 7 + k) % 12) / 100
    if profile == "inference":
        return 0.1 + ((i * 13 + k) % 40) / 50
    if profile == "idle":
        return ((i + k) % 3) / 1000
    if profile == "other":
        return 0.5
    return 0.0


def write_chunk(path: Path, nodes: dict[str, list], start: int, instance: str) -> int:
    """One hour of the chunk's exporters as OpenMetrics; returns the number of samples."""
    samples = 0
    series: list[tuple[str, str, bool, bool, str]] = []  # (label text, profile, is instance, is card, uuid)
    for node, units in nodes.items():
        for unit in units:
            base = (f'gpu="{unit.index}",UUID="{unit.uuid}",pci_bus_id="00000000:18:00.0",device="nvidia{unit.index}",'
                    f'modelName="{unit.model}",Hostname="{node}",DCGM_FI_DRIVER_VERSION="{unit.driver}"')
            if unit.instance_id is not None:
                base += f',GPU_I_PROFILE="{unit.instance_profile}",GPU_I_ID="{unit.instance_id}"'
            extra = f',cluster="large",node="{node}",job="dcgm-exporter",instance="{instance}"'
            holders = unit.holders or [None]
            for h in holders:
                pod = (f',container="{h.container}",namespace="{h.namespace}",pod="{h.pod}"' if h else "")
                series.append(("{" + base + pod + extra + "}", h.profile if h else "", unit.instance_id is not None,
                               unit.instance_id is None, unit.uuid))
    with open(path, "w", encoding="utf-8") as out:
        for name, per in (("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "all"), ("DCGM_FI_DEV_GPU_UTIL", "card"),
                          ("DCGM_FI_DEV_FB_USED", "all"), ("DCGM_FI_DEV_GPU_TEMP", "card"),
                          ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "card"), ("DCGM_FI_DEV_XID_ERRORS", "card")):
            out.write(f"# TYPE {name} {'unknown' if 'ENERGY' in name else 'gauge'}\n")
            for i, (labels, profile, _instance, is_card, _uuid) in enumerate(series):
                if per == "card" and not is_card:
                    continue
                head = name + labels + " "
                lines = []
                for k in range(3600 // STEP):
                    activity = _value(profile, k, i)
                    if name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
                        v = f"{activity:.4f}"
                    elif name == "DCGM_FI_DEV_GPU_UTIL":
                        v = str(round(100 * activity))
                    elif name == "DCGM_FI_DEV_FB_USED":
                        v = str(int(30000 + 40000 * activity) if profile else 0)
                    elif name == "DCGM_FI_DEV_GPU_TEMP":
                        v = str(round(32 + 45 * activity))
                    elif name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                        v = str(int((start - 1_700_000_000 + STEP * k) * 300_000))
                    else:
                        v = "79" if i % 9973 == 0 else "0"
                    lines.append(f"{head}{v} {start + STEP * k}\n")
                out.write("".join(lines))
                samples += len(lines)
        out.write("# EOF\n")
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", action="store_true", help="reuse the synced database portal_bench_telemetry")
    parser.add_argument("--keep-data", default="", help="keep (or reuse) the Prometheus data directory here")
    args = parser.parse_args()
    env = large_database("portal_bench_telemetry", reuse=args.reuse)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.base")
    from kubesim import Simulator
    from kubesim.prometheus import Prometheus

    hour = int(time.time() // 3600 - 2) * 3600
    workdir = Path(args.keep_data or tempfile.mkdtemp(prefix="portal-bench-prom-"))
    workdir.mkdir(parents=True, exist_ok=True)
    kept = sorted(workdir.glob("filled-*.json"))
    if kept:  # the hour a previous run filled (within the retention), rather than filling another
        hour = int(kept[-1].stem.removeprefix("filled-"))
    marker = workdir / f"filled-{hour}.json"
    fill = {}
    if marker.exists():
        fill = json.loads(marker.read_text())
        print(f"reusing {workdir} ({fill['samples']} samples)", flush=True)
    else:
        t0 = time.perf_counter()
        print("computing the fleet's exporters …", flush=True)
        with Simulator("large") as sim:
            fleet = sim.telemetry.all_units()
        nodes = sorted(fleet)
        units_total = sum(len(u) for u in fleet.values())
        samples, gen_s, promtool_s = 0, 0.0, 0.0
        for first in range(0, len(nodes), CHUNK_NODES):
            chunk = {n: fleet[n] for n in nodes[first:first + CHUNK_NODES]}
            path = workdir / "chunk.om"
            t1 = time.perf_counter()
            samples += write_chunk(path, chunk, hour, "kubesim:6443")
            t2 = time.perf_counter()
            subprocess.run(["nice", "-n", "19", "promtool", "tsdb", "create-blocks-from", "openmetrics", str(path),
                            str(workdir / "data")], check=True, capture_output=True)
            promtool_s += time.perf_counter() - t2
            gen_s += t2 - t1
            path.unlink()
            print(f"  {min(first + CHUNK_NODES, len(nodes))}/{len(nodes)} nodes, {samples} samples", flush=True)
        fill = {"nodes": len(nodes), "dcgm_entities": units_total, "samples": samples,
                "generate_seconds": round(gen_s, 1), "promtool_seconds": round(promtool_s, 1),
                "fill_seconds": round(time.perf_counter() - t0, 1)}
        marker.write_text(json.dumps(fill))
    prom = Prometheus(workdir, retention="30d")
    prom.start(timeout=600)
    try:
        code = ROLLUP.replace("URL", repr(prom.url)).replace("HOUR", str(hour))
        load_before = os.getloadavg()
        with tempfile.TemporaryFile() as out:
            seconds, rss_kib, rc = run_measured([PY, "-c", code], env={**env, "PYTHONPATH": str(ROOT)},
                                                stdout=out.fileno())
            out.seek(0)
            text = out.read().decode()
        if rc != 0:
            print(text)
            return rc
        result = json.loads(text.strip().splitlines()[-1])
    finally:
        prom.stop()
        if not args.keep_data:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    report = {**fill, **result, "process_seconds": round(seconds, 2), "peak_rss_mb": round(rss_kib / 1024, 1),
              "samples_per_second": round(fill["samples"] / result["seconds"]),
              "series_per_second": round(result["series"] / result["seconds"]),
              # the machine is shared: the 1-minute load average before and after the rollup, with the cores
              "load_average": [round(load_before[0], 1), round(os.getloadavg()[0], 1)], "cores": os.cpu_count(),
              "targets": {"seconds": 60, "rss_mb": 400}}
    print(json.dumps(report, indent=2))
    return 0 if result["seconds"] < 60 and rss_kib / 1024 < 400 else 1


if __name__ == "__main__":
    sys.exit(main())
