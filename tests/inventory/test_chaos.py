"""Chaos: the production process layout on `demo` with churn, faults one after another, then the database must equal
the cluster exactly.

The watch worker (threads), the default worker (prefork) and beat run as `make worker`/`make beat` start them, with
Redis and PostgreSQL reached through proxies this test owns (the machine's servers are never restarted). After each
fault every watcher must be back within 30 s; after the last one (an API-server restore) and churn stopped, every kind
must equal the simulator — (uid, resourceVersion) of the live rows, tombstones for the rest — within 60 s. On failure
a per-kind table says where. Marked `chaos` (and `slow`): `make test` runs it, a fast lane passes `-m 'not chaos'`.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import pytest
import redis
from django.conf import settings
from django.db import connection
from django.utils import timezone

from inventory.kinds import SYNCED_KINDS
from inventory.models import Cluster, SyncState
from kubesim import Simulator
from tests.inventory.conftest import TcpProxy, db_state, differences, sim_state, watchers_back

pytestmark = [pytest.mark.slow, pytest.mark.chaos, pytest.mark.timeout(480)]

BACK_WITHIN = 30.0
CONVERGE_WITHIN = 60.0


@pytest.fixture
def proxies() -> Iterator[dict[str, TcpProxy]]:
    redis_url = urlsplit(settings.REDIS_URL)
    db = connection.settings_dict
    made = {"redis": TcpProxy(redis_url.hostname or "127.0.0.1", redis_url.port or 6379),
            "postgres": TcpProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))}
    yield made
    for proxy in made.values():
        proxy.close()


def per_kind_table(sim: Simulator, cluster: Cluster) -> str:
    """kind | cluster | database live | missing | extra | stale rv | relists | listings | lease losses | last event."""
    states = {s.kind: s for s in SyncState.objects.filter(cluster=cluster)}
    lines = [f"{'kind':<34}{'cluster':>8}{'db':>8}{'missing':>8}{'extra':>7}{'stale':>7}{'relists':>8}"
             f"{'lists':>7}{'leases':>7}  last event"]
    now = timezone.now()
    for kind in SYNCED_KINDS:
        expected, actual = sim_state(sim, kind), db_state(cluster, kind)
        state = states.get(kind)
        age = f"{(now - state.last_event_at).total_seconds():.0f} s ago" if state and state.last_event_at else "never"
        lines.append(
            f"{kind:<34}{len(expected):>8}{len(actual):>8}{len(expected.keys() - actual.keys()):>8}"
            f"{len(actual.keys() - expected.keys()):>7}"
            f"{sum(1 for u in expected.keys() & actual.keys() if expected[u] != actual[u]):>7}"
            f"{state.relists if state else 0:>8}{state.list_id if state else 0:>7}"
            f"{state.lease_losses if state else 0:>7}  {age}"
        )
    return "\n".join(lines)


def test_chaos_every_fault_one_after_another(
    sim: Simulator, cluster: Cluster, spawn: Callable[..., subprocess.Popen[bytes]], proxies: dict[str, TcpProxy],
    clean_redis: redis.Redis,
) -> None:
    spawn.outages = True  # type: ignore[attr-defined]
    db = connection.settings_dict
    env = {
        "REDIS_URL": proxies["redis"].url("redis://127.0.0.1:{port}" + urlsplit(settings.REDIS_URL).path),
        "DATABASE_URL": proxies["postgres"].url(f"postgres://{db['USER']}@127.0.0.1:{{port}}/{db['NAME']}"),
        "PORTAL_WATCH_WINDOW_SECONDS": "15",
        "PORTAL_WATCH_LEASE_SECONDS": "5",
    }
    layout = {  # as `make worker` and `make beat` start them
        "watch": ("worker", ("-Q", "watch", "-P", "threads", "-c", "20")),
        "default": ("worker", ("-Q", "default", "-P", "prefork", "-c", "2")),
        "beat": ("beat", ()),
    }
    procs = {name: spawn(role, name, env=env, **({"pool": pool} if pool else {}))
             for name, (role, pool) in layout.items()}

    def log_tails() -> str:
        return "\n".join(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-25:])
                         for log in spawn.logs)  # type: ignore[attr-defined]

    def kill_and_restart(name: str) -> None:
        os.killpg(procs[name].pid, signal.SIGKILL)
        procs[name].wait()
        role, pool = layout[name]
        procs[name] = spawn(role, name, env=env, **({"pool": pool} if pool else {}))  # the service manager

    def outage(proxy: TcpProxy, seconds: float) -> None:
        proxy.cut()
        time.sleep(seconds)
        proxy.heal()

    faults: list[tuple[str, Callable[[], None]]] = [
        ("watch worker kill -9", lambda: kill_and_restart("watch")),
        ("default worker kill -9", lambda: kill_and_restart("default")),
        ("beat kill -9", lambda: kill_and_restart("beat")),
        ("API 5xx storm", lambda: (sim.faults.fail_next_requests(30, status=500), sim.faults.drop_watches())),
        ("API 429 storm", lambda: (sim.faults.fail_next_requests(20, status=429, retry_after=1),
                                   sim.faults.drop_watches())),
        ("API 410 Gone", lambda: (sim.faults.expire_next_watches(12), sim.faults.drop_watches())),
        ("API slow responses", lambda: (sim.faults.slow_next_requests(24, 2.0), sim.faults.drop_watches())),
        ("PostgreSQL outage 15 s", lambda: outage(proxies["postgres"], 15)),
        ("Redis outage 20 s", lambda: outage(proxies["redis"], 20)),
        ("Redis FLUSH", clean_redis.flushdb),
        ("API server restore (etcd)", sim.restore),
    ]

    sim.churn.start(rate_per_second=20, seed=7)
    try:
        watchers_back(cluster, timezone.now() - dt.timedelta(seconds=1), "start", evidence=log_tails)
        timings = []
        for what, fault in faults:
            fault()
            timings.append((what, watchers_back(cluster, timezone.now(), what, timeout=BACK_WITHIN,
                                                evidence=lambda: f"{per_kind_table(sim, cluster)}\n{log_tails()}")))
            for name, proc in procs.items():
                assert proc.poll() is None, f"{what}: the {name} process exited\n{per_kind_table(sim, cluster)}"
    finally:
        sim.churn.stop()
    started = time.monotonic()
    while differences(sim, cluster):
        assert time.monotonic() - started < CONVERGE_WITHIN, (
            f"not converged {CONVERGE_WITHIN:.0f} s after the last fault\n{per_kind_table(sim, cluster)}")
        time.sleep(0.5)
    settle = time.monotonic() - started
    report = "\n".join(f"  {what:<28} watchers back in {seconds:5.1f} s" for what, seconds in timings)
    print(f"\nchaos timings:\n{report}\n  converged {settle:.1f} s after churn stopped\n{per_kind_table(sim, cluster)}")
