"""Benchmark: the portal under 50 concurrent clients on `large` with churn, and what that load does to sync lag.

One command (`make bench-load`) does everything on this machine:

1. starts the simulator with `large` in this process (every churn write is timestamped at the source), syncs it
   into a fresh PostgreSQL database (`portal_bench_load`), discovers the catalog, prices it and maps the namespaces
   to 20 tenants (as bench/chargeback_large.py does), and creates a tenant member with a browser session and an
   integration user with an API token;
2. runs the production topology: gunicorn with `portal.gunicorn_conf` (3 workers, 4 threads each, production settings
   behind a TLS-terminating proxy), a Celery worker for the watch queue, one for the default queue, and beat;
3. runs three phases of `--phase` seconds with the simulator churning: no clients (the sync lag on its own), two
   Locust clients, one of each kind (each endpoint's latency with little competition), then 50 (half tenants on the
   catalog, offering, free capacity, accelerator and node pages; half integrations on the device, node, pod,
   offering and CMDB lists; no think time by default, so the clients drive the server as hard as it goes). In each,
   the watch lag is measured: churn write in the simulator → row visible in PostgreSQL;
4. prints p50/p95/p99, throughput and the error rate per endpoint, and the lag of the three phases side by side,
   and writes them to bench/results/load_large.json.

    .venv/bin/python bench/load.py [--users 50] [--phase 60] [--rate 50] [--think 0] [--scenario large]

Everything shares the machine's cores (simulator, workers, PostgreSQL, gunicorn and Locust), as it would on one
small node; the figures are what this machine gives, quoted as measured.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chargeback_large import _prices_and_tenants
from watch_lag import (
    Recorder,
    cpu_by_group,
    free_port,
    percentile,
    poll,
    roll_chargeback_up,
    start_workers,
    synced_simulator,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubesim import Simulator  # noqa: E402

PY = sys.executable
BIN = Path(PY).parent

SETUP = """
import json, datetime as dt, django
django.setup()
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.auth.models import Group
from django.contrib.sessions.backends.db import SessionStore
from django.utils import timezone
from apitokens.services import api_token_create
from catalog.models import Lifecycle, Offering
from inventory.models import Node
from portal.models import Tenant, TenantMembership
from portal.tenancy.roles import Role

Offering.objects.filter(lifecycle=Lifecycle.PROPOSED).update(lifecycle=Lifecycle.ACTIVE)  # as if accepted
User = get_user_model()
member = User.objects.create_user("load-member", password=None)
member.groups.add(Group.objects.get_or_create(name=Role.TENANT_MEMBER.value)[0])
TenantMembership.objects.create(user=member, tenant=Tenant.objects.get(slug="bench-1"), role="member")
session = SessionStore()
session[SESSION_KEY] = str(member.pk)
session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]  # a backend Django no longer lists logs the user out
session[HASH_SESSION_KEY] = member.get_session_auth_hash()
session.create()
integration = User.objects.create_user("load-cmdb", password=None)
integration.groups.add(Group.objects.get_or_create(name=Role.PLATFORM_ADMIN.value)[0])
token = api_token_create(actor=None, user=integration, name="load", scopes=["inventory:read"],
                         expires_at=timezone.now() + dt.timedelta(days=1), rate_limit_per_minute=10_000_000)
