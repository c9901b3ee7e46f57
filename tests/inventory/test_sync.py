"""The sync engine against the simulator over real HTTP through the official client.

After every disturbance the database must equal the simulator's state exactly: same uids, same resourceVersions,
tombstones for what was deleted.
"""

from __future__ import annotations

import copy
import threading
import time

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection

from inventory.errors import ClusterUnreachableError, LeaseLostError
from inventory.k8s.types import PORTAL_SYSTEM_NAMESPACE, WatchEvent
from inventory.kinds import SYNCED_KINDS, kind_ref
from inventory.leases import lease_backend, leases_break
from inventory.models import Cluster, ConfigMap, Node, Pod, SyncIssue, SyncState
from inventory.services.clients import client_for
from inventory.services.sync import _apply_events, kind_list, sync_state_for
from kubesim import Simulator
from tests.inventory.conftest import (
    _assert_tombstoned,
    _mutate,
    _sync_once,
    assert_converged,
    db_state,
    differences,
    sim_state,
)


def _portal_written_objects(sim: Simulator) -> None:
    """What the portal writes for its exceptions (the demo scenario starts without them), plus a ConfigMap outside
    the portal's namespace that must not be mirrored."""
    sim.store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                    "metadata": {"name": PORTAL_SYSTEM_NAMESPACE}})
    for namespace in (PORTAL_SYSTEM_NAMESPACE, "ml-research"):
        sim.store.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"},
                                        "metadata": {"name": "privileged-exceptions", "namespace": namespace}})
    group = "admissionregistration.k8s.io/v1"
    sim.store.create("validatingadmissionpolicies", {
        "apiVersion": group, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"},
        "spec": {"validations": [{"expression": "true"}]}})
    sim.store.create("validatingadmissionpolicybindings", {
        "apiVersion": group, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "p"},
        "spec": {"policyName": "p", "validationActions": ["Deny"]}})


def test_initial_list_mirrors_every_kind_exactly(sim: Simulator, cluster: Cluster) -> None:
    _portal_written_objects(sim)
    results = _sync_once(cluster, page_size=7)  # small pages: exercise limit/continue

    assert {r.kind for r in results} == set(SYNCED_KINDS)
    assert not differences(sim, cluster)
    for kind in SYNCED_KINDS:
        assert sim_state(sim, kind), f"the demo scenario should have {kind}"
    assert list(ConfigMap.objects.values_list("namespace", flat=True)) == [PORTAL_SYSTEM_NAMESPACE]
    states = {s.kind: s for s in SyncState.objects.filter(cluster=cluster)}
    assert all(s.resource_version and s.phase == SyncState.Phase.WATCHING for s in states.values())
    node = Node.objects.filter(cluster=cluster).exclude(capacity={}).first()
    assert node is not None
    assert node.raw["metadata"]["uid"] == node.uid
    assert "cpu" in node.capacity


def test_relisting_is_idempotent_and_tombstones_only_vanished_objects(sim: Simulator, cluster: Cluster) -> None:
    _sync_once(cluster)
    rows_before = Pod.objects.filter(cluster=cluster).count()
    victim = sim.store.objects("pods")[0]
    sim.store.delete("pods", victim["metadata"]["namespace"], victim["metadata"]["name"])

    _sync_once(cluster, kinds=("pods",))
    _sync_once(cluster, kinds=("pods",))

    assert not differences(sim, cluster, ("pods",))
    assert Pod.objects.filter(cluster=cluster).count() == rows_before  # no duplicates, the victim kept as tombstone
    _assert_tombstoned(cluster, [victim["metadata"]["uid"]])


def test_interrupted_listing_prunes_nothing(sim: Simulator, cluster: Cluster) -> None:
    _sync_once(cluster, kinds=("pods",))
    for pod in sim.store.objects("pods")[:3]:
        sim.store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"])
    live_before = Pod.objects.filter(cluster=cluster).live().count()
    sim.faults.fail_next_requests(1, status=400)  # a page answered, then the next request refused permanently
    state = sync_state_for(cluster_id=cluster.pk, kind="pods")
    lease = lease_backend().acquire(state, 30)
    client = client_for(cluster)
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - any failure must leave the mirror as it was
            kind_list(cluster_id=cluster.pk, kind="pods", client=client, lease=lease, page_size=5)
    finally:
        client.close()
        lease.release()
    assert Pod.objects.filter(cluster=cluster).live().count() == live_before


