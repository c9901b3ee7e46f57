"""Real Celery worker and beat with Redis behind a proxy the test owns: a 20 s Redis outage and a FLUSH, under churn.

The worker and beat must not exit (kombu's restore_unacked AttributeError, portal/broker.py), every watcher must be
back within 30 s of the fault's end, and the database must then equal the cluster.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from inventory.kinds import SYNCED_KINDS
from inventory.models import Cluster, SyncState
from kubesim import Simulator
from tests.inventory.conftest import TcpProxy, assert_converged

pytestmark = [pytest.mark.slow, pytest.mark.chaos]


@pytest.fixture
def redis_proxy() -> Iterator[TcpProxy]:
    url = urlsplit(settings.REDIS_URL)
    proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 6379)
    yield proxy
    proxy.close()


def watchers_back(cluster: Cluster, since: dt.datetime, timeout: float) -> float:
    """Seconds until every kind has applied an event or bookmark after `since` (the simulator bookmarks every
    second, so a live watcher shows up at once); fails with the kinds still silent."""
    started = time.monotonic()
    silent: list[str] = list(SYNCED_KINDS)
    while time.monotonic() - started < timeout:
        fresh = set(SyncState.objects.filter(cluster=cluster, last_event_at__gt=since).values_list("kind", flat=True))
        silent = [kind for kind in SYNCED_KINDS if kind not in fresh]
        if not silent:
            return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(f"watchers not back {timeout}s after the fault: {silent}")


def test_worker_and_beat_ride_out_a_redis_outage_and_a_flush(
    sim: Simulator, cluster: Cluster, spawn: Callable[..., subprocess.Popen[bytes]], redis_proxy: TcpProxy,
    clean_redis: redis.Redis,
) -> None:
    spawn.outages = True  # type: ignore[attr-defined]
    db = urlsplit(settings.REDIS_URL).path
    env = {"REDIS_URL": redis_proxy.url("redis://127.0.0.1:{port}" + db)}
    worker = spawn("worker", "w1", env=env)
    beat = spawn("beat", "beat", env=env)
    sim.churn.start(rate_per_second=20, seed=3)
    watchers_back(cluster, timezone.now(), timeout=60)

    redis_proxy.cut()
    time.sleep(20)
    redis_proxy.heal()
    outage = watchers_back(cluster, timezone.now(), timeout=30)
    assert worker.poll() is None, "the worker exited during the Redis outage"
    assert beat.poll() is None, "beat exited during the Redis outage"

    clean_redis.flushdb()  # leases, fencing counters, enqueue markers, queued and unacked messages: all gone
    flush = watchers_back(cluster, timezone.now(), timeout=30)
    assert worker.poll() is None, "the worker exited after the FLUSH"

    sim.churn.stop()
    settle = assert_converged(sim, cluster, timeout=60)
    print(f"watchers back: {outage:.1f} s after a 20 s Redis outage, {flush:.1f} s after a FLUSH; "
          f"converged {settle:.1f} s after churn stopped")


@pytest.mark.parametrize("transport", ["kombu.transport.redis:Transport", "portal.broker:Transport"])
def test_a_channel_closed_after_its_connection_detached(transport: str, clean_redis: redis.Redis) -> None:
    """The sequence celery's consumer runs when Redis goes away: `Connection.collect()` detaches the transport
    (`transport.client = None`), then the task consumer's channel is closed and restores its delivered, unacked
    messages. kombu 5.7's transport raises AttributeError there (the worker's "Unrecoverable error"); ours keeps the
    message in Redis's unacked index, from where the visibility timeout redelivers it."""
    from kombu import Connection, Producer, Queue

    queue = Queue("portal-test-restore", routing_key="portal-test-restore")
    connection = Connection(settings.REDIS_URL, transport=transport)
    channel = connection.channel()
    Producer(channel).publish({"n": 1}, routing_key=queue.name, declare=[queue])
    message = queue(channel).get(no_ack=False)
    assert message is not None
    assert message.payload == {"n": 1}
    connection._do_close_transport()  # what collect() does after losing the broker
    if transport.startswith("kombu."):
        with pytest.raises(AttributeError, match="hostname"):
            channel.close()
        return
    channel.close()
    assert clean_redis.hlen("unacked") == 1  # not lost: restore_visible puts it back after the visibility timeout


def test_heartbeat_probe_fails_once_the_worker_stops_consuming(
    cluster: Cluster, spawn: Callable[..., subprocess.Popen[bytes]], tmp_path: Path,
) -> None:
    """The worker sends itself a heartbeat task every second; the probe passes while it runs them and fails once it
    no longer does (frozen here with SIGSTOP), then passes again when it consumes again."""
    beats = tmp_path / "heartbeats"
    worker = spawn("worker", "hb", env={"PORTAL_WORKER_HEARTBEAT_SECONDS": "1",
                                        "PORTAL_WORKER_HEARTBEAT_DIR": str(beats)})
    node = f"hb@{socket.gethostname()}"

    def probe() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "portal.worker_probe", node, "--max-age", "4"], text=True,
                              capture_output=True, env={**os.environ, "PORTAL_WORKER_HEARTBEAT_DIR": str(beats)},
                              timeout=30)

    def until_probe(code: int, timeout: float) -> subprocess.CompletedProcess[str]:
        end = time.monotonic() + timeout
        while (result := probe()).returncode != code:
            assert time.monotonic() < end, f"probe still {result.returncode}: {result.stderr}"
            time.sleep(0.5)
        return result

    assert "no heartbeat yet" in until_probe(1, 5).stderr
    until_probe(0, 60)
    os.killpg(worker.pid, signal.SIGSTOP)
    try:
        assert "last heartbeat" in until_probe(1, 15).stderr
    finally:
        os.killpg(worker.pid, signal.SIGCONT)
    until_probe(0, 30)
