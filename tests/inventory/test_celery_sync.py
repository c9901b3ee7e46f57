"""End to end on real Celery: a worker (thread pool, watch + default queues) and beat keep the mirror live.

A worker killed with SIGKILL mid-window loses nothing: its leases expire, beat enqueues fresh windows, and a new
worker resumes from the saved resourceVersions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from inventory.kinds import SYNCED_KINDS
from inventory.models import Cluster, SyncState
from kubesim import Simulator
from tests.inventory.conftest import assert_converged
from tests.inventory.test_sync import _assert_tombstoned, _mutate

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spawn(cluster: Cluster, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "PORTAL_WATCH_WINDOW_SECONDS": "4",
        "PORTAL_WATCH_LEASE_SECONDS": "3",
        "PORTAL_WATCHERS_ENSURE_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []

    def start(role: str, name: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "celery", "-A", "portal"]
        if role == "worker":
            cmd += ["worker", "-Q", "watch,default", "-P", "threads", "-c", "12", "-n", f"{name}@%h",
                    "--without-mingle", "--without-gossip", "--loglevel", "INFO"]
        else:
            cmd += ["beat", "--loglevel", "INFO", "-s", str(tmp_path / "celerybeat-schedule")]
        log = tmp_path / f"{name}.log"
        logs.append(log)
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for log in logs:
        text = log.read_text(errors="replace")
        assert "Traceback" not in text or "LeaseLost" in text, f"{log}:\n{text[-3000:]}"


def test_worker_and_beat_keep_the_mirror_live_and_survive_kill_9(
    sim: Simulator, cluster: Cluster, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    worker = spawn("worker", "w1")
    spawn("beat", "beat")
    assert_converged(sim, cluster, timeout=60)
    deleted = _mutate(sim, "celery1")
    assert_converged(sim, cluster, timeout=15)
    _assert_tombstoned(cluster, deleted)

    os.killpg(worker.pid, signal.SIGKILL)  # mid-window: the leases stay held until their TTL runs out
    worker.wait()
    deleted = _mutate(sim, "celery2")
    spawn("worker", "w2")

    assert_converged(sim, cluster, timeout=60)
    _assert_tombstoned(cluster, deleted)
    states = SyncState.objects.filter(cluster=cluster)
    assert states.count() == len(SYNCED_KINDS)
    assert all(s.resource_version for s in states)
