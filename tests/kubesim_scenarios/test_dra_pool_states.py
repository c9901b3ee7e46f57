"""DRA pool states: stale generations, incomplete pools, device taints; raw `objects:` pass-through."""

from __future__ import annotations

from collections import defaultdict

import pytest

from kubesim.scenario import ScenarioError, load_scenario


@pytest.fixture(scope="module")
def demo() -> list[dict]:
    return load_scenario("demo")


def kind(objs, k):
    return [o for o in objs if o["kind"] == k]


def slices_of(objs, pool):
    return [s for s in kind(objs, "ResourceSlice") if s["spec"]["pool"]["name"] == pool]


def usable_devices(objs):
    """(pool, device) of the newest generation of each pool, published slices only."""
    newest = defaultdict(int)
    for s in kind(objs, "ResourceSlice"):
        newest[s["spec"]["pool"]["name"]] = max(newest[s["spec"]["pool"]["name"]], s["spec"]["pool"]["generation"])
    return {
        (s["spec"]["pool"]["name"], d["name"]): d
        for s in kind(objs, "ResourceSlice")
        if s["spec"]["pool"]["generation"] == newest[s["spec"]["pool"]["name"]]
        for d in s["spec"].get("devices", [])
    }


def test_demo_totals(demo):
    counts = {k: len(kind(demo, k)) for k in ("Node", "ResourceSlice", "Pod", "ResourceClaim", "Event")}
    # 18 nodes and 42 pods: the two a100-mig-single nodes and notebook-mig were added for the MIG single strategy.
    assert counts == {"Node": 18, "ResourceSlice": 7, "Pod": 42, "ResourceClaim": 14, "Event": 5}


def test_stale_generation_pool(demo):
    slices = slices_of(demo, "h100-dra-upd-000")
    by_gen = defaultdict(list)
    for s in slices:
        by_gen[s["spec"]["pool"]["generation"]].append(s)
    assert sorted(by_gen) == [1, 2]
    for _gen, group in by_gen.items():
        assert len(group) == group[0]["spec"]["pool"]["resourceSliceCount"] == 1
    old = {d["name"]: d for d in by_gen[1][0]["spec"]["devices"]}
    new = {d["name"]: d for d in by_gen[2][0]["spec"]["devices"]}
    assert set(old) == set(new) == {"gpu-0", "gpu-1", "gpu-2", "gpu-3"}
    assert {d["attributes"]["driverVersion"]["version"] for d in old.values()} == {"535.183.6"}
    assert {d["attributes"]["driverVersion"]["version"] for d in new.values()} == {"570.124.6"}
    assert old["gpu-0"]["attributes"]["uuid"] == new["gpu-0"]["attributes"]["uuid"]
    assert by_gen[1][0]["metadata"]["creationTimestamp"] < by_gen[2][0]["metadata"]["creationTimestamp"]
    assert by_gen[1][0]["metadata"]["name"] != by_gen[2][0]["metadata"]["name"]


def test_device_taint_and_claim_on_updated_pool(demo):
    new = next(s for s in slices_of(demo, "h100-dra-upd-000") if s["spec"]["pool"]["generation"] == 2)
    devs = {d["name"]: d for d in new["spec"]["devices"]}
    assert devs["gpu-3"]["taints"] == [
        {
            "key": "example.com/unhealthy",
            "value": "ecc",
            "effect": "NoSchedule",
            "timeAdded": devs["gpu-3"]["taints"][0]["timeAdded"],
        }
    ]
    assert all("taints" not in d for n, d in devs.items() if n != "gpu-3")
    claims = [
        c
        for c in kind(demo, "ResourceClaim")
        for r in c["status"].get("allocation", {}).get("devices", {}).get("results", [])
        if r["pool"] == "h100-dra-upd-000"
    ]
    assert len(claims) == 1
    results = claims[0]["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0"]
    pod = next(p for p in kind(demo, "Pod") if p["spec"].get("nodeName") == "h100-dra-upd-000")
    assert pod["status"]["phase"] == "Running"
    assert claims[0]["status"]["reservedFor"][0]["uid"] == pod["metadata"]["uid"]


def test_incomplete_pool(demo):
    slices = slices_of(demo, "h100-dra-partial-000")
    assert len(slices) == 1
    spec = slices[0]["spec"]
    assert spec["pool"] == {"name": "h100-dra-partial-000", "generation": 1, "resourceSliceCount": 2}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    assert not any(
        r["pool"] == "h100-dra-partial-000"
        for c in kind(demo, "ResourceClaim")
        for r in c["status"].get("allocation", {}).get("devices", {}).get("results", [])
    )


def test_allocations_use_only_current_published_untainted_devices(demo):
    usable = usable_devices(demo)
    for c in kind(demo, "ResourceClaim"):
        for r in c["status"].get("allocation", {}).get("devices", {}).get("results", []):
            dev = usable[(r["pool"], r["device"])]
            if not r.get("adminAccess"):
                assert not any(t["effect"] != "None" for t in dev.get("taints", [])), r


