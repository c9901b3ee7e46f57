"""Benchmark: initial `sync --once` of the `large` scenario vs `kubectl get <kind> -A -o json --chunk-size=500`.

Both list the same objects from the same simulator in the same run (kubectl before and after the sync; the ratio
uses their mean). The sync writes into a fresh PostgreSQL database (`portal_bench`). Prints the figures and the
sync process's peak RSS. Targets (issue 22, tighter than DESIGN.md §5's 3 times and 600 MB): sync ≤ 1.5 times
kubectl, peak RSS ≤ 400 MB.

Then, for scale, what PostgreSQL alone takes: every row the sync wrote (the mirrored kinds, the derived devices,
intervals and findings, the change feed) is copied out and written back with plain `COPY ... FROM STDIN` into
unindexed temporary tables of the same shape, and both rates are printed side by side: rows written per second of
the whole sync (listing, parsing, deriving, indexes and all), and rows per second of the bare COPY.

    .venv/bin/python bench/sync_large.py [--scenario large] [--keep-db]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
KINDS = ["namespaces", "nodes", "pods", "resourcequotas", "events", "resourceslices", "deviceclasses",
         "resourceclaims", "resourceclaimtemplates"]
PY = sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def recreate_database(db: str) -> str:
    """Drop (closing its connections) and create an empty PostgreSQL database; returns its DSN for psycopg."""
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{db}"')
    return f"postgresql://postgres@127.0.0.1:5432/{db}"


WRITTEN_TABLES = ["inventory_namespace", "inventory_node", "inventory_pod", "inventory_resourcequota", "inventory_event",
                  "inventory_resourceslice", "inventory_deviceclass", "inventory_resourceclaim",
                  "inventory_resourceclaimtemplate", "inventory_device", "inventory_finding",
                  "inventory_allocationinterval", "inventory_claimallocation", "inventory_changeevent"]


def plain_copy(dsn: str) -> tuple[int, float]:
    """(rows, seconds): the sync's rows written again by bare COPY FROM STDIN into unindexed temporary tables."""
    rows, seconds = 0, 0.0
    with psycopg.connect(dsn) as conn:
        for table in WRITTEN_TABLES:
            with conn.cursor().copy(f"COPY {table} TO STDOUT") as out:
                data = b"".join(bytes(chunk) for chunk in out)
            conn.execute(f"CREATE TEMP TABLE copy_{table} (LIKE {table})")
            started = time.perf_counter()
            with conn.cursor().copy(f"COPY copy_{table} FROM STDIN") as into:
                into.write(data)
            seconds += time.perf_counter() - started
            rows += conn.execute(f"SELECT count(*) FROM copy_{table}").fetchone()[0]  # noqa: S608
        conn.rollback()
    return rows, seconds


