"""Benchmark: initial sync and watch lag with N clusters, each served by its own simulator process (the scaling curve).

For each N in --clusters (default 1,5,10), from scratch:

1. starts N simulators at once, each in its own process (bench/scale_child.py: kubesim's Simulator loading
   --scenario; it timestamps every churn write of pods, nodes and ResourceSlices at the source and streams it here);
2. creates a fresh PostgreSQL database (`portal_bench_scale`), flushes the Redis DB (BENCH_REDIS_URL, default
   redis://127.0.0.1:6379/8), migrates and registers the clusters c1 … cN;
3. initial sync: kubectl lists every cluster (bench/sync_large.py's kinds, one loop per cluster, the N loops
   concurrently), then `manage.py sync --cluster cK --once` runs for the N clusters as N concurrent processes
   (wall time from the first start to the last end, each process's peak RSS from wait4 as in sync_large.py), then
   kubectl again; the ratio uses kubectl's mean, as sync_large.py does. Also recorded: the database's size;
4. watch lag: the production topology of bench/watch_lag.py (watch worker, default worker, beat), the watch worker's
   thread pool sized for every (cluster, kind) watcher (len(inventory.k8s.types.KINDS) * N + 4), waits until every
   watcher holds its lease, churns every cluster at --rate-per-cluster for --seconds and measures, for each churn
   write, when its row (that resourceVersion, or the tombstone) became visible in PostgreSQL, as watch_lag.py does.
   A write still not visible 30 s after it was made once the churn stopped is counted lost.

Beat's chargeback rollup is pushed out of the run (PORTAL_CHARGEBACK_ROLLUP_SECONDS=86400, the interval beat's
`portal-chargeback-rollups` entry reads): its first run backfills months of hourly rollups for each `large` cluster
(minutes per cluster, once in a portal's life), which would otherwise load the machine while the lag is measured.
The simulators' own memory (RSS of their processes) is recorded so their footprint can be told apart.

    .venv/bin/python bench/scale_clusters.py [--clusters 1,5,10] [--scenario large] [--rate-per-cluster 20]
        [--seconds 60]

Each running watch window holds a PostgreSQL connection (Django's, per thread), so N clusters need up to
len(KINDS) * N + 8 connections (the watch pool, the default worker, beat, this benchmark's poller and sampler).
An N for which the server's max_connections, less the connections other databases
use, is too small is skipped (it would fail with "too many clients", and take the connections others' benchmarks
need) unless --ignore-max-connections; docs/deploy.md puts PgBouncer in between for this reason.

Prints one row per N and writes bench/results/scale_clusters.json (after every N); exits 1 if a churn write was
lost or an N was skipped. Everything (simulators, workers, PostgreSQL, kubectl) shares this machine's cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_large import KINDS as KUBECTL_KINDS
from sync_large import kubectl_all, recreate_database, run_measured
from watch_lag import Write, free_port, percentile, poll_clusters, start_workers, watch_threads

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inventory.k8s.types import KINDS  # noqa: E402

PY = sys.executable
CHILD = ROOT / "bench" / "scale_child.py"
OTHER_CONNECTIONS = 4  # the default worker, beat, the poller and the sampler


class Feed:
    """Churn writes streamed by the simulator processes, waiting for the poller."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: list[Write] = []

    def add(self, write: Write) -> None:
        with self.lock:
            self.pending.append(write)

    def take(self) -> list[Write]:
        with self.lock:
            writes, self.pending = self.pending, []
        return writes