def test_watch_applies_changes_within_seconds(sim: Simulator, cluster: Cluster, watchers) -> None:
    watchers()
    assert_converged(sim, cluster)
    deleted = _mutate(sim, "w1")

    seconds = assert_converged(sim, cluster, timeout=10)

    assert seconds < 5
    _assert_tombstoned(cluster, deleted)
    node = Node.objects.get(cluster=cluster, labels__contains={"portal.test/tag": "w1"})
    assert node.raw["metadata"]["labels"]["portal.test/tag"] == "w1"


@pytest.mark.slow  # watch recovery with real waits (about 4 s)
def test_restarted_watcher_resumes_from_saved_resource_version(sim: Simulator, cluster: Cluster, watchers) -> None:
    w = watchers(kinds=("pods",))
    assert_converged(sim, cluster, kinds=("pods",))
    w.stop()
    state = SyncState.objects.get(cluster=cluster, kind="pods")
    list_id, relists = state.list_id, state.relists
    _mutate(sim, "resume")

    watchers(kinds=("pods",))
    assert_converged(sim, cluster, kinds=("pods",))

    state.refresh_from_db()
    assert (state.list_id, state.relists) == (list_id, relists)  # resumed by watching, no relist


@pytest.mark.slow  # watch recovery with real waits (about 4 s)
def test_410_gone_triggers_a_relist(sim: Simulator, cluster: Cluster, watchers) -> None:
    w = watchers(kinds=("pods", "nodes"))
    assert_converged(sim, cluster, kinds=("pods", "nodes"))
    w.stop()
    deleted = _mutate(sim, "gone")
    sim.store.compact()  # the saved resourceVersions are now too old

    watchers(kinds=("pods", "nodes"))
    assert_converged(sim, cluster, kinds=("pods", "nodes"))

    assert SyncState.objects.get(cluster=cluster, kind="pods").relists >= 1
    _assert_tombstoned(cluster, deleted)


@pytest.mark.slow  # watch recovery with real waits (about 3.5 s)
def test_expired_watch_error_event_relists(sim: Simulator, cluster: Cluster, watchers) -> None:
    watchers(kinds=("pods",))
    assert_converged(sim, cluster, kinds=("pods",))
    sim.faults.expire_next_watches(2)
    sim.faults.drop_watches()
    _mutate(sim, "expire")
    assert_converged(sim, cluster, kinds=("pods",))
    assert SyncState.objects.get(cluster=cluster, kind="pods").relists >= 1


@pytest.mark.slow  # about 4 s
def test_dropped_connections_lose_nothing(sim: Simulator, cluster: Cluster, watchers) -> None:
    watchers()
    assert_converged(sim, cluster)
    for round_ in range(4):
        _mutate(sim, f"drop{round_}", creates=2, deletes=1)
        sim.faults.drop_watches()
        time.sleep(0.3)
    assert_converged(sim, cluster)


@pytest.mark.slow  # error storms with real back-off, 6-8 s each
@pytest.mark.parametrize(("status", "retry_after"), [(500, None), (503, 1), (429, 1)])
def test_error_storms_are_retried_until_converged(sim: Simulator, cluster: Cluster, watchers, status: int,
                                                  retry_after: int | None) -> None:
    watchers(kinds=("pods", "nodes", "events"))
    assert_converged(sim, cluster, kinds=("pods", "nodes", "events"))
    sim.faults.fail_next_requests(15, status=status, retry_after=retry_after)
    sim.faults.drop_watches()
    _mutate(sim, f"storm{status}")
    assert_converged(sim, cluster, kinds=("pods", "nodes", "events"), timeout=40)
    errors = SyncState.objects.filter(cluster=cluster).exclude(last_error="").values_list("last_error", flat=True)
    assert any(str(status) in e for e in errors), "the storm must be visible in the sync state"


