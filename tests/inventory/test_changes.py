"""The CMDB change feed: gap-free, resumable, and exactly the inventory's state at the end.

The acceptance test runs the real watchers against the simulator over HTTP while churn and our own mutations change
nodes and devices (nodes added, deleted, replaced under the same name and relabelled; ResourceSlices added and
removed), and a consumer reads the feed through the API in small pages, crashing now and then.
"""

from __future__ import annotations

import copy
import random
import threading
import time
from datetime import timedelta
from typing import Any

import orjson
import pytest
import yaml
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from inventory.changefeed import (
    Position,
    cluster_snapshot,
    cursor_decode,
    cursor_encode,
    device_snapshot,
    feed_head,
    snapshot_text,
)
from inventory.leases import lease_backend
from inventory.models import ChangeEvent, Cluster, Device, Node
from inventory.services.changes import (
    PendingChange,
    change_events_prune,
    change_feed_lock,
    changes_record,
    node_snapshots,
)
from inventory.services.clients import client_for
from inventory.services.clusters import cluster_delete, cluster_register
from inventory.services.sync import cluster_sync_once
from kubesim import Simulator
from portal.tenancy.roles import Role
from tests.conftest import make_user
from tests.inventory.conftest import assert_converged

FEED = "/api/v1/changes/"


def _sync_once(cluster: Cluster, kinds: tuple[str, ...] | None = None) -> None:
    backend = lease_backend()
    client = client_for(cluster)
    try:
        extra = {"kinds": kinds} if kinds else {}
        cluster_sync_once(cluster_id=cluster.pk, client=client, lease_for=lambda state: backend.acquire(state, 30),
                          **extra)
    finally:
        client.close()


def _inventory(cluster: Cluster) -> dict[tuple[str, str], Any]:
    """What the database says now, keyed like the consumer's store: (object type, object id) → snapshot."""
    out: dict[tuple[str, str], Any] = {("cluster", cluster.name): orjson.loads(snapshot_text(cluster_snapshot(
        Cluster.objects.get(pk=cluster.pk))))}
    names = set(Node.objects.filter(cluster=cluster, deleted_at__isnull=True).values_list("name", flat=True))
    for name, text in node_snapshots(cluster_id=cluster.pk, names=names).items():
        out[("node", name)] = orjson.loads(text)
    for device in Device.objects.filter(cluster=cluster):
        out[("device", device.key)] = orjson.loads(snapshot_text(device_snapshot(device)))
    return out