class SimChild:
    """One simulator process (bench/scale_child.py) and the thread reading its output."""

    def __init__(self, index: int, scenario: str, workdir: Path, feed: Feed) -> None:
        self.name = f"c{index}"
        self.kubeconfig = workdir / f"{self.name}.kubeconfig"
        self.feed = feed
        self.cluster_id = 0  # known once the cluster is registered, before any churn
        self.info: dict = {}
        self.churned: dict = {}
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.proc = subprocess.Popen(
            [PY, str(CHILD), "--scenario", scenario, "--port", str(free_port()), "--kubeconfig", str(self.kubeconfig),
             "--name", self.name, "--seed", str(index)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=(workdir / f"{self.name}.log").open("wb"),
            text=True, bufsize=1, start_new_session=True)
        threading.Thread(target=self._read, name=f"read-{self.name}", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout or ():
            message = json.loads(line)
            if "kind" in message:
                self.feed.add((self.cluster_id, message["kind"], message["uid"], int(message["rv"]),
                               bool(message["deleted"]), float(message["t"])))
            elif message.get("ready"):
                self.info = message
                self.ready.set()
            elif message.get("stopped"):
                self.churned = message
                self.stopped.set()
        self.ready.set()  # the process ended: nobody waits forever
        self.stopped.set()

    def send(self, command: str) -> None:
        if self.proc.stdin is None:
            raise RuntimeError(f"simulator {self.name} has no stdin")
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def memory_kib(self) -> tuple[int, int]:
        """(current, peak) resident set size of the simulator process, KiB."""
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)


def sample_connections(dsn: str, db: str, stop: threading.Event, peak: list[int]) -> None:
    """The most connections to `db` seen (once a second) until `stop`."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.wait(1.0):
            count = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (db,)).fetchone()[0]
            peak[0] = max(peak[0], count)


def kubectl_round(children: list[SimChild]) -> tuple[float, list[float]]:
    """kubectl lists every cluster, one sync_large.kubectl_all loop per cluster, concurrently: (wall s, per cluster)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(len(children)) as pool:
        per_cluster = list(pool.map(kubectl_all, [str(child.kubeconfig) for child in children]))
    return time.perf_counter() - started, per_cluster


def sync_all(children: list[SimChild], env: dict[str, str], workdir: Path) -> tuple[float, list[tuple[float, int]]]:
    """`manage.py sync --cluster cK --once` for every cluster as concurrent processes: (wall s from the first start to
    the last end, [(seconds, peak RSS KiB)] per cluster)."""

    def one(child: SimChild) -> tuple[float, int]:
        out = workdir / f"sync-{child.name}.txt"
        with out.open("wb") as fh:
            seconds, rss_kib, code = run_measured([PY, "manage.py", "sync", "--cluster", child.name, "--once"],
                                                  env=env, stdout=fh.fileno())
        if code != 0:
            raise SystemExit(f"sync of {child.name} failed with exit code {code}:\n{out.read_text()[-2000:]}")
        return seconds, rss_kib

    started = time.perf_counter()
    with ThreadPoolExecutor(len(children)) as pool:
        per_cluster = list(pool.map(one, children))
    return time.perf_counter() - started, per_cluster


def wait_for_watchers(dsn: str, redis_url: str, clusters: int, timeout: float) -> tuple[float, int, int]:
    """Until every (cluster, kind) sync state exists and its lease is held (the watchers run): (seconds, held,
    expected). Gives up after `timeout` seconds."""
    started = time.monotonic()
    expected = len(KINDS) * clusters
    client = redis.Redis.from_url(redis_url)
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            ids = [row[0] for row in conn.execute("SELECT id FROM inventory_syncstate WHERE kind = ANY(%s)",
                                                  (list(KINDS),)).fetchall()]
            held = client.exists(*[f"portal:lease:sync:{state_id}" for state_id in ids]) if ids else 0
            if held >= expected or time.monotonic() - started > timeout:
                return time.monotonic() - started, held, expected
            time.sleep(0.5)


def portal_env(db: str, redis_url: str) -> dict[str, str]:
    """bench/watch_lag.py's synced_simulator environment, and the chargeback rollup beat pushed out of the run."""
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.base",
            "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{db}", "REDIS_URL": redis_url,
            "PORTAL_WATCHERS_ENSURE_SECONDS": "2", "PORTAL_LOG_LEVEL": "WARNING", "DJANGO_SECRET_KEY": "bench",
            "PORTAL_WATCH_WINDOW_SECONDS": "120", "PORTAL_CHARGEBACK_ROLLUP_SECONDS": "86400"}


