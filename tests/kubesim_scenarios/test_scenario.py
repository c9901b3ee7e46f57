"""Tests for kubesim.scenario: determinism, exact totals, packing, DRA allocations, scheduler messages, errors."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

import orjson
import pytest
import yaml

from kubesim.scenario import ScenarioError, load_scenario, parse_quantity

KIND_ORDER = [
    "Namespace",
    "DeviceClass",
    "Node",
    "ResourceSlice",
    "ResourceQuota",
    "LimitRange",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "Pod",
    "Event",
    # Kueue (the demo installs it): its configuration before the Workloads that name it
    "Topology",
    "ResourceFlavor",
    "Cohort",
    "ClusterQueue",
    "LocalQueue",
    "Workload",
]
NAMESPACED = {"Pod", "ResourceQuota", "LimitRange", "Event", "ResourceClaim", "ResourceClaimTemplate", "LocalQueue",
              "Workload"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


@pytest.fixture(scope="module")
def demo() -> list[dict]:
    return load_scenario("demo")


@pytest.fixture(scope="module")
def large() -> list[dict]:
    return load_scenario("large")


@pytest.fixture(params=["demo", pytest.param("large", marks=pytest.mark.slow)], scope="module")  # large: ~7 s to build
def scenario(request) -> list[dict]:
    return request.getfixturevalue(request.param)  # only the one asked for is built


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def terminal(pod: dict) -> bool:
    return pod["status"]["phase"] in ("Succeeded", "Failed")


# ------------------------------------------------------------------ structure and determinism
def test_same_seed_gives_identical_objects(demo):
    assert load_scenario("demo", seed=0) == demo
    assert orjson.dumps(load_scenario("demo", seed=0)) == orjson.dumps(demo)


def test_other_seed_changes_uids_but_not_shape(demo):
    other = load_scenario("demo", seed=7)
    assert [o["kind"] for o in other] == [o["kind"] for o in demo]
    assert {o["metadata"]["uid"] for o in other}.isdisjoint({o["metadata"]["uid"] for o in demo})


def test_uids_unique_and_uuid4(scenario):
    uids = [o["metadata"]["uid"] for o in scenario]
    assert len(uids) == len(set(uids))
    assert all(UUID4.match(u) for u in uids)


def test_kinds_come_in_creation_order(scenario):
    ranks = [KIND_ORDER.index(o["kind"]) for o in scenario]
    assert ranks == sorted(ranks)


@pytest.mark.slow  # builds the large scenario (9 s)
def test_objects_are_complete_and_json_round_trip(scenario):
    for o in scenario:
        assert o["apiVersion"] in ("v1", "resource.k8s.io/v1", "kueue.x-k8s.io/v1beta2")
        meta = o["metadata"]
        assert "resourceVersion" not in meta
        assert RFC3339.match(meta["creationTimestamp"])
        assert ("namespace" in meta) == (o["kind"] in NAMESPACED)
    assert orjson.loads(orjson.dumps(scenario)) == scenario


def test_objects_share_no_nested_containers(demo):
    seen: set[int] = set()

    def walk(value):
        if isinstance(value, dict | list):
            assert id(value) not in seen, "two objects share a nested dict/list"
            seen.add(id(value))
            for item in value.values() if isinstance(value, dict) else value:
                walk(item)

    for obj in load_scenario("demo"):
        walk(obj)


def test_input_dict_is_not_mutated_or_aliased():
    spec = {
        "deviceClasses": [
            {"name": "gpu.nvidia.com", "config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {}}}]}
        ],
    }
    before = orjson.dumps(spec)
    objs = load_scenario(spec)
    assert orjson.dumps(spec) == before
    objs[-1]["spec"]["config"][0]["opaque"]["driver"] = "changed"
    assert spec["deviceClasses"][0]["config"][0]["opaque"]["driver"] == "gpu.nvidia.com"


def test_names_and_labels_are_valid(scenario):
    names = Counter()
    for o in scenario:
        meta = o["metadata"]
        assert DNS_SUBDOMAIN.match(meta["name"]), meta["name"]
        if o["kind"] in ("Namespace", "Pod"):
            assert DNS_LABEL.match(meta["name"]), meta["name"]
        names[(o["kind"], meta.get("namespace", ""), meta["name"])] += 1
        for key, value in (meta.get("labels") or {}).items():
            assert len(value) <= 63, (key, value)
            assert LABEL_VALUE.match(value), (key, value)
            assert len(key.rpartition("/")[2]) <= 63
        if o["kind"] == "ResourceSlice":
            for dev in o["spec"].get("devices", []):
                assert DNS_LABEL.match(dev["name"]), dev["name"]
                assert len(dev.get("attributes", {})) + len(dev.get("capacity", {})) <= 32
    assert max(names.values()) == 1


def test_empty_scenario_has_only_system_namespaces():
    objs = load_scenario("empty")
    assert {o["kind"] for o in objs} == {"Namespace"}
    assert {o["metadata"]["name"] for o in objs} == {"default", "kube-system", "kube-public", "kube-node-lease"}


# ------------------------------------------------------------------ large totals
def test_large_exact_totals(large):
    kinds = Counter(o["kind"] for o in large)
    assert kinds["Node"] == 5000
    assert kinds["ResourceSlice"] == 5000
    assert kinds["Pod"] == 20000
    assert kinds["ResourceClaim"] == 10000
    assert 40 <= kinds["Namespace"] <= 60
    assert 200 <= kinds["Event"] <= 600
    physical = sum(int(n["metadata"]["labels"].get("nvidia.com/gpu.count", 0)) for n in by_kind(large, "Node"))
    assert physical == 40000
    dra_gpus = sum(
        1
        for s in by_kind(large, "ResourceSlice")
        for d in s["spec"].get("devices", [])
        if d["attributes"]["type"]["string"] == "gpu"
    )
    assert dra_gpus == 2500 * 8
    allocated = [c for c in by_kind(large, "ResourceClaim") if "allocation" in c["status"]]
    assert len(allocated) == 9800
    assert all(c["status"].get("reservedFor") for c in allocated)


def test_large_modes_are_mixed(large):
    modes = Counter()
    for n in by_kind(large, "Node"):
        labels, cap = n["metadata"]["labels"], n["status"]["capacity"]
        if any(k.startswith("nvidia.com/mig-") for k in cap):
            modes["mig"] += 1
        elif labels.get("nvidia.com/gpu.deploy.device-plugin") == "false":
            modes["dra"] += 1
        else:
            modes[labels["nvidia.com/gpu.sharing-strategy"]] += 1
    assert modes == {"none": 1250, "mig": 500, "time-slicing": 500, "mps": 250, "dra": 2500}


INCOMPLETE_DEMO_POOLS = {"h100-dra-partial-000"}
STALE_DEMO_POOLS = {"h100-dra-upd-000"}


def test_slice_pools_are_complete(scenario):
    pools = defaultdict(lambda: defaultdict(list))
    for s in by_kind(scenario, "ResourceSlice"):
        spec = s["spec"]
        assert spec["nodeName"] == spec["pool"]["name"]
        assert ("devices" in spec) != ("sharedCounters" in spec)
        limited = "sharedCounters" in spec or any("consumesCounters" in d or "taints" in d for d in spec["devices"])
        assert len(spec.get("devices", [])) <= (64 if limited else 128)
        pools[(spec["driver"], spec["pool"]["name"])][spec["pool"]["generation"]].append(spec["pool"])
    assert pools
    incomplete, stale = set(), set()
    for (_, pool), generations in pools.items():
        for _gen, entries in generations.items():
            assert {e["resourceSliceCount"] for e in entries} == {entries[0]["resourceSliceCount"]}
            if len(entries) != entries[0]["resourceSliceCount"]:
                incomplete.add(pool)
        if set(generations) != {1}:
            assert set(generations) == {1, 2}
            stale.add(pool)
    if len(by_kind(scenario, "Node")) == 18:  # demo
        assert incomplete == INCOMPLETE_DEMO_POOLS
        assert stale == STALE_DEMO_POOLS
    else:
        assert not incomplete
        assert not stale


# ------------------------------------------------------------------ packing
def test_bin_packing_never_exceeds_allocatable(scenario):
    nodes = {n["metadata"]["name"]: n for n in by_kind(scenario, "Node")}
    used: dict[str, Counter] = defaultdict(Counter)
    for pod in by_kind(scenario, "Pod"):
        node = pod["spec"].get("nodeName")
        if not node or terminal(pod):
            continue
        assert node in nodes
        used[node]["pods"] += 1
        for c in pod["spec"]["containers"]:
            for r, q in c["resources"]["requests"].items():
                used[node][r] += parse_quantity(q)
            for r, q in c["resources"]["limits"].items():
                if "/" in r:
                    assert c["resources"]["requests"][r] == q
    assert used
    for node, usage in used.items():
        alloc = nodes[node]["status"]["allocatable"]
        for r, amount in usage.items():
            assert amount <= parse_quantity(alloc.get(r, 0)), (node, r, amount, alloc.get(r))


def test_bound_pods_respect_taints_and_selectors(demo):
    nodes = {n["metadata"]["name"]: n for n in by_kind(demo, "Node")}
    for pod in by_kind(demo, "Pod"):
        node = nodes.get(pod["spec"].get("nodeName"))
        if not node:
            continue
        for k, v in pod["spec"].get("nodeSelector", {}).items():
            assert node["metadata"]["labels"].get(k) == v
        for taint in node["spec"].get("taints", []):
            assert any(t.get("key") == taint["key"] for t in pod["spec"]["tolerations"]), (pod["metadata"]["name"],)


# ------------------------------------------------------------------ DRA claims
def _devices(objs):
    """Devices and counter sets that a consumer may use: only the newest generation of each pool."""
    devices = {}
    counters = {}
    newest: dict[str, int] = {}
    for s in by_kind(objs, "ResourceSlice"):
        pool = s["spec"]["pool"]
        newest[pool["name"]] = max(newest.get(pool["name"], 0), pool["generation"])
    for s in by_kind(objs, "ResourceSlice"):
        pool = s["spec"]["pool"]["name"]
        if s["spec"]["pool"]["generation"] != newest[pool]:
            continue
        for d in s["spec"].get("devices", []):
            devices[(s["spec"]["driver"], pool, d["name"])] = d
        for cs in s["spec"].get("sharedCounters", []):
            counters[(pool, cs["name"])] = {k: int(v["value"]) for k, v in cs["counters"].items()}
    return devices, counters


def test_claim_allocations_reference_real_devices_once(scenario):
    devices, counters = _devices(scenario)
    seen = set()
    consumed: dict[tuple, Counter] = defaultdict(Counter)
    for claim in by_kind(scenario, "ResourceClaim"):
        alloc = claim["status"].get("allocation")
        if not alloc:
            continue
        node = alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        for res in alloc["devices"]["results"]:
            key = (res["driver"], res["pool"], res["device"])
            assert key in devices, key
            assert res["pool"] == node
            if res.get("adminAccess"):
                continue
            assert key not in seen, f"device {key} allocated twice"
            seen.add(key)
            for cc in devices[key].get("consumesCounters", []):
                for name, value in cc["counters"].items():
                    consumed[(res["pool"], cc["counterSet"])][name] += int(value["value"])
    assert seen
    for key, usage in consumed.items():
        for name, amount in usage.items():
            assert amount <= counters[key][name], (key, name)


def test_reserved_for_matches_pods(scenario):
    pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in by_kind(scenario, "Pod")}
    for claim in by_kind(scenario, "ResourceClaim"):
        ns, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        alloc = claim["status"].get("allocation")
        for ref in claim["status"].get("reservedFor", []):
            assert alloc is not None
            pod = pods[(ns, ref["name"])]
            assert ref["resource"] == "pods"
            assert pod["metadata"]["uid"] == ref["uid"]
            node = alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
            assert pod["spec"]["nodeName"] == node
            names = {r.get("resourceClaimName") for r in pod["spec"]["resourceClaims"]}
            names |= {s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses", [])}
            assert name in names
        owners = claim["metadata"].get("ownerReferences")
        if owners:
            assert pods[(ns, owners[0]["name"])]["metadata"]["uid"] == owners[0]["uid"]


def test_admin_access_claim_only_in_labelled_namespace(demo):
    ns_labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in by_kind(demo, "Namespace")}
    admin = [
        c
        for c in by_kind(demo, "ResourceClaim")
        if any(r["exactly"].get("adminAccess") for r in c["spec"]["devices"]["requests"])
    ]
    assert admin
    for c in admin:
        assert ns_labels[c["metadata"]["namespace"]]["resource.kubernetes.io/admin-access"] == "true"


def test_partitionable_mig_devices_in_demo(demo):
    slices = by_kind(demo, "ResourceSlice")
    assert any("sharedCounters" in s["spec"] for s in slices)
    mig = [d for s in slices for d in s["spec"].get("devices", []) if d["attributes"]["type"]["string"] == "mig"]
    assert mig
    assert all(d["consumesCounters"] for d in mig)
    gpu = next(d for s in slices for d in s["spec"].get("devices", []) if d["attributes"]["type"]["string"] == "gpu")
    for attr in (
        "uuid",
        "productName",
        "brand",
        "architecture",
        "cudaComputeCapability",
        "driverVersion",
        "cudaDriverVersion",
        "resource.kubernetes.io/pciBusID",
        "resource.kubernetes.io/pcieRoot",
    ):
        assert attr in gpu["attributes"]
    assert "memory" in gpu["capacity"]


# ------------------------------------------------------------------ pending pods and events
def test_pending_pods_have_failed_scheduling_events(scenario):
    events = {e["involvedObject"]["uid"]: e for e in by_kind(scenario, "Event") if e["reason"] == "FailedScheduling"}
    pending = [
        p for p in by_kind(scenario, "Pod") if p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName")
    ]
    assert pending
    for pod in pending:
        cond = pod["status"]["conditions"][0]
        assert cond["type"] == "PodScheduled"
        assert cond["status"] == "False"
        assert cond["reason"] == "Unschedulable"
        ev = events[pod["metadata"]["uid"]]
        assert ev["type"] == "Warning"
        assert ev["message"] == cond["message"]
        assert ev["involvedObject"]["name"] == pod["metadata"]["name"]
        assert ev["metadata"]["namespace"] == pod["metadata"]["namespace"]
        assert ev["source"]["component"] == "default-scheduler" == ev["reportingComponent"]
        assert ev["count"] >= 1
        assert ev["firstTimestamp"] <= ev["lastTimestamp"]
        m = re.match(
            r"^0/(\d+) nodes are available: (.*?)\. .*preemption: 0/(\d+) nodes are available: (.*)\.$", cond["message"]
        )
        assert m, cond["message"]
        total = int(m.group(1))
        assert total == len(by_kind(scenario, "Node")) == int(m.group(3))
        parts = m.group(2).split(", ")
        assert parts == sorted(parts)
        assert sum(int(p.split(" ", 1)[0]) for p in m.group(4).split(", ")) == total
    assert len(events) == len(pending)


def test_demo_scheduler_message_matches_kube_scheduler_format(demo):
    pod = next(p for p in by_kind(demo, "Pod") if p["metadata"]["name"].startswith("llm-eval-xl"))
    assert pod["status"]["conditions"][0]["message"] == (
        # The two a100-mig-single nodes (added with the MIG single strategy) do not match the h100 pool selector.
        "0/18 nodes are available: 1 node(s) had untolerated taint {dedicated: training}, 15 node(s) didn't match "
        "Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: 0/18 "
        "nodes are available: 16 Preemption is not helpful for scheduling, 2 No preemption victims found for "
        "incoming pod."
    )


def test_pod_states(demo):
    phases = Counter(p["status"]["phase"] for p in by_kind(demo, "Pod"))
    assert phases["Running"]
    assert phases["Pending"]
    assert phases["Failed"]
    assert phases["Succeeded"]
    failed = next(p for p in by_kind(demo, "Pod") if p["status"]["phase"] == "Failed")
    term = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "OOMKilled"
    assert term["exitCode"] == 137
    assert failed["spec"]["restartPolicy"] == "Never"
    creating = [p for p in by_kind(demo, "Pod") if p["status"]["phase"] == "Pending" and p["spec"].get("nodeName")]
    assert creating[0]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    running = next(p for p in by_kind(demo, "Pod") if p["status"]["phase"] == "Running")
    assert running["status"]["podIP"]
    assert running["status"]["hostIP"]


# ------------------------------------------------------------------ demo coverage
def test_demo_has_every_pool_type(demo):
    nodes = by_kind(demo, "Node")
    assert len(nodes) == 18
    found = set()
    for n in nodes:
        labels, cap, alloc = n["metadata"]["labels"], n["status"]["capacity"], n["status"]["allocatable"]
        strategy = labels.get("nvidia.com/gpu.sharing-strategy")
        if labels.get("nvidia.com/mig.strategy") == "single":
            # GFD's single strategy: nvidia.com/gpu counts MIG devices, the product names the profile.
            assert labels["nvidia.com/gpu.product"].endswith("-MIG-1g.10gb")
            assert int(cap["nvidia.com/gpu"]) == int(labels["nvidia.com/gpu.count"]) == 14
            assert labels["nvidia.com/gpu.memory"] == "9984"
            found.add("mig-single")
            if labels["nvidia.com/mig.config.state"] == "pending":
                found.add("mig-reconfiguring")
        elif "nvidia.com/gpu" in cap and strategy == "none":
            found.add("whole")
        if labels.get("nvidia.com/mig.strategy") == "mixed" and any(k.startswith("nvidia.com/mig-") for k in cap):
            assert labels["nvidia.com/mig.config.state"] == "success"
            found.add("mig")
        if strategy == "time-slicing":
            assert labels["nvidia.com/gpu.product"].endswith("-SHARED")
            assert int(cap["nvidia.com/gpu"]) == int(labels["nvidia.com/gpu.count"]) * int(
                labels["nvidia.com/gpu.replicas"]
            )
            found.add("time-slicing")
        if strategy == "mps":
            found.add("mps")
        if labels.get("nvidia.com/gpu.deploy.device-plugin") == "false":
            assert not any(k.startswith("nvidia.com/") for k in cap)
            found.add("dra")
        if "nvidia.com/gpu.present" not in labels:
            found.add("cpu")
        if any(t["key"] == "dedicated" and t["effect"] == "NoSchedule" for t in n["spec"].get("taints", [])):
            found.add("tainted")
        if cap.get("nvidia.com/gpu") and int(alloc["nvidia.com/gpu"]) < int(cap["nvidia.com/gpu"]):
            found.add("unhealthy")
        if (
            labels.get("nvidia.com/gpu.present") == "true"
            and labels.get("nvidia.com/gpu.deploy.device-plugin") != "false"
            and not any(k.startswith("nvidia.com/") for k in cap)
        ):
            found.add("missing-device-plugin")
        assert labels["kubernetes.io/hostname"] == n["metadata"]["name"]
        assert {c["type"]: c["status"] for c in n["status"]["conditions"]}["Ready"] == "True"
        assert n["status"]["nodeInfo"]["kubeletVersion"] == "v1.35.0"
    assert found == {
        "whole",
        "mig",
        "mig-single",
        "mig-reconfiguring",
        "time-slicing",
        "mps",
        "dra",
        "cpu",
        "tainted",
        "unhealthy",
        "missing-device-plugin",
    }
    models = {
        n["metadata"]["labels"].get("nvidia.com/gpu.product")
        for n in nodes
        if n["metadata"]["labels"].get("nvidia.com/gpu.sharing-strategy") == "none"
        and "nvidia.com/gpu" in n["status"]["capacity"]
        and n["metadata"]["labels"].get("nvidia.com/mig.strategy") != "single"
    }
    assert len(models) >= 2
    assert (
        4
        <= len(
            [
                n
                for n in by_kind(demo, "Namespace")
                if n["metadata"]["name"] not in ("default", "kube-system", "kube-public", "kube-node-lease")
            ]
        )
        <= 5
    )
    claims = by_kind(demo, "ResourceClaim")
    assert any("allocation" in c["status"] for c in claims)
    assert any(not c["status"] for c in claims)


def test_quota_usage_is_computed(demo):
    quotas = {q["metadata"]["namespace"]: q for q in by_kind(demo, "ResourceQuota")}
    pods = [p for p in by_kind(demo, "Pod") if p["metadata"]["namespace"] == "ml-inference" and not terminal(p)]
    used = quotas["ml-inference"]["status"]["used"]
    assert used["pods"] == str(len(pods))
    mig = sum(
        int(c["resources"]["requests"].get("nvidia.com/mig-1g.10gb", 0)) for p in pods for c in p["spec"]["containers"]
    )
    assert used["requests.nvidia.com/mig-1g.10gb"] == str(mig)
    claims = [c for c in by_kind(demo, "ResourceClaim") if c["metadata"]["namespace"] == "ml-inference"]
    assert used["count/resourceclaims.resource.k8s.io"] == str(len(claims))
    assert quotas["ml-inference"]["status"]["hard"] == quotas["ml-inference"]["spec"]["hard"]


def test_dra_device_classes_in_demo(demo):
    classes = {c["metadata"]["name"]: c for c in by_kind(demo, "DeviceClass")}
    assert {"gpu.nvidia.com", "mig.nvidia.com", "mig-1g-10gb.gpu.nvidia.com"} <= set(classes)
    expr = classes["gpu.nvidia.com"]["spec"]["selectors"][0]["cel"]["expression"]
    assert expr == "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    assert all("extendedResourceName" not in c["spec"] for c in classes.values())


# ------------------------------------------------------------------ custom files and errors
CUSTOM = """
name: tiny
nodePools:
  - {name: gpu, count: 2, cpu: 16, memory: 64Gi, gpu: {model: NVIDIA-L4, perNode: 2}, mode: whole}
