"""Protocol tests: discovery, list/pagination, selectors, watch, CRUD, patch flavours, SSA, dryRun, validation."""

from __future__ import annotations

import threading
import time

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from .conftest import request, watch_lines


def _core(api_client):
    return kubernetes.client.CoreV1Api(api_client)


def _pod(name: str, ns: str = "team-a", **labels) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


# ------------------------------------------------------------------------------------------------ discovery
def test_discovery(sim):
    v = request(sim, "GET", "/version").json()
    assert v["gitVersion"] == "v1.35.0"
    assert v["major"] == "1"
    assert v["minor"] == "35"
    assert request(sim, "GET", "/api").json()["versions"] == ["v1"]
    groups = request(sim, "GET", "/apis").json()
    assert groups["kind"] == "APIGroupList"
    assert groups["groups"][0]["preferredVersion"]["groupVersion"] == "resource.k8s.io/v1"
    core = {r["name"]: r for r in request(sim, "GET", "/api/v1").json()["resources"]}
    assert core["pods"]["shortNames"] == ["po"]
    assert core["pods"]["namespaced"] is True
    assert core["nodes"]["namespaced"] is False
    assert "watch" in core["nodes"]["verbs"]
    assert "pods/status" in core
    assert "nodes/status" in core
    rs = {r["name"]: r for r in request(sim, "GET", "/apis/resource.k8s.io/v1").json()["resources"]}
    assert set(rs) >= {
        "resourceslices",
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
        "resourceclaims/status",
    }
    assert request(sim, "GET", "/apis/resource.k8s.io").json()["kind"] == "APIGroup"


# ------------------------------------------------------------------------------------------------ get/list
def test_list_shapes_and_client(sim, api_client):
    raw = request(sim, "GET", "/api/v1/pods").json()
    assert raw["kind"] == "PodList"
    assert raw["apiVersion"] == "v1"
    assert int(raw["metadata"]["resourceVersion"]) == sim.store.resource_version
    assert all("kind" not in i and "apiVersion" not in i for i in raw["items"])
    pods = _core(api_client).list_pod_for_all_namespaces()
    assert len(pods.items) == len(sim.store.objects("pods"))
    ns_pods = _core(api_client).list_namespaced_pod("team-b")
    assert {p.metadata.namespace for p in ns_pods.items} == {"team-b"}
    rapi = kubernetes.client.ResourceV1Api(api_client)
    slices = rapi.list_resource_slice()
    assert {s.spec.driver for s in slices.items} == {"gpu.nvidia.com"}
    assert rapi.list_namespaced_resource_claim("team-a").items[0].metadata.name == "claim-1"
    assert rapi.list_device_class().items[0].metadata.name == "gpu.nvidia.com"
    node = _core(api_client).read_node("gpu-node-0")
    assert node.status.allocatable["nvidia.com/gpu"] == "8"


def test_get_not_found_status(sim):
    r = request(sim, "GET", "/api/v1/namespaces/team-a/pods/nope")
    assert r.status == 404
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=train", {"train-1", "train-3", "train-5"}),
        ("app==infer", {"train-0", "train-2", "train-4"}),
        ("app!=train", {"train-0", "train-2", "train-4"}),
        ("idx in (1,2)", {"train-1", "train-2"}),
        ("idx notin (0,1,2,3),app", {"train-4", "train-5"}),
        ("!missing,idx", {f"train-{i}" for i in range(6)}),
        ("missing", set()),
    ],
)
def test_label_selectors(sim, api_client, selector, expected):
    pods = _core(api_client).list_pod_for_all_namespaces(label_selector=selector)
    assert {p.metadata.name for p in pods.items if p.metadata.name.startswith("train-")} == expected


def test_field_selectors(sim, api_client):
    core = _core(api_client)
    assert {
        p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-node-1").items
    } == {"train-1", "train-4"}
    assert {
        p.metadata.name
        for p in core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Running,metadata.namespace==team-b"
        ).items
    } == {"train-5"}
    assert [n.metadata.name for n in core.list_node(field_selector="metadata.name=gpu-node-2").items] == ["gpu-node-2"]
    slices = kubernetes.client.ResourceV1Api(api_client).list_resource_slice(field_selector="spec.driver=other")
    assert slices.items == []