def lag_phase(children: list[SimChild], dsn: str, db: str, rate: float, seconds: float) -> dict:
    """Churn every cluster at `rate` for `seconds`; the lag of every recorded write."""
    feed = children[0].feed
    lags: list[tuple[int, float]] = []
    stop = threading.Event()
    peak_connections = [0]
    poller = threading.Thread(target=poll_clusters, args=(dsn, feed.take, stop, lags), daemon=True)
    sampler = threading.Thread(target=sample_connections, args=(dsn, db, stop, peak_connections), daemon=True)
    poller.start()
    sampler.start()
    for child in children:
        child.stopped.clear()
        child.send(f"churn {rate}")
    time.sleep(seconds)
    for child in children:
        child.send("stop")
    for child in children:
        if not child.stopped.wait(60) or not child.churned:
            raise SystemExit(f"simulator {child.name} did not stop its churn")
    stop.set()  # every write is in the feed: the "stopped" line comes after the last one
    poller.join(timeout=120)
    sampler.join(timeout=10)
    finite = [lag for _, lag in lags if lag != float("inf")]
    if not finite:
        raise SystemExit("no churn write was measured")
    by_cluster: dict[str, dict] = {}
    for child in children:
        mine = [lag for cluster_id, lag in lags if cluster_id == child.cluster_id]
        arrived = [lag for lag in mine if lag != float("inf")]
        by_cluster[child.name] = {
            "changes_per_second": round(child.churned["changes"] / child.churned["seconds"], 1),
            "events_measured": len(mine), "events_lost": len(mine) - len(arrived),
            "lag_p99_s": round(percentile(arrived, 0.99), 3) if arrived else None}
    return {
        "changes_per_second": round(sum(c.churned["changes"] / c.churned["seconds"] for c in children), 1),
        "events_measured": len(lags), "events_lost": len(lags) - len(finite),
        "lag_p50_s": round(percentile(finite, 0.50), 3), "lag_p95_s": round(percentile(finite, 0.95), 3),
        "lag_p99_s": round(percentile(finite, 0.99), 3), "lag_max_s": round(max(finite), 3),
        "db_connections_peak": peak_connections[0], "by_cluster": by_cluster,
    }


def worker_db_errors(workdir: Path) -> int:
    """Lines of the workers' logs telling of database connection trouble (too many clients, say)."""
    count = 0
    for log in ("watch.log", "default.log", "beat.log"):
        path = workdir / log
        if path.exists():
            text = path.read_text(errors="replace")
            count += text.count("too many clients") + text.count("database connection problem")
    return count


def connections_free(db: str) -> tuple[int, int]:
    """(max_connections, client connections to other databases than `db`) of the PostgreSQL server."""
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        max_connections = int(conn.execute("SHOW max_connections").fetchone()[0])
        others = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                              "AND datname IS DISTINCT FROM %s", (db,)).fetchone()[0]
    return max_connections, others - 1  # not this one