def test_retry_after_is_honoured(sim: Simulator, cluster: Cluster) -> None:
    sim.faults.fail_next_requests(1, status=429, retry_after=7)
    client = client_for(cluster)
    try:
        with pytest.raises(ClusterUnreachableError) as info:
            client.list_page(kind_ref("nodes"), limit=10, continue_token=None)
    finally:
        client.close()
    assert info.value.retry_after == 7
    assert info.value.status == 429


@pytest.mark.slow  # watch recovery with real waits (about 3.5 s)
def test_simulator_restart_with_compaction(sim: Simulator, cluster: Cluster, watchers) -> None:
    watchers()
    assert_converged(sim, cluster)
    sim.restart(compact=True)
    deleted = _mutate(sim, "restart")
    assert_converged(sim, cluster, timeout=30)
    _assert_tombstoned(cluster, deleted)


@pytest.mark.slow  # about 3 s
def test_database_connections_lost_and_back(sim: Simulator, cluster: Cluster, watchers) -> None:
    watchers(kinds=("pods", "nodes"))
    assert_converged(sim, cluster, kinds=("pods", "nodes"))
    db_name = connection.settings_dict["NAME"]
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as admin:
        for round_ in range(3):
            _mutate(sim, f"pg{round_}", creates=2, deletes=1)
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()", (db_name,)
            ).fetchone()
            assert killed is not None
            time.sleep(0.5)
    connection.close()  # our own connection was terminated too
    assert_converged(sim, cluster, kinds=("pods", "nodes"), timeout=30)


@pytest.mark.slow  # watch recovery with real waits (about 3.5 s)
def test_redis_connections_lost_and_back(sim: Simulator, cluster: Cluster, watchers, clean_redis: redis.Redis) -> None:
    watchers(kinds=("pods", "nodes"))
    assert_converged(sim, cluster, kinds=("pods", "nodes"))
    for round_ in range(3):
        _mutate(sim, f"redis{round_}", creates=2, deletes=1)
        clean_redis.client_kill_filter(_type="normal", skipme=True)
        time.sleep(0.5)
    assert_converged(sim, cluster, kinds=("pods", "nodes"), timeout=30)


def test_stalled_watcher_cannot_write_after_its_lease_passed_on(sim: Simulator, cluster: Cluster) -> None:
    _sync_once(cluster, kinds=("pods",))
    backend = lease_backend()
    state = sync_state_for(cluster_id=cluster.pk, kind="pods")
    stalled = backend.acquire(state, 0.5)
    assert stalled is not None
    assert backend.acquire(state, 30) is None  # held
    time.sleep(0.7)  # the stalled watcher "hangs" past its TTL
    successor = backend.acquire(state, 30)
    assert successor is not None
    assert successor.token > stalled.token
    stalled.valid_until = time.monotonic() + 60  # pretend the stalled process never noticed
    pod = copy.deepcopy(sim.store.objects("pods")[0])
    pod["metadata"]["resourceVersion"] = "999999999"

    with pytest.raises(LeaseLostError):
        _apply_events(cluster_id=cluster.pk, kind="pods", events=[WatchEvent("MODIFIED", pod)], lease=stalled)

    assert Pod.objects.get(cluster=cluster, uid=pod["metadata"]["uid"]).resource_version != "999999999"
    _apply_events(cluster_id=cluster.pk, kind="pods", events=[WatchEvent("MODIFIED", pod)], lease=successor)
    assert Pod.objects.get(cluster=cluster, uid=pod["metadata"]["uid"]).resource_version == "999999999"
    successor.release()


def test_redis_losing_its_fence_counter_cannot_reuse_tokens(cluster: Cluster, clean_redis: redis.Redis) -> None:
    backend = lease_backend()
    state = sync_state_for(cluster_id=cluster.pk, kind="nodes")
    first = backend.acquire(state, 30)
    assert first is not None
    first.release()
    clean_redis.flushdb()  # Redis restarted without persistence
    second = backend.acquire(state, 30)
    assert second is not None
    assert second.token > first.token
    second.release()