namespaces:
  - {name: team-a}
workloads:
  - {name: web, namespace: team-a, count: 4, pool: gpu, resources: {nvidia.com/gpu: 1}}
  - {name: big, namespace: team-a, count: 1, pool: gpu, state: pending, resources: {nvidia.com/gpu: 1}}
"""


def test_custom_yaml_file(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(CUSTOM.replace("count: 1, pool: gpu, state: pending", "count: 1, state: pending, cpu: 64"))
    objs = load_scenario(str(path))
    assert len(by_kind(objs, "Node")) == 2
    pods = by_kind(objs, "Pod")
    assert Counter(p["spec"].get("nodeName") for p in pods) == {"gpu-000": 2, "gpu-001": 2, None: 1}
    assert load_scenario(path) == objs


def test_dict_source_is_accepted():
    objs = load_scenario({"nodePools": [{"name": "c", "count": 3, "mode": "cpu"}]})
    assert [n["metadata"]["name"] for n in by_kind(objs, "Node")] == ["c-000", "c-001", "c-002"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("nodePools: [\n  - name: x\n count: 1", "invalid YAML"),
        ("- just\n- a list", "must be a YAML mapping"),
        ("nodePool: []", "unknown key(s) nodePool"),
        ("nodePools: [{name: Bad_Name, count: 1}]", "not a valid DNS label"),
        ("nodePools: [{name: x, count: 1, mode: quantum}]", "mode"),
        ("nodePools: [{name: x, count: 1, cpu: lots}]", "not a valid Kubernetes quantity"),
        ("nodePools: [{name: x, count: 1, mode: mig, gpu: {model: Tesla-T4, perNode: 1}}]", "not MIG capable"),
        ("workloads: [{name: w, namespace: nowhere}]", "not declared"),
    ],
)
def test_bad_scenarios_raise_scenario_error(tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=re.escape(fragment)):
        load_scenario(str(path))


def test_pending_pod_that_fits_is_rejected(tmp_path):
    path = tmp_path / "fits.yaml"
    path.write_text(CUSTOM.replace("count: 4", "count: 3"))
    with pytest.raises(ScenarioError, match="declared pending but it fits"):
        load_scenario(str(path))


def test_overfull_pool_is_rejected():
    spec = {
        "nodePools": [{"name": "g", "count": 1, "gpu": {"model": "NVIDIA-L4", "perNode": 1}}],
        "namespaces": [{"name": "a"}],
        "workloads": [{"name": "w", "namespace": "a", "count": 2, "pool": "g", "resources": {"nvidia.com/gpu": 1}}],
    }
    with pytest.raises(ScenarioError, match="has room"):
        load_scenario(spec)


def test_admin_access_needs_namespace_label():
    spec = {
        "deviceClasses": [{"name": "gpu.nvidia.com", "match": {"attributes": {"type": "gpu"}}}],
        "namespaces": [{"name": "a"}],
        "claims": [
            {"name": "c", "namespace": "a", "requests": [{"deviceClassName": "gpu.nvidia.com", "adminAccess": True}]}
        ],
    }
    with pytest.raises(ScenarioError, match="admin-access"):
        load_scenario(spec)


def test_unknown_scenario_and_bad_seed():
    with pytest.raises(ScenarioError, match="unknown scenario"):
        load_scenario("no-such-scenario")
    with pytest.raises(ScenarioError, match="seed"):
        load_scenario("empty", seed="1")


def test_fractional_gpu_is_rejected():
    spec = {
        "nodePools": [{"name": "g", "count": 1, "gpu": {"model": "NVIDIA-L4", "perNode": 1}}],
        "namespaces": [{"name": "a"}],
        "workloads": [{"name": "w", "namespace": "a", "pool": "g", "resources": {"nvidia.com/gpu": 0.5}}],
    }
    with pytest.raises(ScenarioError, match="positive integers"):
        load_scenario(spec)


def test_documented_example_loads():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "kubesim-scenarios.md").read_text()
    example = doc.split("## Example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    objs = load_scenario(yaml.safe_load(example))
    kinds = Counter(o["kind"] for o in objs)
    assert kinds["Node"] == 3
    assert kinds["Pod"] == 8
    assert kinds["ResourceSlice"] == 2
    assert kinds["Event"] == 1
    assert sum(1 for o in objs if o["kind"] == "ResourceClaim" and o["status"].get("allocation")) == 3


def _pool(**extra) -> dict:
    return {"name": "gb", "count": 4, "cpu": 96, "memory": "1Ti",
            "gpu": {"model": "NVIDIA-H100-80GB-HBM3", "perNode": 8, "driverVersion": "570.124.06",
                    "cudaDriver": "12.8"}, **extra}


def test_topology_nvlink_cliques_and_shared_pcie_roots():
    pool = _pool(mode="dra", cliqueSize=3)
    pool["gpu"]["pcieRoots"] = 2
    objs = load_scenario({"name": "topo", "nodePools": [pool]})
    cliques = [n["metadata"]["labels"]["nvidia.com/gpu.clique"] for n in by_kind(objs, "Node")]
    assert len(set(cliques[:3])) == 1
    assert cliques[3] != cliques[0]
    assert re.fullmatch(r"[0-9a-f-]{36}\.1", cliques[3])
    roots = [d["attributes"]["resource.kubernetes.io/pcieRoot"]["string"]
             for s in by_kind(objs, "ResourceSlice") if s["spec"].get("nodeName") == "gb-000"
             for d in s["spec"]["devices"]]
    assert Counter(roots) == {"pci0000:15": 4, "pci0000:97": 4}
    # by default one root per GPU, and no clique label
    plain = load_scenario({"name": "plain", "nodePools": [_pool(mode="dra")]})
    assert len({d["attributes"]["resource.kubernetes.io/pcieRoot"]["string"]
                for s in by_kind(plain, "ResourceSlice") if s["spec"].get("nodeName") == "gb-000"
                for d in s["spec"]["devices"]}) == 8
    assert "nvidia.com/gpu.clique" not in by_kind(plain, "Node")[0]["metadata"]["labels"]


@pytest.mark.parametrize(("pool", "message"), [
    (_pool(gpu={"model": "NVIDIA-L4", "perNode": 2, "pcieRoots": 3}), "pcieRoots: at most perNode"),
    (_pool(gpu={"model": "NVIDIA-L4", "perNode": 2, "pcieRoots": 0}), "pcieRoots"),
    ({"name": "cpu", "count": 2, "cliqueSize": 2}, "cliqueSize: only for GPU pools"),
    (_pool(cliqueSize="x"), "cliqueSize"),
])
def test_bad_topology_settings_are_refused(pool, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario({"name": "bad", "nodePools": [pool]})


def test_scheduled_pods_are_bound_where_they_fit_and_pending_with_the_schedulers_message_otherwise():
    objs = load_scenario({"name": "sched", "namespaces": [{"name": "ml"}], "nodePools": [_pool(count=2)],
                          "workloads": [{"name": "ddp", "namespace": "ml", "pool": "gb", "count": 3,
                                         "controller": "Job", "state": "scheduled", "cpu": 8, "memory": "64Gi",
                                         "resources": {"nvidia.com/gpu": 8}}]})
    pods = [p for p in by_kind(objs, "Pod") if p["metadata"]["name"].startswith("ddp-")]
    assert [bool(p["spec"].get("nodeName")) for p in pods] == [True, True, False]
    assert [p["status"]["phase"] for p in pods] == ["Running", "Running", "Pending"]
    condition = next(c for c in pods[2]["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["message"].startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
