"""The sync after the API server's history went back (an etcd restore), the periodic safety-net relist, and what the
cluster page says about incidents and stale kinds."""

from __future__ import annotations

import copy
import datetime as dt
import time
import uuid
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from inventory.k8s.types import KindRef, WatchEvent
from inventory.leases import lease_backend
from inventory.models import Cluster, Pod, SyncIncident, SyncState
from inventory.services.clients import client_for
from inventory.services.sync import kind_sync_window, relist_due, sync_state_for
from kubesim import Simulator
from tests.inventory.conftest import assert_converged


def _churn(sim: Simulator, count: int) -> None:
    """Move the server's resourceVersion on (node label changes), past what a restore goes back to."""
    node = copy.deepcopy(sim.store.objects("nodes")[0])
    for i in range(count):
        node["metadata"].setdefault("labels", {})["portal.test/round"] = str(i)
        node.pop("status", None)
        node = sim.store.update("nodes", node, check_rv=False)


def _wait_for_bookmarks(cluster: Cluster, resource_version: int, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        saved = SyncState.objects.filter(cluster=cluster).values_list("resource_version", flat=True)
        if all(rv == str(resource_version) for rv in saved):
            return
        time.sleep(0.2)
    raise AssertionError(f"bookmarks did not reach {resource_version}")


@pytest.mark.slow  # about 5 s
def test_api_server_restore_converges_and_is_recorded(sim: Simulator, cluster: Cluster, watchers) -> None:
    w = watchers()
    assert_converged(sim, cluster)
    old_pods = set(Pod.objects.filter(cluster=cluster).values_list("uid", flat=True))
    _churn(sim, 50)
    assert_converged(sim, cluster)
    before = sim.store.resource_version
    _wait_for_bookmarks(cluster, before)  # the portal has seen history past what the restore goes back to
    sim.restore()  # resourceVersions go back, every object has a new uid

    assert sim.store.resource_version < before
    took = assert_converged(sim, cluster, timeout=30)
    assert not Pod.objects.filter(cluster=cluster, uid__in=old_pods, deleted_at__isnull=True).exists()
    incidents = SyncIncident.objects.filter(cluster=cluster, cause=SyncIncident.Cause.HISTORY_REWOUND)
    assert {"pods", "nodes", "resourceslices"} <= set(incidents.values_list("kind", flat=True))
    assert "Too large resource version" in incidents.filter(kind="pods").first().detail
    assert SyncState.objects.get(cluster=cluster, kind="pods").relists >= 1
    w.stop()
    assert took < 30


class _AcceptsFutureVersions:
    """A server that (unlike the API server) accepts a watch from a resourceVersion it has not reached and then
    streams its own, lower ones: what the simulator did before, and what a cache in front of a restored etcd may do."""

    def __init__(self, inner: Any, sim: Simulator) -> None:
        self._inner, self._sim = inner, sim

    def list_page(self, kind: KindRef, *, limit: int, continue_token: str | None) -> Any:
        return self._inner.list_page(kind, limit=limit, continue_token=continue_token)

    def watch(self, kind: KindRef, *, resource_version: str, timeout_seconds: int) -> Any:
        served = str(min(int(resource_version), self._sim.store.resource_version))
        return self._inner.watch(kind, resource_version=served, timeout_seconds=timeout_seconds)

    def server_version(self) -> str:
        return self._inner.server_version()

    def close(self) -> None:
        self._inner.close()


def _window(cluster: Cluster, kind: str, client: Any, seconds: float) -> Any:
    state = sync_state_for(cluster_id=cluster.pk, kind=kind)
    lease = lease_backend().acquire(state, settings.PORTAL_WATCH_LEASE_SECONDS)
    assert lease is not None
    try:
        return kind_sync_window(cluster_id=cluster.pk, kind=kind, client=client, lease=lease, window_seconds=seconds)
    finally:
        lease.release()


@pytest.mark.slow  # about 5 s
def test_bookmark_below_the_saved_resource_version_relists(sim: Simulator, cluster: Cluster) -> None:
    client = client_for(cluster)
    try:
        _window(cluster, "pods", client, 1.5)
        ahead = sim.store.resource_version + 1000
        SyncState.objects.filter(cluster=cluster, kind="pods").update(resource_version=str(ahead))
        result = _window(cluster, "pods", _AcceptsFutureVersions(client, sim), 3.5)
    finally:
        client.close()
    assert result.rewinds >= 1
    assert len(result.lists) >= 1
    saved = int(SyncState.objects.get(cluster=cluster, kind="pods").resource_version)
    assert saved <= sim.store.resource_version  # the lower bookmark never overwrote the saved version unnoticed
    incident = SyncIncident.objects.get(cluster=cluster, kind="pods")
    assert f"on a watch from {ahead}" in incident.detail


def test_history_check_ignores_opaque_versions() -> None:
    from inventory.services.sync import _history_check

    _history_check([WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "abc"}})], "100")
    _history_check([WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "100"}})], "100")
    _history_check([WatchEvent("ADDED", {"metadata": {"resourceVersion": "5"}})], "")