def run_n(n: int, args: argparse.Namespace, redis_url: str) -> dict:
    threads = watch_threads(n)
    needed = threads + OTHER_CONNECTIONS
    max_connections, others = connections_free(args.db)
    if needed > max_connections - others and not args.ignore_max_connections:
        reason = (f"{threads} watch threads need about {needed} PostgreSQL connections; max_connections is "
                  f"{max_connections} and {others} are in use by other databases")
        print(f"\n== {n} cluster(s): SKIPPED: {reason} (--ignore-max-connections runs it anyway)", flush=True)
        return {"clusters": n, "skipped": reason}
    workdir = Path(tempfile.mkdtemp(prefix=f"portal-scale-{n}-"))
    feed = Feed()
    children: list[SimChild] = []
    procs: list[subprocess.Popen] = []
    try:
        print(f"\n== {n} cluster(s): starting {n} simulator(s) with {args.scenario!r} …", flush=True)
        started = time.monotonic()
        children = [SimChild(index, args.scenario, workdir, feed) for index in range(1, n + 1)]
        for child in children:
            child.ready.wait()
            if not child.info:
                raise SystemExit(f"simulator {child.name} exited; see {workdir / (child.name + '.log')}")
        sims_loaded = time.monotonic() - started
        sims_rss_loaded = sum(child.memory_kib()[0] for child in children)
        objects = sum(sum(child.info["objects"].values()) for child in children)
        print(f"simulators ready in {sims_loaded:.1f} s ({objects} objects, {sims_rss_loaded / 1024:.0f} MB RSS)",
              flush=True)

        dsn = recreate_database(args.db)
        env = portal_env(args.db, redis_url)
        subprocess.run(["redis-cli", "-u", redis_url, "flushdb"], check=True, stdout=subprocess.DEVNULL)
        run = {"cwd": ROOT, "env": env, "check": True}
        subprocess.run([PY, "manage.py", "migrate", "-v0"], **run)
        for child in children:
            subprocess.run([PY, "manage.py", "cluster_add", child.name, "--kubeconfig", str(child.kubeconfig)], **run,
                           stdout=subprocess.DEVNULL)
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids = dict(conn.execute("SELECT name, id FROM inventory_cluster").fetchall())
        for child in children:
            child.cluster_id = ids[child.name]

        kubectl_before, kubectl_before_each = kubectl_round(children)
        print(f"kubectl (run 1): {kubectl_before:.2f} s", flush=True)
        sync_seconds, sync_each = sync_all(children, env, workdir)
        print(f"sync --once of {n} cluster(s), concurrently: {sync_seconds:.2f} s", flush=True)
        kubectl_after, kubectl_after_each = kubectl_round(children)
        print(f"kubectl (run 2): {kubectl_after:.2f} s", flush=True)
        kubectl_mean = (kubectl_before + kubectl_after) / 2
        with psycopg.connect(dsn, autocommit=True) as conn:
            db_bytes = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]

        procs = start_workers(env, workdir, clusters=n)
        time.sleep(12)  # beat enqueues the windows; the watchers resume from the saved resourceVersions
        waited, held, expected = wait_for_watchers(dsn, redis_url, n, timeout=60 + 5 * n)
        if held < expected:
            print(f"WARNING: only {held} of {expected} watchers hold their lease after {12 + waited:.0f} s", flush=True)
        time.sleep(2)  # the last watchers open their watch requests
        print(f"{held}/{expected} watchers running after {12 + waited:.0f} s; churn at {args.rate_per_cluster:g}/s "
              f"per cluster for {args.seconds:g} s …", flush=True)
        lag = lag_phase(children, dsn, args.db, args.rate_per_cluster, args.seconds)
        sims_memory = [child.memory_kib() for child in children]
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the windows would finish their 120 s otherwise
            proc.wait(timeout=30)
        for child in children:
            child.close()

    print(f"lag p50 {lag['lag_p50_s']:.2f} s  p95 {lag['lag_p95_s']:.2f} s  p99 {lag['lag_p99_s']:.2f} s  "
          f"max {lag['lag_max_s']:.2f} s  ({lag['events_measured']} events, {lag['events_lost']} lost, "
          f"{lag['changes_per_second']:.1f} changes/s)", flush=True)
    rss = [kib for _, kib in sync_each]
    return {
        "clusters": n, "objects_listed": objects,
        "simulators_load_seconds": round(sims_loaded, 1),
        "simulators_rss_mb_loaded": round(sims_rss_loaded / 1024, 1),
        "simulators_rss_mb_end": round(sum(current for current, _ in sims_memory) / 1024, 1),
        "simulators_rss_mb_peak": round(sum(peak for _, peak in sims_memory) / 1024, 1),
        "kubectl_seconds_mean": round(kubectl_mean, 2),
        "kubectl_seconds_runs": [round(kubectl_before, 2), round(kubectl_after, 2)],
        "kubectl_seconds_per_cluster_max": round(max(kubectl_before_each + kubectl_after_each), 2),
        "sync_once_seconds": round(sync_seconds, 2),
        "sync_seconds_per_cluster_max": round(max(seconds for seconds, _ in sync_each), 2),
        "ratio_sync_to_kubectl": round(sync_seconds / kubectl_mean, 2),
        "sync_peak_rss_mb_max": round(max(rss) / 1024, 1), "sync_peak_rss_mb_sum": round(sum(rss) / 1024, 1),
        "database_mb_after_sync": round(db_bytes / 1024**2, 1),
        "watch_threads": threads, "postgres_max_connections": max_connections,
        "postgres_connections_other_databases": others,
        "watchers_running": held, "watchers_expected": expected, "worker_db_error_lines": worker_db_errors(workdir),
        "rate_per_cluster": args.rate_per_cluster, "seconds": args.seconds, "lag": lag, "logs": str(workdir),
    }


