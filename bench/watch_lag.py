"""Benchmark: event → derived-row lag under simulator churn on the `large` scenario.

The simulator runs in this process so every change it makes is timestamped at the source; the portal runs as it
does in production: a Celery worker for the watch queue (thread pool), a worker for the default queue (the catalog's
capacity recomputation that sync batches trigger) and beat, in their own processes, writing to PostgreSQL. A poller here watches the database and records, for every churned object, when the row carrying that
resourceVersion (or its tombstone) became visible. Derived rows (devices, findings, intervals) are written in the
same transaction as the mirrored row, so that moment is also when the derived rows are visible.

    .venv/bin/python bench/watch_lag.py [--rate 500] [--seconds 60] [--scenario large]

Target (DESIGN.md §5, issue 22): p99 ≤ 1 s at 500 changes/s, nothing lost.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubesim import Simulator  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from sync_large import recreate_database  # noqa: E402

PY = sys.executable
TARGET_P99_S = 1.0
TABLES = {"pods": "inventory_pod", "nodes": "inventory_node", "resourceslices": "inventory_resourceslice"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Recorder:
    """Wraps the simulator store: remembers (kind, uid, resourceVersion, deleted, time) of every churn write."""

    def __init__(self, sim: Simulator) -> None:
        self.lock = threading.Lock()
        self.pending: list[tuple[str, str, int, bool, float]] = []
        self.active = False
        store = sim.store
        for method in ("create", "update", "delete"):
            original = getattr(store, method)

            def wrapped(plural: str, *args: object, _original=original, _method=method, **kwargs: object) -> dict:
                result = _original(plural, *args, **kwargs)
                if self.active and plural in TABLES and isinstance(result, dict):
                    meta = result.get("metadata") or {}
                    with self.lock:
                        self.pending.append((plural, meta["uid"], int(meta["resourceVersion"]),
                                             _method == "delete", time.time()))
                return result

            setattr(store, method, wrapped)


Write = tuple[int, str, str, int, bool, float]  # cluster id, kind, uid, resourceVersion, deleted, time of the write


def poll(dsn: str, cluster_id: int, recorder: Recorder, stop: threading.Event, lags: list[float]) -> None:
    """poll_clusters for the one cluster whose simulator runs in this process."""

    def take() -> list[Write]:
        with recorder.lock:
            writes = [(cluster_id, *write) for write in recorder.pending]
            recorder.pending.clear()
        return writes

    found: list[tuple[int, float]] = []
    poll_clusters(dsn, take, stop, found)
    lags.extend(lag for _, lag in found)


def poll_clusters(dsn: str, take: Callable[[], list[Write]], stop: threading.Event,
                  lags: list[tuple[int, float]]) -> None:
    """Until `stop` and nothing waits: for every churn write `take` hands over, (cluster id, seconds until the row
    carrying that resourceVersion, or its tombstone, was visible in PostgreSQL) into `lags`; inf for a write still not
    visible 30 s after it was made once `stop` is set.

    Cheap for the system it measures, whatever the backlog: a poll reads each (cluster, kind)'s saved
    resourceVersion, which the sync commits in the same transaction as the batch's rows, and looks up by uid only the
    writes at or below it, once. A write whose row does not show it then (an event lost, or a relist that has not
    tombstoned yet) is looked up on every poll until it does. The lag is taken when the row is seen."""
    waiting: dict[tuple[int, str], list[tuple[int, int, Write]]] = {}  # heaps by resourceVersion
    suspects: list[Write] = []
    sequence = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set() or suspects or any(waiting.values()):
            for write in take():
                sequence += 1
                heapq.heappush(waiting.setdefault((write[0], write[1]), []), (write[3], sequence, write))
            due = list(suspects)
            for (cluster_id, kind), heap in waiting.items():
                if not heap:
                    continue
                row = conn.execute("SELECT resource_version FROM inventory_syncstate WHERE cluster_id = %s AND "
                                   "kind = %s", (cluster_id, kind)).fetchone()
                mark = int(row[0]) if row and str(row[0]).isdigit() else 0
                while heap and heap[0][0] <= mark:
                    due.append(heapq.heappop(heap)[2])
            now = time.time()
            if stop.is_set():  # what has waited 30 s after the churn stopped is lost
                for heap in waiting.values():
                    due.extend(item[2] for item in heap)
                    heap.clear()
            groups: dict[tuple[int, str], list[str]] = {}
            for cluster_id, kind, uid, *_ in due:
                groups.setdefault((cluster_id, kind), []).append(uid)
            seen: dict[tuple[int, str, str], tuple[int, bool]] = {}
            for (cluster_id, kind), uids in groups.items():
                rows = conn.execute(
                    f"SELECT uid, resource_version, deleted_at IS NOT NULL FROM {TABLES[kind]} "  # noqa: S608
                    "WHERE cluster_id = %s AND uid = ANY(%s)", (cluster_id, uids)).fetchall()
                for uid, rv, deleted in rows:
                    seen[(cluster_id, kind, str(uid))] = (int(rv or 0), deleted)
            suspects = []
            for write in due:
                cluster_id, kind, uid, rv, deleted, changed_at = write
                row = seen.get((cluster_id, kind, uid))
                if row and (row[1] if deleted else row[0] >= rv):
                    lags.append((cluster_id, now - changed_at))
                elif stop.is_set() and now - changed_at > 30:
                    lags.append((cluster_id, float("inf")))  # never arrived
                else:
                    suspects.append(write)
            time.sleep(0.02)


CPU_GROUPS = (("web", "gunicorn"), ("watch worker", "-Q watch"), ("default worker", "-Q default"), ("beat", " beat "),
              ("locust", "locust"), ("postgresql", "postgres:"), ("postgresql", "/bin/postgres "),
              ("redis", "redis-server"))


def cpu_by_group(*, reaped_as: str = "locust") -> dict[str, float]:
    """CPU seconds (user + system) so far of every process on the machine with its reaped children, summed by what
    it is (CPU_GROUPS). This process is "simulator" (the simulator, its churn, the lag poller); the children it reaped
    are `reaped_as` (during a phase of bench/load.py, Locust is the only one that ends). PostgreSQL's backends that ended count through
    the postmaster. Differences of two calls tell where a phase's CPU went."""
    tick = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        own, reaped = (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick
        if int(entry.name) == os.getpid():
            totals["simulator"] = totals.get("simulator", 0.0) + own
            totals[reaped_as] = totals.get(reaped_as, 0.0) + reaped
            continue
        group = next((name for name, marker in CPU_GROUPS if marker in f" {command} "), "other")
        totals[group] = totals.get(group, 0.0) + own + reaped
    return totals


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def roll_chargeback_up(run: dict[str, Any]) -> None:
    """Chargeback's hourly rollups, rolled up (a few minutes on `large`, whose intervals go back months), as a portal
    that has been running has them: the measurements then see the beat's steady work, not a backfill."""
    print("rolling chargeback up …", flush=True)
    subprocess.run([PY, "-c", "import django; django.setup(); from portal.chargeback.rollups import refresh; "
                    "refresh()"], **run, stdout=subprocess.DEVNULL)


def synced_simulator(scenario: str, db: str, workdir: Path, env_extra: dict[str, str], *,
                     roll_up: bool = True) -> tuple[Simulator, Recorder, dict[str, str], int]:
    """The simulator with `scenario` in this process (its churn writes recorded), synced once into a fresh
    database: (simulator, recorder, the portal's environment, cluster id). `roll_up=False`: the caller rolls the
    chargeback up itself, after what it still writes (prices reaching back months mark every hour again)."""
    print(f"loading the {scenario!r} scenario …", flush=True)
    sim = Simulator(scenario=scenario, port=free_port()).start()
    recorder = Recorder(sim)
    kubeconfig = sim.write_kubeconfig(workdir / "kubeconfig")
    dsn = recreate_database(db)
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.base",
           "DATABASE_URL": dsn.replace("postgresql", "postgres"), "REDIS_URL": redis_url,
           "PORTAL_WATCHERS_ENSURE_SECONDS": "2", "PORTAL_LOG_LEVEL": "WARNING", **env_extra}
    subprocess.run(["redis-cli", "-u", redis_url, "flushdb"], check=True, stdout=subprocess.DEVNULL)
    run = {"cwd": ROOT, "env": env, "check": True}
    subprocess.run([PY, "manage.py", "migrate", "-v0"], **run)
    subprocess.run([PY, "manage.py", "cluster_add", scenario, "--kubeconfig", str(kubeconfig)], **run,
                   stdout=subprocess.DEVNULL)
    print("initial sync --once …", flush=True)
    subprocess.run([PY, "manage.py", "sync", "--cluster", scenario, "--once"], **run, stdout=subprocess.DEVNULL)
    if roll_up:
        roll_chargeback_up(run)
    with psycopg.connect(dsn) as conn:
        cluster_id = conn.execute("SELECT id FROM inventory_cluster WHERE name = %s", (scenario,)).fetchone()[0]
    return sim, recorder, env, cluster_id