def test_relist_due_is_staggered_per_state(settings) -> None:
    settings.PORTAL_SYNC_RELIST_SECONDS = 1000
    now = timezone.now()
    due_after = [min(s for s in range(0, 2000, 10) if relist_due(state_id=state_id, now=now,
                                                                 last_list_finished_at=now - dt.timedelta(seconds=s)))
                 for state_id in range(1, 40)]
    assert all(750 <= d <= 1260 for d in due_after)
    assert len(set(due_after)) > 10  # spread, not all at once
    assert not relist_due(state_id=1, last_list_finished_at=None, now=now)
    settings.PORTAL_SYNC_RELIST_SECONDS = 0
    assert not relist_due(state_id=1, last_list_finished_at=now - dt.timedelta(days=30), now=now)


@pytest.mark.slow  # watch recovery with real waits (about 4 s)
def test_periodic_relist_corrects_what_the_watch_missed(sim: Simulator, cluster: Cluster, settings) -> None:
    settings.PORTAL_SYNC_RELIST_SECONDS = 3600
    client = client_for(cluster)
    try:
        _window(cluster, "pods", client, 1.0)
        state = SyncState.objects.get(cluster=cluster, kind="pods")
        ghost = Pod.objects.filter(cluster=cluster).first()
        ghost.pk, ghost.uid, ghost.name = None, str(uuid.uuid4()), "missed-delete"
        ghost.save()  # a delete the watch never delivered
        quiet = _window(cluster, "pods", client, 1.0)
        assert quiet.lists == []  # not due yet: the ghost stays
        SyncState.objects.filter(pk=state.pk).update(
            last_list_finished_at=timezone.now() - dt.timedelta(seconds=3600 * 1.3))
        result = _window(cluster, "pods", client, 1.0)
    finally:
        client.close()
    assert len(result.lists) == 1
    assert Pod.objects.get(pk=ghost.pk).deleted_at is not None
    assert SyncState.objects.get(pk=state.pk).list_id == state.list_id + 1
    incident = SyncIncident.objects.get(cluster=cluster, kind="pods")
    assert incident.cause == SyncIncident.Cause.RELIST_DRIFT
    assert "tombstoned 1 objects" in incident.detail


@pytest.mark.django_db
def test_cluster_page_shows_incidents_stale_kinds_listings_and_lease_losses(client: Client, member) -> None:
    cluster = Cluster.objects.create(name="c1", kubeconfig="")
    old = timezone.now() - dt.timedelta(seconds=settings.PORTAL_SYNC_STALE_SECONDS + 60)
    SyncState.objects.create(cluster=cluster, kind="pods", phase="watching", last_event_at=old, last_success_at=old,
                             list_id=3, lease_losses=2)
    SyncState.objects.create(cluster=cluster, kind="nodes", phase="watching", last_event_at=timezone.now())
    SyncIncident.objects.create(cluster=cluster, kind="pods", cause=SyncIncident.Cause.HISTORY_REWOUND,
                                detail="watch pods: watch error 504: Timeout: Too large resource version: 9, current: 3")
    client.force_login(member)
    page = client.get(reverse("inventory:cluster_detail", kwargs={"pk": cluster.pk})).content.decode()
    assert "Stale data" in page
    banner = page[page.index("data-stale-kinds"):page.index("</div>", page.index("data-stale-kinds"))]
    assert "pods" in banner
    assert "nodes" not in banner
    assert "Server history went back" in page
    assert "Too large resource version: 9, current: 3" in page
    assert "<th class=\"num\">Listings</th>" in page
    assert "<th class=\"num\">Lease losses</th>" in page
    SyncState.objects.filter(kind="pods").update(last_event_at=timezone.now())
    fresh = client.get(reverse("inventory:cluster_detail", kwargs={"pk": cluster.pk})).content.decode()
    assert "Stale data" not in fresh