def _pool(**dra):
    return {
        "nodePools": [
            {
                "name": "p",
                "count": 1,
                "mode": "dra",
                "gpu": {"model": "NVIDIA-H100-80GB-HBM3", "perNode": 4},
                "dra": dra,
            }
        ],
        "deviceClasses": [{"name": "gpu.nvidia.com", "match": {"attributes": {"type": "gpu"}}}],
        "namespaces": [{"name": "t"}],
    }


def test_tainted_and_unpublished_devices_are_never_allocated():
    spec = _pool(
        slicesPerNode=2, publishedSlices=1, deviceTaints=[{"device": "gpu-0", "key": "k", "effect": "NoExecute"}]
    )
    spec["claimTemplates"] = [{"name": "one", "namespace": "t", "requests": [{"deviceClassName": "gpu.nvidia.com"}]}]
    spec["workloads"] = [{"name": "w", "namespace": "t", "pool": "p", "count": 1, "claimTemplate": "one"}]
    objs = load_scenario(spec)
    res = kind(objs, "ResourceClaim")[0]["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in res] == ["gpu-1"]
    spec["workloads"][0]["count"] = 2  # gpu-0 tainted, gpu-2/3 unpublished: no room for a second pod
    with pytest.raises(ScenarioError, match="no node"):
        load_scenario(spec)


def test_all_mode_fails_on_incomplete_pool():
    spec = _pool(slicesPerNode=2, publishedSlices=1)
    spec["claims"] = [
        {
            "name": "all",
            "namespace": "t",
            "allocated": True,
            "requests": [{"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}],
        }
    ]
    with pytest.raises(ScenarioError, match="no node has free matching devices"):
        load_scenario(spec)
    spec["nodePools"][0]["dra"] = {"slicesPerNode": 2}
    assert load_scenario(spec)


def test_effect_none_taint_is_published_and_device_still_allocatable():
    spec = _pool(deviceTaints=[{"device": "gpu-0", "key": "k", "effect": "None"}])
    spec["claims"] = [
        {"name": "c", "namespace": "t", "allocated": True, "requests": [{"deviceClassName": "gpu.nvidia.com"}]}
    ]
    objs = load_scenario(spec)
    assert kind(objs, "ResourceSlice")[0]["spec"]["devices"][0]["taints"][0]["effect"] == "None"
    assert kind(objs, "ResourceClaim")[0]["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


@pytest.mark.parametrize(
    ("dra", "fragment"),
    [
        ({"publishedSlices": 3, "slicesPerNode": 2}, "exceeds the pool's 2 slices"),
        ({"publishedSlices": 0}, "must be >= 1"),
        ({"staleGeneration": "yes"}, "staleGeneration"),
        ({"deviceTaints": [{"device": "gpu-9", "key": "k", "effect": "NoSchedule"}]}, "'gpu-9' does not exist"),
        ({"deviceTaints": [{"device": "gpu-0", "key": "k", "effect": "PreferNoSchedule"}]}, "not one of None"),
        ({"deviceTaint": []}, "unknown key"),
    ],
)
def test_bad_dra_options(dra, fragment):
    with pytest.raises(ScenarioError, match=fragment):
        load_scenario(_pool(**dra))


# ------------------------------------------------------------------ objects: pass-through
RAW_CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "raw", "namespace": "t"},
    "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    "status": {"futureField": {"kept": True}},
}


def test_objects_pass_through_in_kind_order_with_defaults():
    spec = _pool()
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "raw-node", "uid": "fixed"}, "status": {}}
    extra = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    spec["objects"] = [extra, RAW_CLAIM, node]
    objs = load_scenario(spec, seed=1)
    order = [o["kind"] for o in objs]
    assert order.index("Node") < order.index("ResourceSlice")  # raw Node follows generated Nodes
    assert [o["metadata"]["name"] for o in kind(objs, "Node")] == ["p-000", "raw-node"]
    assert objs[-1]["kind"] == "Widget"
    raw = next(o for o in objs if o["metadata"]["name"] == "raw")
    assert raw["status"] == {"futureField": {"kept": True}}
    assert raw["metadata"]["uid"]
    assert raw["metadata"]["creationTimestamp"].endswith("Z")
    assert next(o for o in objs if o["metadata"]["name"] == "raw-node")["metadata"]["uid"] == "fixed"
    assert load_scenario(spec, seed=1) == objs
    assert load_scenario(spec, seed=2) != objs
    raw["status"]["futureField"]["kept"] = False
    assert RAW_CLAIM["status"]["futureField"]["kept"] is True  # deep copy, input untouched


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ("text", "expected a Kubernetes object"),
        ({"kind": "Pod", "metadata": {"name": "a"}}, "missing apiVersion"),
        ({"apiVersion": "v1", "metadata": {"name": "a"}}, "missing kind"),
        ({"apiVersion": "v1", "kind": "Pod", "metadata": {}}, "missing metadata.name"),
        ({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}, "duplicate Namespace default"),
    ],
)
def test_bad_objects(obj, fragment):
    with pytest.raises(ScenarioError, match=fragment):
        load_scenario({"objects": [obj]})