class Consumer:
    """A CMDB sync job: applies each event to its store at once, saves its cursor every few pages, and on a crash
    loses everything but the store and the saved cursor (so it replays what it applied after the last save)."""

    def __init__(self, user: Any, *, seed: int, page_size: int = 5) -> None:
        self.user, self.page_size, self.rng = user, page_size, random.Random(seed)
        self.store: dict[tuple[str, str], Any] = {}
        self.saved_cursor = ""
        self.crashes = 0
        self.seen: dict[str, int] = {}
        self._restart()

    def _restart(self) -> None:
        self.client = Client()
        self.client.force_login(self.user)
        self.cursor = self.saved_cursor
        self.pages_since_save = 0

    def crash(self) -> None:
        self.crashes += 1
        self._restart()

    def _apply(self, event: dict[str, Any]) -> None:
        key = (event["object_type"], event["object_id"])
        self.seen[event["event"]] = self.seen.get(event["event"], 0) + 1
        if event["action"] == "deleted":
            self.store.pop(key, None)
        else:
            self.store[key] = event["snapshot"]

    def read(self, pages: int) -> bool:
        """Read up to `pages` pages; True when the feed said there is nothing more right now."""
        for _ in range(pages):
            response = self.client.get(FEED, {"since": self.cursor, "limit": self.page_size})
            assert response.status_code == 200, response.content
            body = response.json()
            crashed = False
            for event in body["results"]:
                self._apply(event)
                if self.rng.random() < 0.03:  # dies mid-page; maybe it saved this event's cursor just before
                    if self.rng.random() < 0.5:
                        self.saved_cursor = event["cursor"]
                    self.crash()
                    crashed = True
                    break
            if crashed:
                continue
            self.cursor = body["next"]
            self.pages_since_save += 1
            if self.pages_since_save >= 3:
                self.saved_cursor, self.pages_since_save = self.cursor, 0
            if not body["has_more"]:
                return True
        return False

    def drain(self, until: Position, timeout: float = 120.0) -> None:
        """Read until the cursor has passed `until` (every event written so far)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = self.read(50)
            current = cursor_decode(self.cursor)
            if done and current is not None and current >= until:
                return
            time.sleep(0.1)
        raise AssertionError(f"consumer did not catch up with {until} (at {self.cursor})")


def _gpu_node(sim: Simulator, name: str) -> dict:
    node = copy.deepcopy(sim.store.get("nodes", None, "h100-000"))
    node["metadata"] = {"name": name, "labels": {**node["metadata"].get("labels", {}),
                                                 "kubernetes.io/hostname": name}}
    return node


def _slice(sim: Simulator, name: str) -> dict:
    template = next(s for s in sim.store.objects("resourceslices") if s["spec"].get("devices"))
    obj = copy.deepcopy(template)
    obj["metadata"] = {"name": name}
    obj["spec"]["pool"] = {"name": name, "generation": 1, "resourceSliceCount": 1}
    return obj


class Mutator:
    """Node and ResourceSlice changes the simulator's churn does not make."""

    def __init__(self, sim: Simulator, seed: int) -> None:
        self.sim, self.rng, self.n = sim, random.Random(seed), 0
        self.nodes: list[str] = []
        self.slices: list[str] = []

    def step(self) -> None:
        store = self.sim.store
        self.n += 1
        action = self.rng.choice(["add-node", "delete-node", "relabel", "replace-node", "add-slice", "delete-slice",
                                  "gpu-label"])
        if action == "add-node" or (action in ("delete-node", "replace-node") and not self.nodes):
            name = f"feed-node-{self.n}"
            store.create("nodes", _gpu_node(self.sim, name))
            self.nodes.append(name)
        elif action == "delete-node":
            store.delete("nodes", None, self.nodes.pop(self.rng.randrange(len(self.nodes))))
        elif action == "replace-node":  # same name, new uid: the CMDB identity must survive it
            name = self.rng.choice(self.nodes)
            store.delete("nodes", None, name)
            store.create("nodes", _gpu_node(self.sim, name))
        elif action == "relabel":
            node = copy.deepcopy(self.rng.choice(store.objects("nodes")))
            node["metadata"].setdefault("labels", {})["portal.test/rack"] = f"r{self.n}"
            store.update("nodes", node, check_rv=False)
        elif action == "gpu-label":  # changes the model of the node's device-plugin devices
            node = copy.deepcopy(store.get("nodes", None, "h100-001"))
            node["metadata"]["labels"]["nvidia.com/gpu.product"] = f"NVIDIA-H100-80GB-HBM3-rev{self.n}"
            store.update("nodes", node, check_rv=False)
        elif action == "add-slice" or not self.slices:
            name = f"feed-pool-{self.n}"
            store.create("resourceslices", _slice(self.sim, name))
            self.slices.append(name)
        else:
            store.delete("resourceslices", None, self.slices.pop(self.rng.randrange(len(self.slices))))


def _last_position() -> Position:
    last = ChangeEvent.objects.order_by("-txid", "-id").values_list("txid", "id").first()
    return Position(*last) if last else Position(0, 0)


def _final(timeout: float = 60.0) -> None:
    """Wait until every event written so far is final for readers (every write transaction of this database that
    started before them has ended)."""
    deadline = time.monotonic() + timeout
    while feed_head() < _last_position():
        assert time.monotonic() < deadline, "the feed horizon did not pass the last event"
        time.sleep(0.1)