def large_database(db: str, *, reuse: bool, scenario: str = "large") -> dict[str, str]:
    """The environment of a portal database holding `scenario` synced once (created afresh unless `reuse`)."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "DJANGO_SECRET_KEY": "bench",
           "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{db}",
           "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")}
    if reuse:
        subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        return env
    kubeconfig = str(Path(tempfile.mkdtemp(prefix="portal-bench-")) / "kubeconfig")
    sim = subprocess.Popen([PY, "-m", "kubesim", "--scenario", scenario, "--port", str(free_port()),
                            "--write-kubeconfig", kubeconfig], cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        while not Path(kubeconfig).exists():
            if sim.poll() is not None:
                raise SystemExit("simulator exited")
            time.sleep(0.5)
        recreate_database(db)
        subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run([PY, "manage.py", "cluster_add", scenario, "--kubeconfig", kubeconfig], cwd=ROOT, env=env,
                       check=True, stdout=subprocess.DEVNULL)
        print(f"syncing {scenario} …", flush=True)
        subprocess.run([PY, "manage.py", "sync", "--cluster", scenario, "--once"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)
    finally:
        sim.terminate()
        sim.wait(timeout=30)
    return env


def run_measured(cmd: list[str], env: dict[str, str] | None = None, stdout: int | None = None,
                 profile: str | None = None) -> tuple[float, int, int]:
    """Run a command; return (seconds, peak RSS in KiB, exit code) using wait4's rusage for that child. `profile`:
    sample it with py-spy (attached to its pid) into that file."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=stdout if stdout is not None else subprocess.DEVNULL)
    spy = subprocess.Popen([str(Path(PY).parent / "py-spy"), "record", "--pid", str(proc.pid), "--format", "raw",
                            "--output", profile, "--rate", "50"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) if profile else None
    _, status, usage = os.wait4(proc.pid, 0)
    if spy is not None:
        spy.wait(timeout=60)  # py-spy writes its file when the process it samples exits
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - started, usage.ru_maxrss, proc.returncode


def kubectl_all(kubeconfig: str) -> float:
    total = 0.0
    for kind in KINDS:
        seconds, _, code = run_measured(
            ["kubectl", "--kubeconfig", kubeconfig, "get", kind, "-A", "-o", "json", "--chunk-size=500"])
        if code != 0:
            raise SystemExit(f"kubectl get {kind} failed with {code}")
        total += seconds
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="large")
    parser.add_argument("--db", default="portal_bench")
    parser.add_argument("--profile", metavar="FILE", help="Run the sync under py-spy (pip install '.[bench]') and write "
                        "its samples here (raw collapsed stacks); the timing then includes py-spy's overhead.")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="portal-bench-"))
    kubeconfig = str(workdir / "kubeconfig")
    port = free_port()
    print(f"starting the simulator with scenario {args.scenario!r} …", flush=True)
    started = time.perf_counter()
    sim = subprocess.Popen([PY, "-m", "kubesim", "--scenario", args.scenario, "--port", str(port),
                            "--write-kubeconfig", kubeconfig], cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        while not Path(kubeconfig).exists():
            if sim.poll() is not None:
                raise SystemExit("simulator exited")
            time.sleep(0.5)
        print(f"simulator ready in {time.perf_counter() - started:.1f}s", flush=True)

        recreate_database(args.db)
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "DJANGO_SECRET_KEY": "bench",
               "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{args.db}",
               "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")}
        subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        subprocess.run([PY, "manage.py", "cluster_add", "large", "--kubeconfig", kubeconfig], cwd=ROOT, env=env,
                       check=True, stdout=subprocess.DEVNULL)

        kubectl_before = kubectl_all(kubeconfig)
        print(f"kubectl (run 1): {kubectl_before:.2f}s", flush=True)
        out = workdir / "sync.txt"
        with out.open("wb") as fh:
            sync_seconds, sync_rss_kib, code = run_measured(
                [PY, "manage.py", "sync", "--cluster", "large", "--once"], env=env, stdout=fh.fileno(),
                profile=args.profile)
        print(out.read_text(), flush=True)
        if code != 0:
            raise SystemExit(f"sync failed with exit code {code}")
        kubectl_after = kubectl_all(kubeconfig)
        print(f"kubectl (run 2): {kubectl_after:.2f}s", flush=True)
    finally:
        sim.terminate()
        sim.wait(timeout=30)

    kubectl_mean = (kubectl_before + kubectl_after) / 2
    copy_rows, copy_seconds = plain_copy(f"postgresql://postgres@127.0.0.1:5432/{args.db}")
    result = {
        "scenario": args.scenario,
        "sync_once_seconds": round(sync_seconds, 2),
        "kubectl_seconds_mean": round(kubectl_mean, 2),
        "kubectl_seconds_runs": [round(kubectl_before, 2), round(kubectl_after, 2)],
        "ratio_sync_to_kubectl": round(sync_seconds / kubectl_mean, 2),
        "sync_peak_rss_mb": round(sync_rss_kib / 1024, 1),
        "rows_written": copy_rows,
        "sync_rows_per_second": round(copy_rows / sync_seconds),
        "plain_copy_seconds": round(copy_seconds, 2),
        "plain_copy_rows_per_second": round(copy_rows / copy_seconds),
        "targets": {"ratio": 1.5, "peak_rss_mb": 400},
    }
    print(json.dumps(result, indent=2))
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / f"sync_{args.scenario}.json").write_text(json.dumps(result, indent=2))
    print(f"rows written: {copy_rows:,}; sync {result['sync_rows_per_second']:,} rows/s, plain COPY of the same rows "
          f"{result['plain_copy_rows_per_second']:,} rows/s")
    ok = result["ratio_sync_to_kubectl"] <= 1.5 and result["sync_peak_rss_mb"] <= 400
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