def watch_threads(clusters: int) -> int:
    from inventory.k8s.types import KINDS

    return len(KINDS) * clusters + 4


def start_workers(env: dict[str, str], workdir: Path, clusters: int = 1) -> list[subprocess.Popen]:
    """The production topology (`make worker`): watchers on their own thread-pool worker, CPU-heavy work (the
    catalog's capacity recomputation after sync batches) on a separate default-queue worker process, and beat.
    Each in its own session (stop with os.killpg); logs in `workdir`. The watch pool has a thread for every
    (cluster, kind) watcher, as docs/deploy.md requires (a kind the cluster does not serve holds one too), and 4 more
    (queue positions, a successor window being handed over)."""
    celery = [PY, "-m", "celery", "-A", "portal"]
    spawn = {"cwd": ROOT, "env": env, "stderr": subprocess.STDOUT, "start_new_session": True}
    commands = {
        "watch": [*celery, "worker", "-Q", "watch", "-P", "threads", "-c", str(watch_threads(clusters)), "-n",
                  "watch@%h", "--loglevel", "WARNING"],
        "default": [*celery, "worker", "-Q", "default", "-P", "solo", "-n", "default@%h", "--loglevel", "WARNING"],
        "beat": [*celery, "beat", "--loglevel", "WARNING", "-s", str(workdir / "beat-schedule")],
    }
    return [subprocess.Popen(command, stdout=(workdir / f"{name}.log").open("wb"), **spawn)
            for name, command in commands.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="large")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--db", default="portal_bench_lag")
    parser.add_argument("--profile", metavar="FILE", help="Sample the watch worker with py-spy (pip install "
                        "'.[bench]') while the churn runs; raw collapsed stacks (bench/profile_summary.py reads them).")
    parser.add_argument("--profile-worker", choices=["watch", "default", "both", "bench"], default="watch",
                        help="Which process --profile samples: the watchers, the default queue (capacity, beat's "
                        "tasks), both workers (into FILE.watch and FILE.default), or this one (the simulator, its "
                        "churn and the lag poller).")
    parser.add_argument("--gil", action="store_true", help="With --profile: sample only the thread holding the "
                        "interpreter lock (where the process's CPU goes) instead of every thread, idle ones too "
                        "(where its threads wait).")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="portal-lag-"))
    sim, recorder, env, cluster_id = synced_simulator(args.scenario, args.db, workdir, {
        "DJANGO_SECRET_KEY": "bench", "PORTAL_WATCH_WINDOW_SECONDS": "120"})
    dsn = env["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
    procs = start_workers(env, workdir)
    lags: list[float] = []
    stop = threading.Event()
    try:
        time.sleep(12)  # beat enqueues the windows; the watchers resume from the saved resourceVersions
        poller = threading.Thread(target=poll, args=(dsn, cluster_id, recorder, stop, lags), daemon=True)
        poller.start()
        recorder.active = True
        print(f"churning {args.rate:g} changes/s for {args.seconds:g} s …", flush=True)
        sim.churn.start(rate_per_second=args.rate, seed=7)
        started, changes_before, cpu_before = time.monotonic(), sim.churn.changes, cpu_by_group(reaped_as="py-spy")
        sampled = ["watch", "default"] if args.profile_worker == "both" else [args.profile_worker]
        pids = {"watch": procs[0].pid, "default": procs[1].pid, "bench": os.getpid()}
        spies = [subprocess.Popen(
            [str(Path(PY).parent / "py-spy"), "record", "--pid", str(pids[name]),
             "--gil" if args.gil else "--idle", "--duration", str(int(args.seconds)), "--format", "raw", "--rate", "50",
             "--output", args.profile if len(sampled) == 1 else f"{args.profile}.{name}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for name in sampled] if args.profile else []
        time.sleep(args.seconds)
        for spy in spies:
            spy.wait(timeout=60)
        sim.churn.stop()
        elapsed = time.monotonic() - started
        cpu = {group: round((seconds - cpu_before.get(group, 0.0)) / elapsed, 2)
               for group, seconds in sorted(cpu_by_group(reaped_as="py-spy").items())}
        achieved = (sim.churn.changes - changes_before) / elapsed
        recorder.active = False
        stop.set()
        poller.join(timeout=60)
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)  # the windows would finish their 120 s otherwise
            proc.wait(timeout=30)
        sim.stop()

    finite = [lag for lag in lags if lag != float("inf")]
    result = {
        "scenario": args.scenario, "target_rate": args.rate, "achieved_changes_per_second": round(achieved, 1),
        "events_measured": len(lags), "events_lost": len(lags) - len(finite),
        "lag_p50_s": round(percentile(finite, 0.50), 3), "lag_p99_s": round(percentile(finite, 0.99), 3),
        "lag_max_s": round(max(finite), 3), "target_p99_s": TARGET_P99_S, "cpu_cores_by_process": cpu,
    }
    print(json.dumps(result, indent=2))
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / f"watch_lag_{args.scenario}.json").write_text(json.dumps(result, indent=2))
    ok = result["lag_p99_s"] <= TARGET_P99_S and not result["events_lost"]
    print("target met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