@pytest.mark.slow  # about 10 s
def test_consumer_resuming_after_crashes_ends_with_exactly_the_inventory(
    sim: Simulator, cluster: Cluster, watchers: Any,
) -> None:
    admin = make_user("cmdb", Role.PLATFORM_ADMIN)
    consumer = Consumer(admin, seed=11)
    running = watchers(window=3.0)
    assert_converged(sim, cluster, timeout=60)
    consumer.read(3)  # starts in the middle of the initial sync's events

    sim.churn.start(rate_per_second=25, seed=5)  # GPU flaps (node allocatable, device health), device taints
    mutator = Mutator(sim, seed=3)
    for _round in range(40):
        mutator.step()
        consumer.read(2)
        if consumer.rng.random() < 0.2:
            consumer.crash()
        time.sleep(0.05)
    sim.churn.stop()
    assert_converged(sim, cluster, timeout=60)
    running.stop()  # the database is final now

    consumer.drain(_last_position())
    expected = _inventory(cluster)
    assert consumer.store.keys() == expected.keys(), {
        "missing": sorted(expected.keys() - consumer.store.keys())[:10],
        "extra": sorted(consumer.store.keys() - expected.keys())[:10],
    }
    wrong = [key for key in expected if consumer.store[key] != expected[key]]
    assert not wrong, wrong[:10]
    # The run exercised what it claims to.
    assert consumer.crashes >= 3
    for event in ("node.created", "node.updated", "node.deleted", "device.created", "device.updated",
                  "device.deleted", "cluster.created"):
        assert consumer.seen.get(event), (event, consumer.seen)


@pytest.mark.slow  # about 4 s
def test_a_relist_that_finds_nothing_new_writes_no_events(sim: Simulator, cluster: Cluster) -> None:
    _sync_once(cluster)
    first = ChangeEvent.objects.count()
    assert ChangeEvent.objects.filter(object_type="node", action="created").count() == len(
        sim.store.objects("nodes"))
    assert ChangeEvent.objects.filter(object_type="device", action="created").count() == Device.objects.filter(
        cluster=cluster).count()
    # A heartbeat and a new resourceVersion are not CMDB changes.
    node = copy.deepcopy(sim.store.objects("nodes")[0])
    for condition in node["status"].get("conditions", []):
        condition["lastHeartbeatTime"] = "2031-01-01T00:00:00Z"
    sim.store.update("nodes", node, subresource="status", check_rv=False)

    _sync_once(cluster)

    assert ChangeEvent.objects.count() == first
    # A label is.
    node = copy.deepcopy(sim.store.objects("nodes")[0])
    node["metadata"]["labels"]["portal.test/owner"] = "cmdb"
    sim.store.update("nodes", node, check_rv=False)
    _sync_once(cluster, kinds=("nodes",))
    changed = ChangeEvent.objects.order_by("-id").first()
    assert ChangeEvent.objects.count() == first + 1
    assert changed.event_type == "node.updated"
    assert orjson.loads(changed.snapshot)["labels"]["portal.test/owner"] == "cmdb"


def _replay() -> dict[tuple[str, str], Any]:
    state: dict[tuple[str, str], Any] = {}
    for event in ChangeEvent.objects.order_by("txid", "id"):
        key = (event.object_type, event.object_id)
        if event.action == "deleted":
            state.pop(key, None)
        else:
            state[key] = orjson.loads(event.snapshot)
    return state