def test_one_lease_per_kind_under_concurrency(cluster: Cluster) -> None:
    state = sync_state_for(cluster_id=cluster.pk, kind="pods")
    won: list[int] = []
    barrier = threading.Barrier(8)

    def contender() -> None:
        barrier.wait()
        lease = lease_backend().acquire(state, 30)
        if lease is not None:
            won.append(lease.token)
        connection.close()

    threads = [threading.Thread(target=contender) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1


@pytest.mark.parametrize("backend_name", ["redis", "database"])
def test_a_stale_lease_is_broken_and_the_fence_still_moves_forward(cluster: Cluster, backend_name, settings) -> None:
    """`manage.py demo` frees the leases a hard-stopped demo left behind: the next acquire succeeds at once, and the
    dead holder's token is fenced out."""
    settings.PORTAL_LEASE_BACKEND = backend_name
    state = sync_state_for(cluster_id=cluster.pk, kind="nodes")
    stale = lease_backend().acquire(state, 300)
    assert stale is not None
    assert lease_backend().acquire(state, 30) is None
    assert leases_break(SyncState.objects.filter(cluster=cluster, kind="nodes")) == 1
    fresh = lease_backend().acquire(state, 30)
    assert fresh is not None
    assert fresh.token > stale.token
    assert not stale.renew()
    fresh.release()


@pytest.mark.parametrize("copy_path", [False, True], ids=["insert", "copy"])
def test_bad_objects_are_stored_and_flagged_without_blocking_the_batch(sim: Simulator, cluster: Cluster,
                                                                       copy_path: bool, monkeypatch) -> None:
    if copy_path:  # a batch this small goes through bulk_create; force core.db.copy_upsert's COPY path
        monkeypatch.setattr("core.db.SMALL_CELLS", 0)
    _sync_once(cluster, kinds=("nodes",))
    state = sync_state_for(cluster_id=cluster.pk, kind="nodes")
    lease = lease_backend().acquire(state, 30)
    good = copy.deepcopy(sim.store.objects("nodes")[0])
    good["metadata"]["resourceVersion"] = "424242"
    weird = {
        "metadata": {"name": "weird", "uid": "uid-weird", "resourceVersion": "5",
                     "labels": {"huge": "x" * 100_000, "nul": "a\x00b"}},
        "spec": {"taints": "not-a-list"},
        "status": {"capacity": {"cpu": "1e3", "nvidia.com/gpu": "100m", "memory": "lots"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
        "surprise": {"unknown": True},
    }
    no_status = {"metadata": {"name": "nostatus", "uid": "uid-nostatus", "resourceVersion": "6"}}
    no_uid = {"metadata": {"name": "anonymous", "resourceVersion": "7"}}
    not_an_object = ["garbage"]
    events = [WatchEvent("ADDED", weird), WatchEvent("ADDED", no_status), WatchEvent("ADDED", no_uid),
              WatchEvent("ADDED", not_an_object), WatchEvent("MODIFIED", good)]  # type: ignore[arg-type]

    _apply_events(cluster_id=cluster.pk, kind="nodes", events=events, lease=lease)
    lease.release()

    stored_weird = Node.objects.get(cluster=cluster, uid="uid-weird")
    issues = " | ".join(stored_weird.issues)
    assert "unparsable quantity 'lots'" in issues
    assert "extended resources are integers" in issues
    assert "100m" in issues
    assert "longer than 63" in issues
    assert "NUL" in issues
    assert "unknown fields: surprise" in issues
    assert stored_weird.capacity["cpu"] == "1e3"
    assert stored_weird.taints == []
    assert "status: missing" in Node.objects.get(cluster=cluster, uid="uid-nostatus").issues
    assert Node.objects.get(cluster=cluster, uid=good["metadata"]["uid"]).resource_version == "424242"
    assert SyncIssue.objects.filter(cluster=cluster, kind="nodes").count() == 2
    assert SyncIssue.objects.filter(name="anonymous", error__contains="uid").exists()


@pytest.mark.slow  # about 6 s
def test_live_rows_equal_simulator_after_churn(sim: Simulator, cluster: Cluster, watchers) -> None:
    watchers()
    assert_converged(sim, cluster)
    sim.churn.start(rate_per_second=30, seed=3)
    time.sleep(4)
    sim.churn.stop()
    assert_converged(sim, cluster, timeout=20)
    assert db_state(cluster, "pods") == sim_state(sim, "pods")
    assert settings.PORTAL_LEASE_BACKEND == "redis"