node_pages = max(1, -(-Node.objects.filter(deleted_at__isnull=True).count() // 50))
print(json.dumps({"node_pages": min(node_pages, 100), "session_cookie": settings.SESSION_COOKIE_NAME, "session": session.session_key,
                  "token": token.plaintext, "offerings": list(Offering.objects.values_list("slug", flat=True)[:50])}))
"""

COLUMNS = ("Request Count", "Failure Count", "Requests/s", "50%", "95%", "99%", "Max Response Time")


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


def _warm(base: str, setup: dict, paths: list[str]) -> None:
    """One request per page and list before measuring (the first validation and capacity reads fill caches)."""
    for path in paths:
        headers = {"X-Forwarded-Proto": "https"}
        if path.startswith("/api/"):
            headers["Authorization"] = f"Bearer {setup['token']}"
        else:
            headers["Cookie"] = f"{setup['session_cookie']}={setup['session']}"
        request = urllib.request.Request(base + path, headers=headers)  # noqa: S310 - loopback
        try:
            with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
                if response.geturl() != base + path:  # urllib follows redirects: to the login page, say
                    raise SystemExit(f"warm-up {path}: redirected to {response.geturl()}")
        except urllib.error.HTTPError as exc:
            raise SystemExit(f"warm-up {path}: {exc.code}") from None


def _lag_phase(sim: Simulator, recorder: Recorder, dsn: str, cluster_id: int, rate: float, seconds: float,
               during: subprocess.Popen | None = None) -> dict:
    lags: list[float] = []
    stop = threading.Event()
    poller = threading.Thread(target=poll, args=(dsn, cluster_id, recorder, stop, lags), daemon=True)
    poller.start()
    recorder.active = True
    sim.churn.start(rate_per_second=rate, seed=int(time.time()))
    started, before, cpu_before = time.monotonic(), sim.churn.changes, cpu_by_group()
    if during is not None:
        during.wait(timeout=seconds + 120)
    else:
        time.sleep(seconds)
    sim.churn.stop()
    elapsed = time.monotonic() - started
    cpu = {group: round((seconds_now - cpu_before.get(group, 0.0)) / elapsed, 2)
           for group, seconds_now in sorted(cpu_by_group().items())}
    recorder.active = False
    stop.set()
    poller.join(timeout=90)
    finite = [lag for lag in lags if lag != float("inf")]
    if not finite:
        raise SystemExit("no churn event was measured")
    return {"changes_per_second": round((sim.churn.changes - before) / elapsed, 1), "events_measured": len(lags),
            "events_lost": len(lags) - len(finite), "lag_p50_s": round(percentile(finite, 0.50), 3),
            "lag_p95_s": round(percentile(finite, 0.95), 3), "lag_p99_s": round(percentile(finite, 0.99), 3),
            "lag_max_s": round(max(finite), 3), "cpu_cores_by_process": cpu}


def _locust(base: str, setup: dict, env: dict, users: int, seconds: float, think: float, prefix: Path,
            logs: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN / "locust"), "-f", str(ROOT / "bench" / "locustfile.py"), "--headless", "--host", base,
         "--users", str(users), "--spawn-rate", str(users), "--run-time", f"{int(seconds)}s", "--csv", str(prefix),
         "--only-summary", "--stop-timeout", "30"],
        cwd=ROOT, env={**env, "LOAD_SETUP": json.dumps(setup), "LOAD_THINK_SECONDS": str(think)},
        stdout=logs["locust"], stderr=subprocess.STDOUT)


def _read_stats(prefix: Path) -> list[dict]:
    with (prefix.parent / f"{prefix.name}_stats.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for row in rows:
        count, failures = int(row["Request Count"]), int(row["Failure Count"])
        out.append({"name": row["Name"], "requests": count, "failures": failures,
                    "error_rate": round(failures / count, 4) if count else 0.0,
                    "rps": round(float(row["Requests/s"]), 1), "p50_ms": int(float(row["50%"] or 0)),
                    "p95_ms": int(float(row["95%"] or 0)), "p99_ms": int(float(row["99%"] or 0)),
                    "max_ms": int(float(row["Max Response Time"] or 0))})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="large")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--phase", type=float, default=60.0, help="Seconds of churn without load, then with load.")
    parser.add_argument("--rate", type=float, default=50.0, help="Simulator churn, changes per second.")
    parser.add_argument("--think", type=float, default=0.0, help="Mean think time per client (0: none).")
    parser.add_argument("--db", default="portal_bench_load")
    parser.add_argument("--profile", metavar="FILE", help="Sample the web's workers with py-spy (pip install "
                        "'.[bench]') during the loaded phase and write the profile here (raw collapsed stacks).")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="portal-load-"))
    sim, recorder, env, cluster_id = synced_simulator(args.scenario, args.db, workdir, {
        "DJANGO_SECRET_KEY": "bench-" * 8, "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "PORTAL_WATCH_WINDOW_SECONDS": "300", "PROMETHEUS_MULTIPROC_DIR": str(workdir / "prometheus")}, roll_up=False)
    dsn = env["DATABASE_URL"].replace("postgres://", "postgresql://", 1)
    port = free_port()
    run = {"cwd": ROOT, "env": env, "check": True}
    subprocess.run([PY, "manage.py", "catalog_refresh", "--discover"], **run, capture_output=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        _prices_and_tenants(conn)
        # What autovacuum does to a production database minutes after the initial sync (an insert-driven vacuum
        # and fresh statistics). This machine's PostgreSQL runs with autovacuum off: without statistics the planner
        # sees one row per table, and without a vacuum no index-only scan skips the heap. Nothing vacuums during
        # the phases, so the churned tables' visibility maps decay as they would between two autovacuum runs.
        conn.execute("VACUUM ANALYZE")
    # After the prices: they reach back to January and mark every hour since then. Rolled up before them, the beat
    # rebuilt eleven months of `large` (~3 minutes of a core, with PostgreSQL's share) during the measured phases.
    roll_chargeback_up(run)
    setup = json.loads(subprocess.run([PY, "-c", SETUP], **run, capture_output=True, text=True).stdout)

    logs = {name: (workdir / f"{name}.log").open("wb") for name in ("web", "locust")}
    procs = [
        subprocess.Popen([str(BIN / "gunicorn"), "-c", "python:portal.gunicorn_conf", "portal.wsgi", "--bind",
                          f"127.0.0.1:{port}", "--workers", "3", "--threads", "4", "--timeout", "120"],
                         cwd=ROOT, env=env, stdout=logs["web"], stderr=subprocess.STDOUT, start_new_session=True),
        *start_workers(env, workdir),
    ]
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_http(f"{base}/healthz", 60)
        _warm(base, setup, ["/catalog/", f"/catalog/o/{setup['offerings'][0]}/", "/inventory/capacity/",
                            "/inventory/accelerators/", "/inventory/nodes/", "/api/v1/devices/?limit=100",
                            "/api/v1/nodes/?limit=100", "/api/v1/pods/?limit=100", "/api/v1/catalog/offerings/",
                            "/api/v1/cmdb/cards/?limit=100"])
        time.sleep(10)  # beat has started the watchers; they resume from the saved resourceVersions
        phases = {}
        for label, users in (("no clients", 0), ("2 clients", 2), (f"{args.users} clients", args.users)):
            print(f"churn at {args.rate:.0f}/s for {args.phase:.0f} s with {label} …", flush=True)
            locust = _locust(base, setup, env, users, args.phase, args.think, workdir / f"locust-{users}",
                             logs) if users else None
            spy = subprocess.Popen(
                [str(BIN / "py-spy"), "record", "--pid", str(procs[0].pid), "--subprocesses", "--idle",
                 "--duration", str(int(args.phase)), "--format", "raw", "--output", args.profile, "--rate", "50"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if args.profile and users == args.users else None
            lag = _lag_phase(sim, recorder, dsn, cluster_id, args.rate, args.phase, during=locust)
            if spy is not None:
                spy.wait(timeout=args.phase + 60)
            endpoints = _read_stats(workdir / f"locust-{users}") if users else []
            phases[label] = {"users": users, "endpoints": endpoints, "sync_lag": lag}
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        sim.stop()

    idle, one, many = phases.values()
    result = {"scenario": args.scenario, "users": args.users, "think_seconds": args.think, "seconds": args.phase,
              "churn_per_second": args.rate, "phases": phases,
              "lag_p99_ratio_loaded_vs_no_clients": round(
                  many["sync_lag"]["lag_p99_s"] / max(idle["sync_lag"]["lag_p99_s"], 1e-3), 2)}
    baseline = {e["name"]: e for e in one["endpoints"]}
    print(f"\n{'endpoint':<32} {'2 clients p50':>13} | {args.users} clients: {'req':>6} {'err %':>6} {'req/s':>6} "
          f"{'p50':>7} {'p95':>7} {'p99':>7}")
    for e in many["endpoints"]:
        alone = baseline.get(e["name"], {}).get("p50_ms", 0)
        print(f"{e['name']:<32} {alone:>11}ms | {'':>11}{e['requests']:>6} {100 * e['error_rate']:>6.2f} "
              f"{e['rps']:>6.1f} {e['p50_ms']:>5}ms {e['p95_ms']:>5}ms {e['p99_ms']:>5}ms")
    print(f"\nsync lag (churn write → row in PostgreSQL) at {args.rate:.0f} changes/s:")
    for label, phase in phases.items():
        lag = phase["sync_lag"]
        print(f"  {label:<12} p50 {lag['lag_p50_s']:.2f} s  p95 {lag['lag_p95_s']:.2f} s  p99 {lag['lag_p99_s']:.2f} s"
              f"  max {lag['lag_max_s']:.2f} s  ({lag['events_measured']} events, {lag['events_lost']} lost)")
    print("\nCPU used, in cores (of 2), per phase:")
    groups = sorted({g for phase in phases.values() for g in phase["sync_lag"]["cpu_cores_by_process"]})
    print(f"  {'':<12} " + " ".join(f"{g:>14}" for g in groups))
    for label, phase in phases.items():
        used = phase["sync_lag"]["cpu_cores_by_process"]
        print(f"  {label:<12} " + " ".join(f"{used.get(g, 0.0):>14.2f}" for g in groups))
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / f"load_{args.scenario}.json").write_text(json.dumps(result, indent=2))
    print(f"\nlogs in {workdir}; figures in bench/results/load_{args.scenario}.json")
    failed = any(e["failures"] for p in phases.values() for e in p["endpoints"]) or any(
        p["sync_lag"]["events_lost"] for p in phases.values())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
