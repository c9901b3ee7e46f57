"""Real Celery worker and beat with Redis behind a proxy the test owns: a 20 s Redis outage and a FLUSH, under churn.

The worker and beat must not exit (kombu's restore_unacked AttributeError, portal/broker.py), every watcher must be
back within 30 s of the fault's end, and the database must then equal the cluster.
"""

from __future__ import annotations

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

from inventory.models import Cluster
from kubesim import Simulator
from tests.inventory.conftest import TcpProxy, assert_converged, watchers_back

pytestmark = [pytest.mark.slow, pytest.mark.chaos]


@pytest.fixture
def redis_proxy() -> Iterator[TcpProxy]:
    url = urlsplit(settings.REDIS_URL)
    proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 6379)
    yield proxy
    proxy.close()


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
    watchers_back(cluster, timezone.now(), "start", timeout=60)

    redis_proxy.cut()
    time.sleep(20)
    redis_proxy.heal()
    outage = watchers_back(cluster, timezone.now(), "Redis outage")
    assert worker.poll() is None, "the worker exited during the Redis outage"
    assert beat.poll() is None, "beat exited during the Redis outage"

    clean_redis.flushdb()  # leases, fencing counters, enqueue markers, queued and unacked messages: all gone
    flush = watchers_back(cluster, timezone.now(), "Redis FLUSH")
    assert worker.poll() is None, "the worker exited after the FLUSH"

    sim.churn.stop()
    settle = assert_converged(sim, cluster, timeout=60)
    print(f"watchers back: {outage:.1f} s after a 20 s Redis outage, {flush:.1f} s after a FLUSH; "
          f"converged {settle:.1f} s after churn stopped")


@pytest.mark.parametrize("transport", ["kombu.transport.redis:Transport", "portal.broker:Transport"])
def test_a_channel_used_after_its_connection_detached(transport: str, clean_redis: redis.Redis) -> None:
    """What celery's consumer does when Redis goes away: `Connection.collect()` detaches the transport
    (`transport.client = None`); later a task finishing acknowledges its message on the old channel, and the channel
    is closed, restoring its delivered, unacked messages. kombu 5.7's transport raises AttributeError for both (the
    worker's "Unrecoverable error"); ours raises a connection error for the ack (celery logs it and carries on) and
    leaves the messages in Redis's unacked index, from where the visibility timeout redelivers them."""
    from kombu import Connection, Producer, Queue

    queue = Queue("portal-test-restore", routing_key="portal-test-restore")
    connection = Connection(settings.REDIS_URL, transport=transport)
    channel = connection.channel()
    for n in (1, 2):
        Producer(channel).publish({"n": n}, routing_key=queue.name, declare=[queue])
    finished, running = queue(channel).get(no_ack=False), queue(channel).get(no_ack=False)
    assert finished is not None
    assert running is not None
    connection._do_close_transport()  # what collect() does after losing the broker
    if transport.startswith("kombu."):
        with pytest.raises(AttributeError, match="hostname"):
            channel.close()
        return
    channel.close()
    assert clean_redis.hlen("unacked") == 2  # not lost: restore_visible puts them back after the visibility timeout
    with pytest.raises(connection.connection_errors):  # a task finishing now: celery logs "Couldn't ack"
        finished.ack()


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


def test_the_broker_connection_is_retried_every_few_seconds(redis_proxy: TcpProxy) -> None:
    """Celery's consumer reconnects through the app's Connection: every 1, 2, … at most 5 s (portal/broker.py), so
    a worker is back within ~5 s of Redis rather than up to 30 s later."""
    import threading

    from portal.celery import app

    db = urlsplit(settings.REDIS_URL).path
    connection = app.connection_for_write(url=redis_proxy.url("redis://127.0.0.1:{port}" + db))
    intervals: list[float] = []
    redis_proxy.cut()
    healed = threading.Timer(8, redis_proxy.heal)
    healed.start()
    started = time.monotonic()
    try:
        connection.ensure_connection(lambda exc, interval: intervals.append(interval), 30)
        back = time.monotonic() - started
    finally:
        healed.cancel()
        connection.release()
    assert intervals
    assert max(intervals) <= 5
    assert back < 8 + 6