def test_table_output(sim):
    r = request(sim, "GET", "/api/v1/pods", headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    t = r.json()
    assert t["kind"] == "Table"
    assert t["apiVersion"] == "meta.k8s.io/v1"
    names = [c["name"] for c in t["columnDefinitions"]]
    assert names[0] == "Name"
    assert "Age" in names
    assert "Status" in names
    assert t["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


# ------------------------------------------------------------------------------------------------ pagination
def test_pagination_consistent_under_writes(sim, api_client):
    core = _core(api_client)
    for i in range(25):
        core.create_namespaced_pod("team-b", _pod(f"page-{i:02d}", "team-b", page="yes"))
    first = core.list_namespaced_pod("team-b", limit=10, label_selector="page=yes")
    assert len(first.items) == 10
    assert first.metadata._continue
    assert first.metadata.remaining_item_count == 15
    rv = first.metadata.resource_version
    # concurrent writes must not leak into later pages
    core.delete_namespaced_pod("page-20", "team-b")
    core.create_namespaced_pod("team-b", _pod("page-99", "team-b", page="yes"))
    names = [p.metadata.name for p in first.items]
    cont = first.metadata._continue
    while cont:
        page = core.list_namespaced_pod("team-b", limit=10, _continue=cont, label_selector="page=yes")
        assert page.metadata.resource_version == rv
        names += [p.metadata.name for p in page.items]
        cont = page.metadata._continue
    assert names == [f"page-{i:02d}" for i in range(25)]
    fresh = core.list_namespaced_pod("team-b", label_selector="page=yes")
    assert "page-99" in {p.metadata.name for p in fresh.items}
    assert len(fresh.items) == 25


def test_expired_continue_gives_410(sim):
    first = request(sim, "GET", "/api/v1/pods?limit=2").json()
    token = first["metadata"]["continue"]
    ok = request(sim, "GET", f"/api/v1/pods?limit=2&continue={token}")
    assert ok.status == 200
    sim.store.compact()
    r = request(sim, "GET", f"/api/v1/pods?limit=2&continue={token}")
    assert r.status == 410
    assert r.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "The provided continue parameter is too old to display a consistent list result. You can start a "
        "new list without the continue parameter.",
        "reason": "Expired",
        "code": 410,
    }


# ------------------------------------------------------------------------------------------------ watch
def test_watch_from_resource_version(sim, api_client):
    core = _core(api_client)
    rv = core.list_namespaced_pod("team-a").metadata.resource_version
    core.create_namespaced_pod("team-a", _pod("watched"))
    core.patch_namespaced_pod("watched", "team-a", {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("watched", "team-a")
    w = kubernetes.watch.Watch()
    events = [
        (e["type"], e["object"].metadata.name)
        for e in w.stream(core.list_namespaced_pod, "team-a", resource_version=rv, timeout_seconds=1)
    ]
    assert events == [("ADDED", "watched"), ("MODIFIED", "watched"), ("DELETED", "watched")]


def test_a_deleted_pod_carries_its_deletion_timestamp(sim, api_client):
    """Pods are deleted gracefully: the DELETED event's object has deletionTimestamp (what the portal ends the pod's
    allocation at); a namespace-less kind without graceful deletion has none."""
    core = _core(api_client)
    rv = core.list_namespaced_pod("team-a").metadata.resource_version
    core.create_namespaced_pod("team-a", _pod("gone"))
    core.delete_namespaced_pod("gone", "team-a")
    [deleted] = [e["object"] for e in kubernetes.watch.Watch().stream(
        core.list_namespaced_pod, "team-a", resource_version=rv, timeout_seconds=1) if e["type"] == "DELETED"]
    assert deleted.metadata.deletion_timestamp is not None
    assert deleted.metadata.deletion_grace_period_seconds == 0
    rv = core.list_namespace().metadata.resource_version
    core.create_namespace({"metadata": {"name": "brief"}})
    core.delete_namespace("brief")
    [namespace] = [e["object"] for e in kubernetes.watch.Watch().stream(
        core.list_namespace, resource_version=rv, timeout_seconds=1) if e["type"] == "DELETED"]
    assert namespace.metadata.deletion_timestamp is None


def test_watch_rv0_synthetic_added_then_live(sim, api_client):
    core = _core(api_client)
    seen: list[tuple[str, str]] = []

    def writer():
        time.sleep(0.5)
        core.create_namespaced_pod("team-b", _pod("live-one", "team-b"))

    t = threading.Thread(target=writer)
    t.start()
    w = kubernetes.watch.Watch()
    for e in w.stream(core.list_namespaced_pod, "team-b", resource_version="0", timeout_seconds=2):
        seen.append((e["type"], e["object"].metadata.name))
        if e["object"].metadata.name == "live-one":
            w.stop()
    t.join()
    current = {p["metadata"]["name"] for p in sim.store.objects("pods") if p["metadata"]["namespace"] == "team-b"}
    assert {n for typ, n in seen if typ == "ADDED"} == current
    assert seen[-1] == ("ADDED", "live-one")


def test_watch_bookmarks_and_timeout(sim):
    rv = sim.store.resource_version
    start = time.monotonic()
    events = watch_lines(
        sim, f"/api/v1/nodes?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=2"
    )
    elapsed = time.monotonic() - start
    assert 1.8 <= elapsed < 4
    bms = [e for e in events if e["type"] == "BOOKMARK"]
    assert len(bms) >= 2
    assert bms[-1]["object"] == {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(sim.store.resource_version)},
    }


@pytest.mark.slow  # about 11 s of watch windows
def test_closing_bookmark_never_skips_undelivered_events(sim):
    """A watch that times out while events are still queued for it must not end with a bookmark past them: a client
    resuming from that bookmark would never see those events (the sync engine saves bookmark resourceVersions)."""
    for round_ in range(4):
        stop = threading.Event()
        written: list[int] = []

        def writer(round_: int = round_, stop: threading.Event = stop, written: list[int] = written) -> None:
            n = 0
            while not stop.is_set():
                node = sim.store.get("nodes", None, "gpu-node-0")
                node["metadata"]["labels"]["flap"] = f"{round_}-{n}"
                written.append(int(sim.store.update("nodes", node, check_rv=False)["metadata"]["resourceVersion"]))
                n += 1

        rv = sim.store.resource_version
        thread = threading.Thread(target=writer)
        thread.start()
        try:
            events = watch_lines(
                sim, f"/api/v1/nodes?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=1"
            )
        finally:
            stop.set()
            thread.join()
        delivered = {int(e["object"]["metadata"]["resourceVersion"]) for e in events if e["type"] != "BOOKMARK"}
        bookmarks = [int(e["object"]["metadata"]["resourceVersion"]) for e in events if e["type"] == "BOOKMARK"]
        resume_from = max([rv, *bookmarks, *delivered])
        skipped = [v for v in written if v <= resume_from and v not in delivered]
        assert not skipped, (round_, len(skipped), resume_from)


def test_watch_selectors_and_object_shape(sim, api_client):
    core = _core(api_client)
    rv = sim.store.resource_version

    def act():
        core.create_namespaced_pod("team-a", _pod("sel-yes", app="sel"))
        core.create_namespaced_pod("team-a", _pod("sel-no", app="other"))

    act()
    events = watch_lines(
        sim, f"/api/v1/namespaces/team-a/pods?watch=1&resourceVersion={rv}&labelSelector=app%3Dsel&timeoutSeconds=1"
    )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "sel-yes")]
    assert events[0]["object"]["kind"] == "Pod"
    assert events[0]["object"]["apiVersion"] == "v1"
    events = watch_lines(
        sim, f"/api/v1/pods?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Dsel-no&timeoutSeconds=1"
    )
    assert [e["object"]["metadata"]["name"] for e in events] == ["sel-no"]