def test_cluster_edits_and_deletion_reach_the_feed(sim: Simulator, cluster: Cluster, admin_client: Client) -> None:
    _sync_once(cluster)  # discovery records the version the cluster reports (an update if it differs)
    after_sync = ChangeEvent.objects.filter(object_type="cluster").count()
    assert after_sync in (1, 2)
    kubeconfig = yaml.safe_dump(sim.kubeconfig())
    cluster_register(name="sim", kubeconfig=kubeconfig)  # nothing a CMDB sees changed
    assert ChangeEvent.objects.filter(object_type="cluster").count() == after_sync
    cluster_register(name="sim", kubeconfig=kubeconfig, description="GPU fleet")
    assert _replay() == _inventory(cluster)
    assert _replay()[("cluster", "sim")]["description"] == "GPU fleet"
    response = admin_client.post(f"/admin/inventory/cluster/{cluster.pk}/change/", {
        "name": "renamed", "description": "via the admin", "connection": "kubeconfig", "kubeconfig": "",
        "kubeconfig_path": "", "context": "", "sync_enabled": "on",
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    cluster.refresh_from_db()
    assert cluster.name == "sim"  # the identity is fixed once registered
    assert _replay()[("cluster", "sim")]["description"] == "via the admin"

    cluster_delete(cluster_id=cluster.pk)

    assert not Cluster.objects.exists()
    assert _replay() == {}
    assert ChangeEvent.objects.filter(action="deleted", object_type="node").count() == len(sim.store.objects("nodes"))


def _record(cluster: Cluster, name: str) -> None:
    changes_record(cluster_id=cluster.pk, object_type="node", cluster_name=cluster.name,
                   changes=[PendingChange("created", name, "{}")])


@pytest.mark.django_db(transaction=True)
def test_a_transaction_committing_late_is_never_skipped() -> None:
    """A holds its transaction open with an event (smaller id, smaller txid); B commits an event after it. A reader
    must not get B (and move its cursor past A) before A commits; afterwards it gets A's events, then B's."""
    first, second = Cluster.objects.create(name="first"), Cluster.objects.create(name="second")
    holding, release, errors = threading.Event(), threading.Event(), []

    def slow_writer() -> None:
        try:
            with transaction.atomic():
                change_feed_lock(cluster_id=first.pk)
                _record(first, "a-1")
                holding.set()
                assert release.wait(30)
                _record(first, "a-2")  # a bigger id than B's, a smaller txid
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert holding.wait(30)
    with transaction.atomic():
        change_feed_lock(cluster_id=second.pk)
        _record(second, "b-1")

    admin = make_user("reader", Role.PLATFORM_ADMIN)
    client = Client()
    client.force_login(admin)
    early = client.get(FEED).json()
    assert early["results"] == []  # B committed, but a transaction older than B is still open
    release.set()
    thread.join(30)
    assert not errors, errors

    _final()
    # The horizon is conservative: a transaction of another database that ends between the reader's snapshot and its
    # look at pg_stat_activity still counts for that one read (inventory/changefeed.py). A consumer's next poll gets
    # the events; so does this reader's.
    deadline = time.monotonic() + 30
    while not (late := client.get(FEED, {"since": early["next"]}).json())["results"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [e["object_id"] for e in late["results"]] == ["a-1", "a-2", "b-1"]
    ids = {e["object_id"]: e["id"] for e in late["results"]}
    assert ids["a-1"] < ids["b-1"] < ids["a-2"]
    assert late["has_more"] is False
    assert client.get(FEED, {"since": late["next"]}).json()["results"] == []


def _open_transaction_with_an_id(dbname: str) -> tuple[Any, int]:
    """A connection of its own to `dbname`, inside a transaction that has been given an id (and holds it)."""
    import psycopg
    from django.conf import settings

    database = settings.DATABASES["default"]
    other = psycopg.connect(host=database["HOST"] or "127.0.0.1", port=database["PORT"] or 5432,
                            user=database["USER"], password=database["PASSWORD"] or None, dbname=dbname)
    xid = other.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()[0]
    return other, xid


def pg_snapshot_xmin_now() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
        return int(cursor.fetchone()[0])


def _commit_event(cluster: Cluster, name: str) -> Position:
    """One event of `cluster`, committed as the sync writes them; its position."""
    with transaction.atomic():
        change_feed_lock(cluster_id=cluster.pk)
        _record(cluster, name)
    return _last_position()


@pytest.mark.django_db(transaction=True)
def test_a_write_transaction_of_another_database_does_not_hold_the_feed_back() -> None:
    """The transaction ids are the server's, but a transaction connected to another database can never write this
    feed: events committed after it are readable while it stays open. One of this database still holds them back."""
    cluster = Cluster.objects.create(name="c1")
    elsewhere, elsewhere_xid = _open_transaction_with_an_id("postgres")
    try:
        event = _commit_event(cluster, "after-the-other-database")
        assert elsewhere_xid < event.txid
        assert pg_snapshot_xmin_now() <= elsewhere_xid  # the server-wide horizon is held back ...
        assert feed_head() > event  # ... the feed's is not

        here, here_xid = _open_transaction_with_an_id(connection.settings_dict["NAME"])
        try:
            later = _commit_event(cluster, "after-one-of-this-database")
            assert here_xid < later.txid
            assert feed_head() < later  # may still commit here: not final
            assert feed_head() > event
        finally:
            here.rollback()
            here.close()
        assert feed_head() > later
    finally:
        elsewhere.rollback()
        elsewhere.close()


@pytest.mark.django_db(transaction=True)
def test_the_last_event_of_an_object_is_its_committed_state_under_concurrent_writers() -> None:
    """B gets its transaction id first, A a larger one; both change the same object. Without the cluster's change
    lock A could commit first and B overwrite it, while the feed (txid order) would end with A's value. With it, A
    waits for B, so the feed's last event is what the database holds."""
    cluster = Cluster.objects.create(name="c1", description="v0")
    b_has_xid, a_done, errors = threading.Event(), threading.Event(), []

    def write(value: str) -> None:
        Cluster.objects.filter(pk=cluster.pk).update(description=value)
        changes_record(cluster_id=cluster.pk, object_type="cluster", cluster_name="c1",
                       changes=[PendingChange("updated", "c1", snapshot_text({"description": value}))])

    def writer_b() -> None:
        try:
            with transaction.atomic():
                change_feed_lock(cluster_id=cluster.pk)
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_current_xact_id()")  # like the sync's fence: an id before writing
                b_has_xid.set()
                a_done.wait(1.0)  # A cannot finish while B holds the lock
                write("vB")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    def writer_a() -> None:
        try:
            assert b_has_xid.wait(30)
            with transaction.atomic():
                change_feed_lock(cluster_id=cluster.pk)
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_current_xact_id()")
                write("vA")
            a_done.set()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer_b), threading.Thread(target=writer_a)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    _final()
    last = ChangeEvent.objects.filter(object_type="cluster").order_by("txid", "id").last()
    assert orjson.loads(last.snapshot)["description"] == Cluster.objects.get(pk=cluster.pk).description == "vA"


@pytest.mark.django_db(transaction=True)
def test_feed_api_pages_filters_cursors_and_redaction(member: Any) -> None:
    cluster, other = Cluster.objects.create(name="c1"), Cluster.objects.create(name="c2")
    with transaction.atomic():
        changes_record(cluster_id=cluster.pk, object_type="device", cluster_name="c1", changes=[
            PendingChange("created", "gpu.nvidia.com/p/gpu-0",
                          snapshot_text({"attributes": {"uuid": {"string": "GPU-1234"}}, "parent": "", "model": "X"})),
            PendingChange("deleted", "gpu.nvidia.com/p/gpu-1"),
        ])
        changes_record(cluster_id=other.pk, object_type="node", cluster_name="c2",
                       changes=[PendingChange("created", "n1", snapshot_text({"labels": {}}))])
    admin = make_user("admin2", Role.PLATFORM_ADMIN)
    client = Client()
    client.force_login(admin)
    _final()

    first = client.get(FEED, {"limit": 2}).json()
    assert [e["event"] for e in first["results"]] == ["device.created", "device.deleted"]
    assert first["has_more"] is True
    assert first["results"][0]["snapshot"]["attributes"]["uuid"] == {"string": "GPU-1234"}
    assert first["results"][1]["snapshot"] is None
    rest = client.get(FEED, {"since": first["next"]}).json()
    assert [e["object_id"] for e in rest["results"]] == ["n1"]
    assert client.get(FEED, {"since": first["results"][0]["cursor"], "limit": 1}).json()["results"][0][
        "object_id"] == "gpu.nvidia.com/p/gpu-1"

    assert [e["object_id"] for e in client.get(FEED, {"type": "node"}).json()["results"]] == ["n1"]
    assert len(client.get(FEED, {"cluster": "c1"}).json()["results"]) == 2
    filtered = client.get(FEED, {"type": "node", "cluster": "c1"}).json()
    assert filtered["results"] == []
    assert cursor_decode(filtered["next"]) >= _last_position()  # filters do not make a consumer rescan

    head = client.get(FEED, {"since": "head"}).json()
    assert head["results"] == []
    assert client.get(FEED, {"since": head["next"]}).json()["results"] == []

    for bad in ("nonsense", "c1.!!!", cursor_encode(Position(1, 1))[:-2] + "$$"):
        response = client.get(FEED, {"since": bad})
        assert response.status_code == 400
        assert "invalid cursor" in response.json()["detail"]
    assert client.get(FEED, {"type": "pod"}).status_code == 400
    assert client.get(FEED, {"limit": "0"}).status_code == 400

    client.force_login(member)  # tenant roles see hardware identifiers redacted
    redacted = client.get(FEED, {"limit": 1}).json()["results"][0]["snapshot"]
    assert redacted["attributes"]["uuid"] == "redacted"
    assert redacted["parent"] == ""
    assert Client().get(FEED).status_code in (401, 403)
    assert reverse("inventory-api:change-list") == FEED


@pytest.mark.django_db(transaction=True)
def test_retention_compacts_the_feed_and_old_cursors_get_410() -> None:
    cluster = Cluster.objects.create(name="c1")

    def record(action: str, name: str, payload: str = "") -> Position:
        with transaction.atomic():
            change_feed_lock(cluster_id=cluster.pk)
            changes_record(cluster_id=cluster.pk, object_type="node", cluster_name="c1",
                           changes=[PendingChange(action, name, payload)])
        event = ChangeEvent.objects.order_by("-id").first()
        return Position(event.txid, event.id)

    before_all = record("created", "n1", '{"v":1}')
    record("updated", "n1", '{"v":2}')
    record("created", "n2", '{"v":1}')
    deleted_n2 = record("deleted", "n2")
    record("created", "n3", '{"v":1}')
    ChangeEvent.objects.exclude(object_id="n3").update(occurred_at=ChangeEvent.objects.get(
        object_id="n3").occurred_at - timedelta(days=40))

    run = change_events_prune(older_than_days=30)

    assert run.deleted == 3  # n1 created (superseded), n2 created and deleted (gone for good)
    assert (run.horizon_txid, run.horizon_id) == deleted_n2
    assert list(ChangeEvent.objects.values_list("object_id", "snapshot")) == [("n1", '{"v":2}'), ("n3", '{"v":1}')]
    client = Client()
    client.force_login(make_user("admin3", Role.PLATFORM_ADMIN))
    _final()
    gone = client.get(FEED, {"since": cursor_encode(before_all)})
    assert gone.status_code == 410
    assert "resync from a full list" in gone.json()["detail"]
    assert client.get(FEED, {"since": cursor_encode(deleted_n2)}).status_code == 200
    # From the beginning, the compacted feed still ends in the current state.
    assert [e["object_id"] for e in client.get(FEED).json()["results"]] == ["n1", "n3"]


@pytest.mark.django_db(transaction=True)
def test_a_batch_of_bookmarks_does_not_queue_for_the_change_lock() -> None:
    """A watcher's batch that carries only a bookmark writes no node or device: it saves its resourceVersion
    while another transaction holds the cluster's change lock (under churn, each kind's bookmarks otherwise waited
    behind every other kind's derivation). A batch with an object still takes the lock."""
    from django.db.utils import OperationalError

    from inventory.k8s.types import WatchEvent
    from inventory.services.sync import _apply_events, sync_state_for

    cluster = Cluster.objects.create(name="busy")
    lease = lease_backend().acquire(sync_state_for(cluster_id=cluster.pk, kind="resourceclaims"), 60)
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        try:
            with transaction.atomic():
                change_feed_lock(cluster_id=cluster.pk)
                holding.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert holding.wait(30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")
        bookmark = WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "42"}})
        _apply_events(cluster_id=cluster.pk, kind="resourceclaims", events=[bookmark], lease=lease)
        assert sync_state_for(cluster_id=cluster.pk, kind="resourceclaims").resource_version == "42"
        claim = {"metadata": {"name": "c", "namespace": "ml", "uid": "u-1", "resourceVersion": "43"}, "spec": {}}
        with pytest.raises(OperationalError, match="lock timeout"):
            _apply_events(cluster_id=cluster.pk, kind="resourceclaims", events=[WatchEvent("ADDED", claim)],
                          lease=lease)
    finally:
        release.set()
        thread.join(30)
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
        lease.release()
