"""Fixtures for the sync engine: a live simulator over real HTTP, a registered cluster, in-process watchers."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from django.conf import settings
from django.db import connection

from inventory.errors import LeaseLostError
from inventory.kinds import MODELS, SYNCED_KINDS, kind_ref
from inventory.leases import lease_backend
from inventory.models import Cluster, Device, Pod
from inventory.scoping import EVERYTHING, NamespaceScope, tenancy_override
from inventory.services.clients import client_for
from inventory.services.clusters import cluster_register
from inventory.services.sync import cluster_sync_once, kind_sync_window, sync_state_for
from kubesim import Simulator


@pytest.fixture(autouse=True)
def _no_tenancy_scope() -> Iterator[None]:
    """Inventory is tested on its own: a tenancy under which every signed-in user sees every namespace (the portal's
    scoping of pods and claims is tested in tests/portal/test_scoping.py and the permission matrix)."""
    with tenancy_override(scope=lambda user: EVERYTHING, targets=lambda user, cluster: []):
        yield


@pytest.fixture
def member_owns() -> Iterator[Callable[..., None]]:
    """Make signed-in users members of these namespaces of a cluster (their pods and claims are then named to them;
    elsewhere they are counted: inventory.redaction.holder_rule)."""
    stack = contextlib.ExitStack()

    def own(cluster: Cluster, *namespaces: str) -> None:
        pairs = frozenset((cluster.pk, namespace) for namespace in namespaces)
        stack.enter_context(tenancy_override(scope=lambda user: NamespaceScope(pairs=pairs),
                                             targets=lambda user, c: list(namespaces)))

    yield own
    stack.close()


@pytest.fixture
def clean_redis() -> redis.Redis:
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    return client


@pytest.fixture
def sim() -> Iterator[Simulator]:
    simulator = Simulator(scenario="demo", port=0, seed=1).start()
    yield simulator
    simulator.stop()


@pytest.fixture
def cluster(sim: Simulator, transactional_db: None, clean_redis: redis.Redis) -> Cluster:
    return cluster_register(name="sim", kubeconfig=yaml.safe_dump(sim.kubeconfig()))


def sim_state(sim: Simulator, kind: str) -> dict[str, str]:
    """What the sync must mirror of a kind: every object, or those of the one namespace the kind is read from."""
    only = kind_ref(kind).namespace
    return {o["metadata"]["uid"]: o["metadata"]["resourceVersion"] for o in sim.store.objects(kind)
            if not only or o["metadata"].get("namespace") == only}


def db_state(cluster: Cluster, kind: str) -> dict[str, str]:
    return dict(MODELS[kind].objects.filter(cluster=cluster).live().values_list("uid", "resource_version"))


def differences(sim: Simulator, cluster: Cluster, kinds: tuple[str, ...] = SYNCED_KINDS) -> dict[str, Any]:
    out = {}
    for kind in kinds:
        expected, actual = sim_state(sim, kind), db_state(cluster, kind)
        if expected != actual:
            out[kind] = {
                "missing": len(expected.keys() - actual.keys()),
                "extra": len(actual.keys() - expected.keys()),
                "stale": sum(1 for uid in expected.keys() & actual.keys() if expected[uid] != actual[uid]),
            }
    return out


def assert_converged(sim: Simulator, cluster: Cluster, *, timeout: float = 20.0,
                     kinds: tuple[str, ...] = SYNCED_KINDS) -> float:
    """Wait until the database equals the simulator exactly (uids and resourceVersions); return the seconds taken."""
    started = time.monotonic()
    diff: dict[str, Any] = {}
    while time.monotonic() - started < timeout:
        diff = differences(sim, cluster, kinds)
        if not diff:
            return time.monotonic() - started
        time.sleep(0.2)
    raise AssertionError(f"not converged after {timeout}s: {diff}; examples: {_diff_examples(sim, cluster, diff)}")


def _diff_examples(sim: Simulator, cluster: Cluster, diff: dict[str, Any], per_kind: int = 3) -> list[str]:
    """A few of the differing objects, with both resourceVersions, so a failure says what was lost."""
    out = []
    for kind in diff:
        expected, actual = sim_state(sim, kind), db_state(cluster, kind)
        names = {o["metadata"]["uid"]: o["metadata"].get("name") for o in sim.store.objects(kind)}
        uids = sorted(uid for uid in expected.keys() | actual.keys() if expected.get(uid) != actual.get(uid))
        out += [f"{kind} {names.get(uid, uid)}: simulator rv {expected.get(uid)}, database rv {actual.get(uid)}"
                for uid in uids[:per_kind]]
    return out


def watchers_back(cluster: Cluster, since: Any, what: str, *, timeout: float = 30.0,
                  evidence: Callable[[], str] = str) -> float:
    """Seconds until every kind's watcher applied an event or bookmark after `since` (the simulator bookmarks every
    second, so a live watcher shows at once); fails naming the kinds still silent, plus `evidence()`."""
    from inventory.models import SyncState

    started = time.monotonic()
    silent: list[str] = []
    while time.monotonic() - started < timeout:
        fresh = set(SyncState.objects.filter(cluster=cluster, last_event_at__gt=since).values_list("kind", flat=True))
        silent = [kind for kind in SYNCED_KINDS if kind not in fresh]
        if not silent:
            return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(f"{what}: watchers of {silent} not back within {timeout:.0f} s\n{evidence()}")


class Watchers:
    """One thread per kind running successive bounded windows under a lease, like the Celery tasks do."""

    def __init__(self, cluster: Cluster, kinds: tuple[str, ...], window: float = 4.0) -> None:
        self.cluster, self.kinds, self.window = cluster, kinds, window
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.windows = 0
        self.lease_losses = 0

    def _run(self, kind: str) -> None:
        backend = lease_backend()
        try:
            state = sync_state_for(cluster_id=self.cluster.pk, kind=kind)
            while not self.stop_event.is_set():
                lease = backend.acquire(state, settings.PORTAL_WATCH_LEASE_SECONDS)
                if lease is None:
                    time.sleep(0.2)
                    continue
                client = client_for(self.cluster)
                try:
                    kind_sync_window(cluster_id=self.cluster.pk, kind=kind, client=client, lease=lease,
                                     window_seconds=self.window, stop=self.stop_event)
                    self.windows += 1
                except LeaseLostError:
                    # As the Celery task does: the window ends, and a watcher (here: this loop) takes over again.
                    # The fence keeps a stalled writer from writing, so nothing is lost; the count shows it happened.
                    self.lease_losses += 1
                finally:
                    client.close()
                    lease.release()
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self.errors.append(exc)
        finally:
            connection.close()

    def start(self) -> Watchers:
        for kind in self.kinds:
            thread = threading.Thread(target=self._run, args=(kind,), daemon=True, name=f"watcher-{kind}")
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=30)
        assert not self.errors, self.errors


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def spawn(cluster: Cluster, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start real Celery processes against the test database: `spawn("worker", name)` (watch + default queues on a
    thread pool; `pool=` other queue and pool options) or `spawn("beat", name)`, with short windows and leases; `env=`
    overrides (e.g. a proxied REDIS_URL).
    At the end every process is stopped and its log must show no unrecoverable error (nor a traceback, unless the
    test set `spawn.outages = True`: connection errors during an outage are logged with theirs)."""
    db = connection.settings_dict
    base_env = {
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

    def start(role: str, name: str, env: dict[str, str] | None = None,
              pool: tuple[str, ...] = ("-Q", "watch,default", "-P", "threads", "-c", "12")) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "celery", "-A", "portal"]
        if role == "worker":
            cmd += ["worker", *pool, "-n", f"{name}@%h", "--without-mingle", "--without-gossip", "--loglevel", "INFO"]
        else:
            cmd += ["beat", "--loglevel", "INFO", "-s", str(tmp_path / f"{name}-schedule")]
        log = tmp_path / f"{name}.log"
        logs.append(log)
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**base_env, **(env or {})}, stdout=log.open("ab"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        return proc

    start.outages = False  # type: ignore[attr-defined]
    start.logs = logs  # type: ignore[attr-defined]
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
        assert "Unrecoverable error" not in text, f"{log}:\n{text[-3000:]}"
        assert start.outages or "Traceback" not in text or "LeaseLost" in text, f"{log}:\n{text[-3000:]}"  # type: ignore[attr-defined]


@pytest.fixture
def watchers(cluster: Cluster) -> Iterator[Callable[..., Watchers]]:
    started: list[Watchers] = []

    def start(kinds: tuple[str, ...] = SYNCED_KINDS, window: float = 4.0) -> Watchers:
        w = Watchers(cluster, kinds, window).start()
        started.append(w)
        return w

    yield start
    for w in started:
        if not w.stop_event.is_set():
            w.stop()


class TcpProxy:
    """A TCP proxy the test owns in front of a shared server (Redis, PostgreSQL), so an outage can be simulated
    without touching the machine's server: `cut()` closes every connection and refuses new ones (the port stays
    bound: connections are accepted and closed at once, like a restarting server behind a load balancer),
    `heal()` lets them through again."""

    def __init__(self, target_host: str, target_port: int) -> None:
        import socket

        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set[Any] = set()
        self._open = True
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    def url(self, template: str) -> str:
        """`template` with {port} replaced: e.g. "redis://127.0.0.1:{port}/5"."""
        return template.format(port=self.port)

    def _accept(self) -> None:
        import socket

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._open:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: Any, dst: Any) -> None:
        import socket

        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
                with self._lock:
                    self._sockets.discard(s)

    def cut(self) -> None:
        import socket

        self._open = False
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def heal(self) -> None:
        self._open = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()