def print_table(runs: list[dict]) -> None:
    print(f"\n{'clusters':>8} {'objects':>9} {'kubectl s':>9} {'sync s':>8} {'ratio':>6} {'RSS max/sum MB':>15} "
          f"{'threads':>7} {'churn/s':>7} {'p50 s':>6} {'p95 s':>6} {'p99 s':>6} {'lost':>5} {'sims MB':>8} "
          f"{'DB MB':>7}")
    for r in runs:
        if "skipped" in r:
            print(f"{r['clusters']:>8}  skipped: {r['skipped']}")
            continue
        lag = r["lag"]
        print(f"{r['clusters']:>8} {r['objects_listed']:>9} {r['kubectl_seconds_mean']:>9.2f} "
              f"{r['sync_once_seconds']:>8.2f} {r['ratio_sync_to_kubectl']:>6.2f} "
              f"{r['sync_peak_rss_mb_max']:>7.0f}/{r['sync_peak_rss_mb_sum']:<7.0f} {r['watch_threads']:>7} "
              f"{lag['changes_per_second']:>7.1f} {lag['lag_p50_s']:>6.2f} {lag['lag_p95_s']:>6.2f} "
              f"{lag['lag_p99_s']:>6.2f} {lag['events_lost']:>5} {r['simulators_rss_mb_peak']:>8.0f} "
              f"{r['database_mb_after_sync']:>7.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="1,5,10", help="Comma-separated cluster counts, each run from scratch.")
    parser.add_argument("--scenario", default="large")
    parser.add_argument("--rate-per-cluster", type=float, default=20.0, help="Churn per cluster, changes per second.")
    parser.add_argument("--seconds", type=float, default=60.0, help="How long the clusters churn.")
    parser.add_argument("--db", default="portal_bench_scale")
    parser.add_argument("--ignore-max-connections", action="store_true",
                        help="Run an N even when PostgreSQL's max_connections looks too small for its watchers.")
    args = parser.parse_args()
    counts = [int(part) for part in args.clusters.split(",") if part.strip()]
    if not counts or min(counts) < 1:
        parser.error("--clusters: positive counts, e.g. 1,5,10")
    redis_url = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/8")

    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    runs: list[dict] = []
    for n in counts:
        runs.append(run_n(n, args, redis_url))
        result = {"scenario": args.scenario, "rate_per_cluster": args.rate_per_cluster, "seconds": args.seconds,
                  "kubectl_kinds": KUBECTL_KINDS, "synced_kinds": len(KINDS), "runs": runs}
        (results / "scale_clusters.json").write_text(json.dumps(result, indent=2))
    print_table(runs)
    print("\nfigures in bench/results/scale_clusters.json")
    lost = sum(r["lag"]["events_lost"] for r in runs if "lag" in r)
    skipped = [r["clusters"] for r in runs if "skipped" in r]
    if lost:
        print(f"{lost} churn write(s) never reached PostgreSQL")
    if skipped:
        print(f"skipped (not enough PostgreSQL connections): {', '.join(map(str, skipped))} cluster(s)")
    return 1 if lost or skipped else 0


if __name__ == "__main__":
    raise SystemExit(main())
