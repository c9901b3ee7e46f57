"""Benchmark: the initial sync of `large` by the Celery watchers at production defaults — lease losses and listings.

A fresh PostgreSQL database, the simulator serving `large`, the watch worker (threads, -c 50), the default worker and
beat as `make worker`/`make beat` start them with the production defaults (PORTAL_WATCH_LEASE_SECONDS 30,
PORTAL_WATCH_WINDOW_SECONDS 120). Waits until every kind finished its first listing and watches, then prints per kind
the listings, lease losses and relists, and the total time. Target: every kind listed once, no lease lost.

    .venv/bin/python bench/initial_sync_leases.py [--scenario large] [--db portal_bench_leases] [--timeout 900]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sync_large import PY, ROOT, free_port, recreate_database

SYNCED_KINDS = 12


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="large")
    parser.add_argument("--db", default="portal_bench_leases")
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"))
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    dsn = recreate_database(args.db)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.base", "DJANGO_SECRET_KEY": "bench",
           "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{args.db}", "REDIS_URL": args.redis,
           "PYTHONUNBUFFERED": "1"}
    for name in ("PORTAL_WATCH_LEASE_SECONDS", "PORTAL_WATCH_WINDOW_SECONDS", "PORTAL_WATCHERS_ENSURE_SECONDS"):
        env.pop(name, None)  # production defaults
    subprocess.run([PY, "-c", f"import redis; redis.Redis.from_url({args.redis!r}).flushdb()"], check=True)
    subprocess.run([PY, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    workdir = Path(tempfile.mkdtemp(prefix="portal-bench-"))
    kubeconfig = workdir / "kubeconfig"
    procs = [subprocess.Popen([PY, "-m", "kubesim", "--scenario", args.scenario, "--port", str(free_port()),
                               "--write-kubeconfig", str(kubeconfig)], cwd=ROOT, stdout=subprocess.DEVNULL,
                              start_new_session=True)]
    try:
        while not kubeconfig.exists():
            time.sleep(0.5)
        subprocess.run([PY, "manage.py", "cluster_add", args.scenario, "--kubeconfig", str(kubeconfig)], cwd=ROOT,
                       env=env, check=True, stdout=subprocess.DEVNULL)
        celery = [PY, "-m", "celery", "-A", "portal"]
        log = (workdir / "celery.log").open("wb")
        for cmd in (["worker", "-Q", "watch", "-P", "threads", "-c", "50", "-n", "watch@%h"],
                    ["worker", "-Q", "default", "-c", "2", "-n", "default@%h"],
                    ["beat", "-s", str(workdir / "celerybeat-schedule")]):
            procs.append(subprocess.Popen([*celery, *cmd, "--loglevel", "WARNING"], cwd=ROOT, env=env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        started = time.monotonic()
        query = ("SELECT kind, list_id, lease_losses, relists, last_list_finished_at IS NOT NULL AND phase = 'watching'"
                 " FROM inventory_syncstate ORDER BY kind")
        with psycopg.connect(dsn, autocommit=True) as db:
            while True:
                rows = db.execute(query).fetchall()
                if len(rows) == SYNCED_KINDS and all(r[4] for r in rows):
                    break
                if time.monotonic() - started > args.timeout:
                    raise SystemExit(f"not every kind listed after {args.timeout:.0f} s: {rows}")
                time.sleep(1)
            elapsed = time.monotonic() - started
            time.sleep(30)  # a lease lost late in the listing shows up as its window ends
            rows = db.execute(query).fetchall()
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    print(f"{'kind':<34}{'listings':>9}{'lease losses':>13}{'relists':>8}")
    for kind, listings, losses, relists, _ in rows:
        print(f"{kind:<34}{listings:>9}{losses:>13}{relists:>8}")
    print(f"every kind listed and watching after {elapsed:.0f} s; "
          f"{sum(r[2] for r in rows)} lease losses, {sum(r[1] for r in rows)} listings for {len(rows)} kinds")
    return 0 if all(r[1] == 1 and r[2] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