def device(cluster: Cluster, key: str) -> Device:
    """The cluster's derived Device row with this key."""
    return Device.objects.get(cluster=cluster, key=key)


def _sync_once(cluster: Cluster, kinds: tuple[str, ...] = SYNCED_KINDS, page_size: int | None = None) -> list:
    """One full list-and-apply of these kinds, in this process (the sync worker's path)."""
    backend = lease_backend()
    client = client_for(cluster)
    try:
        return cluster_sync_once(cluster_id=cluster.pk, client=client, kinds=kinds, page_size=page_size,
                                 lease_for=lambda state: backend.acquire(state, 30))
    finally:
        client.close()


def _new_pod(sim: Simulator, name: str) -> dict:
    template = next(p for p in sim.store.objects("pods") if p["metadata"]["namespace"] != "kube-system")
    pod = copy.deepcopy(template)
    meta = pod["metadata"]
    pod["metadata"] = {"name": name, "namespace": meta["namespace"], "labels": {"app": name}}
    pod.pop("status", None)
    pod["spec"].pop("nodeName", None)
    return pod


def _relabel_node(sim: Simulator, key: str, value: str) -> str:
    node = copy.deepcopy(sim.store.objects("nodes")[0])
    node["metadata"].setdefault("labels", {})[key] = value
    sim.store.update("nodes", node)
    return node["metadata"]["name"]


def _mutate(sim: Simulator, tag: str, *, creates: int = 3, deletes: int = 2) -> list[str]:
    """Create pods, relabel a node, delete pods; return the uids of deleted pods."""
    for i in range(creates):
        sim.store.create("pods", _new_pod(sim, f"{tag}-{i}"))
    _relabel_node(sim, "portal.test/tag", tag)
    deleted = []
    for pod in sim.store.objects("pods")[:deletes]:
        sim.store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
        deleted.append(pod["metadata"]["uid"])
    return deleted


def _assert_tombstoned(cluster: Cluster, uids: list[str]) -> None:
    rows = dict(Pod.objects.filter(cluster=cluster, uid__in=uids).values_list("uid", "deleted_at"))
    assert set(rows) == set(uids)
    assert all(deleted_at is not None for deleted_at in rows.values())