def test_watch_after_compaction_gives_410_error_event(sim, api_client):
    old_rv = sim.store.resource_version
    _core(api_client).create_namespace({"metadata": {"name": "compact-me"}})
    sim.store.compact()
    events = watch_lines(sim, f"/api/v1/namespaces?watch=true&resourceVersion={old_rv}&timeoutSeconds=5")
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    st = events[0]["object"]
    assert st["kind"] == "Status"
    assert st["code"] == 410
    assert st["reason"] == "Expired"
    assert st["message"].startswith(f"too old resource version: {old_rv} (")
    w = kubernetes.watch.Watch()
    with pytest.raises(ApiException) as exc:
        list(
            w.stream(
                _core(api_client).list_namespace, resource_version=str(old_rv), timeout_seconds=1, _request_timeout=5
            )
        )
    assert exc.value.status == 410


def test_resource_versions_are_global_and_monotonic(sim, api_client):
    core = _core(api_client)
    a = core.create_namespaced_pod("team-a", _pod("rv-a"))
    b = kubernetes.client.ResourceV1Api(api_client).create_namespaced_resource_claim_template(
        "team-a",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "tmpl"},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
            },
        },
    )
    assert int(b.metadata.resource_version) == int(a.metadata.resource_version) + 1
    assert int(b.metadata.resource_version) == sim.store.resource_version


