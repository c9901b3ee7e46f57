"""Fixtures for the sync engine: a live simulator over real HTTP, a registered cluster, in-process watchers."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import yaml
from django.conf import settings
from django.db import connection

from inventory.errors import LeaseLostError
from inventory.kinds import MODELS, SYNCED_KINDS, kind_ref
from inventory.leases import lease_backend
from inventory.models import Cluster
from inventory.scoping import EVERYTHING, NamespaceScope, tenancy_override
from inventory.services.clients import client_for
from inventory.services.clusters import cluster_register
from inventory.services.sync import kind_sync_window, sync_state_for
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