def test_sync_command_reports_listings_and_lease_losses(sim: Simulator, cluster: Cluster) -> None:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("sync", "--cluster", cluster.name, "--once", "--kind", "nodes", "--kind", "pods", stdout=out)
    SyncState.objects.filter(cluster=cluster, kind="pods").update(lease_losses=4)
    call_command("sync", "--cluster", cluster.name, "--once", "--kind", "pods", stdout=out)
    lines = [line for line in out.getvalue().splitlines() if "listings=" in line]
    assert lines[-1].split()[:4] == ["pods", "listings=2", "relists=0", "lease_losses=4"]
    status = StringIO()
    call_command("sync", "--cluster", cluster.name, "--status", stdout=status)
    rows = {line.split()[0]: line for line in status.getvalue().splitlines()}
    assert "listings=1" in rows["nodes"]
    assert "lease_losses=4" in rows["pods"]


def test_a_cache_outage_in_a_post_commit_hook_never_ends_a_watcher(sim: Simulator, cluster: Cluster, watchers,
                                                                   settings) -> None:
    """derive announces changed devices after each batch commits; the catalog's debounce then reads the cache. With
    the cache unreachable (a real refused connection, not a mock) the batch is applied and the watcher carries on."""
    from django.core.cache import cache

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": "redis://127.0.0.1:1/0"}}
    with pytest.raises(Exception, match=r"(?i)connect"):
        cache.get("probe")  # the outage is real
    w = watchers(kinds=("nodes", "resourceslices"), window=30.0)
    assert_converged(sim, cluster, kinds=("nodes", "resourceslices"))
    _churn(sim, 5)
    for rs in sim.store.objects("resourceslices")[:3]:
        rs["metadata"].setdefault("labels", {})["portal.test/hook"] = "x"
        sim.store.update("resourceslices", rs, check_rv=False)
    assert_converged(sim, cluster, kinds=("nodes", "resourceslices"))
    w.stop()  # raises if a window ended with an exception
    assert w.windows == 2  # one 30 s window per kind, never cut short


@pytest.mark.slow  # waits out a lease on purpose (13 s)
def test_the_lease_survives_a_long_wait_for_the_cluster_lock(sim: Simulator, cluster: Cluster) -> None:
    """On a big cluster a kind's tombstone-and-derive step queues behind other kinds' derivations on the cluster's
    change lock for longer than a lease: the lease is renewed meanwhile, the window goes on, nothing is listed twice."""
    import threading

    from django.db import connection, transaction

    from inventory.services.changes import change_feed_lock
    from inventory.services.discovery import discovery_current

    held = threading.Event()

    def hold_the_lock() -> None:
        try:
            with transaction.atomic():
                change_feed_lock(cluster_id=cluster.pk)
                held.set()
                time.sleep(settings.PORTAL_WATCH_LEASE_SECONDS * 2.5)
        finally:
            connection.close()

    client = client_for(cluster)
    discovery_current(cluster_id=cluster.pk, client=client, force=True)  # current: the wait falls on the listing
    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert held.wait(10)
    try:
        result = _window(cluster, "nodes", client, 2.0)  # raises LeaseLostError if the lease ran out
    finally:
        client.close()
        holder.join()
    assert len(result.lists) == 1
    state = SyncState.objects.get(cluster=cluster, kind="nodes")
    assert (state.list_id, state.lease_losses) == (1, 0)
    assert result.lists[0].seconds > settings.PORTAL_WATCH_LEASE_SECONDS * 2


def test_a_big_listing_refreshes_the_planners_statistics(sim: Simulator, cluster: Cluster, monkeypatch) -> None:
    """After a bulk load PostgreSQL plans for empty tables until autovacuum analyzes them (never, where it is off):
    a listing of at least ANALYZE_AFTER_ROWS objects, and `sync --once`'s derivation, analyze what they wrote."""
    from django.db import connection

    from inventory.services import sync
    from tests.inventory.conftest import _sync_once

    def analyzed() -> dict[str, int]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT relname, analyze_count FROM pg_stat_user_tables WHERE relname IN "
                           "('inventory_pod', 'inventory_node', 'inventory_device', 'inventory_finding')")
            return dict(cursor.fetchall())

    monkeypatch.setattr(sync, "ANALYZE_AFTER_ROWS", 1)
    before = analyzed()
    _sync_once(cluster, kinds=("nodes", "pods"))
    deadline = time.monotonic() + 10  # a backend reports its statistics within a second of its transaction
    while time.monotonic() < deadline:
        after = analyzed()
        if all(after.get(table, 0) > before.get(table, 0) for table in after) and len(after) == 4:
            break
        time.sleep(0.2)
    assert {table: after.get(table, 0) - before.get(table, 0) for table in after} == {
        "inventory_pod": 1, "inventory_node": 1, "inventory_device": 1, "inventory_finding": 1}