# ------------------------------------------------------------------------------------------------ writes
def test_create_update_conflicts(sim, api_client):
    core = _core(api_client)
    created = core.create_namespaced_pod("team-a", _pod("crud"))
    assert created.metadata.uid
    assert created.metadata.generation == 1
    assert created.metadata.creation_timestamp
    with pytest.raises(ApiException) as exc:
        core.create_namespaced_pod("team-a", _pod("crud"))
    assert exc.value.status == 409
    assert '"AlreadyExists"' in exc.value.body
    gen = core.create_namespaced_pod(
        "team-a", {"metadata": {"generateName": "gen-"}, "spec": {"containers": [{"name": "m", "image": "x"}]}}
    )
    assert gen.metadata.name.startswith("gen-")
    assert len(gen.metadata.name) > 4
    body = core.read_namespaced_pod("crud", "team-a")
    body.metadata.labels = {"updated": "yes"}
    updated = core.replace_namespaced_pod("crud", "team-a", body)
    assert updated.metadata.labels == {"updated": "yes"}
    assert int(updated.metadata.resource_version) > int(body.metadata.resource_version)
    body.metadata.labels = {"stale": "yes"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as exc:
        core.replace_namespaced_pod("crud", "team-a", body)
    assert exc.value.status == 409
    assert '"Conflict"' in exc.value.body
    deleted = core.delete_namespaced_pod("crud", "team-a")
    assert deleted.metadata.name == "crud"
    assert sim.store.get("pods", "team-a", "crud") is None


def test_validation_errors(sim):
    r = request(sim, "POST", "/api/v1/namespaces/team-a/pods", body=b"{not json")
    assert r.status == 400
    assert r.json()["reason"] == "BadRequest"
    r = request(sim, "POST", "/api/v1/namespaces/team-a/pods", body={"metadata": {"name": "Bad_Name"}})
    assert r.status == 422
    assert r.json()["reason"] == "Invalid"
    r = request(sim, "POST", "/api/v1/namespaces/team-a/pods", body={"metadata": {}})
    assert r.status == 422
    r = request(sim, "POST", "/api/v1/namespaces/ghost/pods", body={"metadata": {"name": "x"}})
    assert r.status == 404
    assert r.json()["message"] == 'namespaces "ghost" not found'
    r = request(sim, "POST", "/api/v1/nodes", body={"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})
    assert r.status == 400
    assert r.json()["kind"] == "Status"
    r = request(sim, "PATCH", "/api/v1/nodes/gpu-node-0", body={"metadata": {}}, headers={"Content-Type": "text/plain"})
    assert r.status == 415
    r = request(sim, "GET", "/api/v1/widgets")
    assert r.status == 404
    assert r.json()["kind"] == "Status"


def test_dry_run(sim):
    rv = sim.store.resource_version
    r = request(sim, "POST", "/api/v1/namespaces/team-a/pods?dryRun=All", body=_pod("dry"))
    assert r.status == 201
    assert r.json()["metadata"]["uid"]
    assert sim.store.get("pods", "team-a", "dry") is None
    r = request(
        sim,
        "PATCH",
        "/api/v1/nodes/gpu-node-0?dryRun=All",
        body={"metadata": {"labels": {"dry": "1"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status == 200
    assert r.json()["metadata"]["labels"]["dry"] == "1"
    assert "dry" not in sim.store.get("nodes", None, "gpu-node-0")["metadata"]["labels"]
    r = request(sim, "DELETE", "/api/v1/namespaces/team-a/pods/train-0?dryRun=All")
    assert r.status == 200
    assert sim.store.get("pods", "team-a", "train-0") is not None
    r = request(
        sim,
        "PATCH",
        "/api/v1/namespaces/team-a/resourcequotas/dry-q?dryRun=All&fieldManager=t",
        body=b"apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: dry-q\n",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    assert r.status == 201
    assert sim.store.get("resourcequotas", "team-a", "dry-q") is None
    assert sim.store.resource_version == rv


def test_patch_flavours(sim):
    base = "/api/v1/namespaces/team-a/pods/train-2"
    r = request(
        sim,
        "PATCH",
        base,
        body={"metadata": {"labels": {"m": "1", "idx": None}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.status == 200
    assert r.json()["metadata"]["labels"] == {"app": "infer", "m": "1"}
    r = request(
        sim,
        "PATCH",
        base,
        body={"spec": {"containers": [{"name": "side", "image": "envoy"}]}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert [c["name"] for c in r.json()["spec"]["containers"]] == ["main", "side"]
    r = request(
        sim,
        "PATCH",
        base,
        body={"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert [c["image"] for c in r.json()["spec"]["containers"]] == ["busybox:2", "envoy"]
    r = request(
        sim,
        "PATCH",
        base,
        body=[
            {"op": "test", "path": "/metadata/labels/m", "value": "1"},
            {"op": "replace", "path": "/metadata/labels/m", "value": "2"},
            {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}},
            {"op": "remove", "path": "/spec/containers/1"},
        ],
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert r.status == 200
    obj = r.json()
    assert obj["metadata"]["labels"]["m"] == "2"
    assert obj["metadata"]["annotations"] == {"a": "b"}
    assert len(obj["spec"]["containers"]) == 1
    r = request(
        sim,
        "PATCH",
        base,
        body=[{"op": "test", "path": "/metadata/labels/m", "value": "nope"}],
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert r.status == 422
    # status subresource: main endpoint ignores status, /status changes only status
    r = request(
        sim,
        "PATCH",
        base,
        body={"status": {"phase": "Failed"}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.json()["status"]["phase"] == "Running"
    r = request(
        sim,
        "PATCH",
        base + "/status",
        body={"status": {"phase": "Succeeded"}, "metadata": {"labels": {}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert r.json()["status"]["phase"] == "Succeeded"
    assert r.json()["metadata"]["labels"]
    managers = {(m["manager"], m.get("subresource", "")) for m in r.json()["metadata"]["managedFields"]}
    assert ("conftest", "") not in managers
    assert any(sub == "status" for _, sub in managers)


# ------------------------------------------------------------------------------------------------ server-side apply
def _apply(sim, name, hard, labels, manager, force=False, dry=False):
    doc = "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: {}\n  labels:\n{}\nspec:\n  hard:\n{}\n".format(
        name,
        "\n".join(f"    {k}: '{v}'" for k, v in labels.items()) or "    {}",
        "\n".join(f"    {k}: '{v}'" for k, v in hard.items()),
    )
    q = f"?fieldManager={manager}" if manager else "?"
    q += "&force=true" if force else ""
    q += "&dryRun=All" if dry else ""
    return request(
        sim,
        "PATCH",
        f"/api/v1/namespaces/team-a/resourcequotas/{name}{q}",
        body=doc.encode(),
        headers={"Content-Type": "application/apply-patch+yaml"},
    )


def test_server_side_apply(sim):
    r = _apply(sim, "ssa", {"cpu": "4", "memory": "8Gi"}, {"a": "1", "b": "2"}, "alice")
    assert r.status == 201
    mf = r.json()["metadata"]["managedFields"]
    assert mf == [
        {
            "manager": "alice",
            "operation": "Apply",
            "apiVersion": "v1",
            "time": mf[0]["time"],
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:a": {}, "f:b": {}}},
                "f:spec": {"f:hard": {"f:cpu": {}, "f:memory": {}}},
            },
        }
    ]
    assert _apply(sim, "ssa", {"cpu": "4"}, {}, None).status == 400
    # same value from another manager: shared ownership, no conflict
    assert _apply(sim, "ssa", {"cpu": "4"}, {}, "bob").status == 200
    r = _apply(sim, "ssa", {"cpu": "5"}, {"a": "9"}, "bob")
    assert r.status == 409
    st = r.json()
    assert st["reason"] == "Conflict"
    assert st["message"].startswith("Apply failed with 2 conflicts")
    assert {c["field"] for c in st["details"]["causes"]} == {".spec.hard.cpu", ".metadata.labels.a"}
    assert all(c["reason"] == "FieldManagerConflict" for c in st["details"]["causes"])
    r = _apply(sim, "ssa", {"memory": "9Gi"}, {}, "bob")
    assert r.status == 409
    assert r.json()["message"] == ('Apply failed with 1 conflict: conflict with "alice": .spec.hard.memory')
    r = _apply(sim, "ssa", {"cpu": "5"}, {"a": "9"}, "bob", force=True)
    assert r.status == 200
    assert r.json()["spec"]["hard"]["cpu"] == "5"
    owners = {m["manager"]: m["fieldsV1"] for m in r.json()["metadata"]["managedFields"]}
    assert "f:cpu" not in owners["alice"]["f:spec"]["f:hard"]
    assert "f:cpu" in owners["bob"]["f:spec"]["f:hard"]
    # alice drops label b and memory: both removed (nobody else owns them); label a now belongs to bob
    r = _apply(sim, "ssa", {"cpu": "5"}, {}, "alice")
    assert r.status == 200
    obj = r.json()
    assert obj["metadata"]["labels"] == {"a": "9"}
    assert obj["spec"]["hard"] == {"cpu": "5"}
    # an Update manager takes ownership of what it changes
    r = request(
        sim,
        "PATCH",
        "/api/v1/namespaces/team-a/resourcequotas/ssa?fieldManager=editor",
        body={"spec": {"hard": {"cpu": "6"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    entries = {(m["manager"], m["operation"]) for m in r.json()["metadata"]["managedFields"]}
    assert ("editor", "Update") in entries
    assert _apply(sim, "ssa", {"cpu": "7"}, {}, "alice").json()["message"].endswith('"editor": .spec.hard.cpu')
    # dry-run apply does not store
    rv = sim.store.resource_version
    assert _apply(sim, "ssa", {"cpu": "8"}, {}, "alice", force=True, dry=True).json()["spec"]["hard"]["cpu"] == "8"
    assert sim.store.resource_version == rv


def test_namespace_delete_cascades(sim, api_client):
    core = _core(api_client)
    core.create_namespace({"metadata": {"name": "doomed"}})
    core.create_namespaced_pod("doomed", _pod("inside", "doomed"))
    core.delete_namespace("doomed")
    assert sim.store.get("pods", "doomed", "inside") is None


def test_watch_selector_transitions(sim):
    rv = sim.store.resource_version
    base = "/api/v1/namespaces/team-a/pods"
    assert request(sim, "POST", base, body=_pod("mover")).status == 201
    for labels in ({"phase": "in"}, {"phase": "in", "x": "y"}, {"phase": None}):
        r = request(
            sim,
            "PATCH",
            f"{base}/mover",
            body={"metadata": {"labels": labels}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert r.status == 200
    events = watch_lines(sim, f"{base}?watch=true&resourceVersion={rv}&labelSelector=phase%3Din&timeoutSeconds=1")
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
