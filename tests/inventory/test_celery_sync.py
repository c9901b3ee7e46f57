"""End to end on real Celery: a worker (thread pool, watch + default queues) and beat keep the mirror live.

A worker killed with SIGKILL mid-window loses nothing: its leases expire, beat enqueues fresh windows, and a new
worker resumes from the saved resourceVersions.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable

import pytest

from inventory.kinds import SYNCED_KINDS
from inventory.models import Cluster, SyncState
from kubesim import Simulator
from tests.inventory.conftest import _assert_tombstoned, _mutate, assert_converged

pytestmark = pytest.mark.slow


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
