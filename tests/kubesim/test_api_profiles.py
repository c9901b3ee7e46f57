"""API profiles: legacy clusters (no DRA, DRA v1beta1 or v1beta2 only, no events.k8s.io) served over HTTP and to kubectl."""

from __future__ import annotations

import json
import subprocess

import pytest

from kubesim import Simulator
from kubesim.apis import PROFILES, dra_from_v1, dra_to_v1
from kubesim.scenario import ScenarioError, load_scenario
from tests.kubesim.conftest import request
from tests.tools import require_tool

LEGACY = {
    "legacy-no-dra": ("v1.31.4", {"admissionregistration.k8s.io": ["v1"], "events.k8s.io": ["v1"]}),
    "legacy-dra-v1beta1": (
        "v1.32.5",
        {"resource.k8s.io": ["v1beta1"], "admissionregistration.k8s.io": ["v1"], "events.k8s.io": ["v1"]},
    ),
    "legacy-dra-v1beta2": (
        "v1.33.2",
        {"resource.k8s.io": ["v1beta2"], "admissionregistration.k8s.io": ["v1"], "events.k8s.io": ["v1"]},
    ),
    "legacy-no-events": ("v1.35.0", {"resource.k8s.io": ["v1"], "admissionregistration.k8s.io": ["v1"]}),
}


@pytest.fixture(scope="module", params=sorted(LEGACY))
def legacy(request):
    sim = Simulator(scenario=request.param).start()
    yield request.param, sim
    sim.stop()


def test_discovery_reflects_exactly_what_is_served(legacy):
    name, sim = legacy
    git_version, groups = LEGACY[name]
    version = request(sim, "GET", "/version").json()
    assert version["gitVersion"] == git_version
    assert version["minor"] == git_version.split(".")[1]
    served = {g["name"]: [v["version"] for v in g["versions"]] for g in request(sim, "GET", "/apis").json()["groups"]}
    assert served == groups
    for group, versions in groups.items():
        doc = request(sim, "GET", f"/apis/{group}").json()
        assert doc["preferredVersion"]["version"] == versions[0]
        kinds = {r["name"] for r in request(sim, "GET", f"/apis/{group}/{versions[0]}").json()["resources"]}
        assert kinds
    for group in {"resource.k8s.io", "events.k8s.io", "admissionregistration.k8s.io"} - set(groups):
        assert request(sim, "GET", f"/apis/{group}").status == 404
        assert request(sim, "GET", f"/apis/{group}/v1").status == 404
    # a version the group does not serve is not routed (v1 on a v1beta1-only cluster)
    if "resource.k8s.io" in groups and groups["resource.k8s.io"] != ["v1"]:
        assert request(sim, "GET", "/apis/resource.k8s.io/v1/resourceslices").status == 404
        assert request(sim, "GET", "/apis/resource.k8s.io/v1").status == 404
    paths = request(sim, "GET", "/openapi/v3").json()["paths"]
    assert set(paths) == {"api/v1"} | {f"apis/{g}/{v}" for g, vs in groups.items() for v in vs}


def test_nodes_report_the_profile_version(legacy):
    name, sim = legacy
    nodes = request(sim, "GET", "/api/v1/nodes").json()["items"]
    assert {n["status"]["nodeInfo"]["kubeletVersion"] for n in nodes} == {LEGACY[name][0]}


def test_no_dra_cluster_serves_no_dra_objects():
    sim = Simulator(scenario="demo", api="no-dra").start()
    try:
        assert request(sim, "GET", "/apis/resource.k8s.io/v1/resourceslices").status == 404
        assert sim.store.count("resourceslices") == 0
        assert sim.store.count("resourceclaims") == 0
        assert request(sim, "GET", "/api/v1/pods?limit=1").status == 200
    finally:
        sim.stop()


def test_v1beta1_nests_device_fields_under_basic_and_keeps_requests_flat():
    sim = Simulator(scenario="legacy-dra-v1beta1").start()
    try:
        base = "/apis/resource.k8s.io/v1beta1"
        slices = request(sim, "GET", f"{base}/resourceslices").json()
        assert slices["apiVersion"] == "resource.k8s.io/v1beta1"
        assert slices["kind"] == "ResourceSliceList"
        device = slices["items"][0]["spec"]["devices"][0]
        assert set(device) == {"name", "basic"}
        assert device["basic"]["attributes"]["type"] == {"string": "gpu"}
        assert "memory" in device["basic"]["capacity"]
        claim = request(sim, "GET", f"{base}/namespaces/gpu-admin/resourceclaims/gpu-health-probe").json()
        assert claim["apiVersion"] == "resource.k8s.io/v1beta1"
        req = claim["spec"]["devices"]["requests"][0]
        assert req["deviceClassName"] == "gpu.nvidia.com"
        assert req["adminAccess"] is True
        assert "exactly" not in req
        template = request(sim, "GET", f"{base}/resourceclaimtemplates").json()["items"][0]
        assert "exactly" not in template["spec"]["spec"]["devices"]["requests"][0]
        # a write in the v1beta1 shape is stored in v1 and read back in v1beta1
        body = {
            "apiVersion": "resource.k8s.io/v1beta1",
            "kind": "ResourceClaim",
            "metadata": {"name": "new-claim", "namespace": "ml-research"},
            "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com", "count": 1}]}},
        }
        created = request(sim, "POST", f"{base}/namespaces/ml-research/resourceclaims", body)
        assert created.status == 201, created.body
        assert created.json()["spec"]["devices"]["requests"][0]["deviceClassName"] == "gpu.nvidia.com"
        stored = sim.store.get_stored("resourceclaims", "ml-research", "new-claim").obj
        assert stored["apiVersion"] == "resource.k8s.io/v1"
        assert stored["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    finally:
        sim.stop()


def test_v1beta2_has_the_v1_shape():
    sim = Simulator(scenario="legacy-dra-v1beta2").start()
    try:
        items = request(sim, "GET", "/apis/resource.k8s.io/v1beta2/resourceslices").json()["items"]
        device = next(d for s in items for d in s["spec"].get("devices") or [])
        assert "attributes" in device
        assert "basic" not in device
        claims = request(sim, "GET", "/apis/resource.k8s.io/v1beta2/resourceclaims").json()["items"]
        assert all("exactly" in r for c in claims for r in c["spec"]["devices"]["requests"])
        assert any(s["spec"].get("sharedCounters") for s in items)  # partitionable devices (1.33 alpha)
    finally:
        sim.stop()


def test_events_api_renames_and_absence():
    sim = Simulator(scenario="legacy-no-dra").start()
    try:
        core = request(sim, "GET", "/api/v1/events").json()["items"][0]
        new = request(sim, "GET", "/apis/events.k8s.io/v1/events").json()["items"][0]
        assert new["apiVersion"] == "events.k8s.io/v1"
        assert new["regarding"] == core["involvedObject"]
        assert new["note"] == core["message"]
        assert new["deprecatedCount"] == core["count"]
    finally:
        sim.stop()


def test_conversion_round_trips_upstream_objects():
    for obj in load_scenario("upstream"):
        if obj["apiVersion"] == "resource.k8s.io/v1":
            for version in ("v1beta1", "v1beta2"):
                assert dra_to_v1(dra_from_v1(obj, version)) == obj, (obj["kind"], obj["metadata"]["name"], version)


def test_unknown_profile_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="apiServer"):
        Simulator(scenario={"apiServer": "v1.99", "nodePools": []})
    with pytest.raises(ValueError, match="unknown API profile"):
        Simulator(scenario="empty", api="nope")
    assert set(PROFILES) >= {"current", "no-dra", "dra-v1beta1", "dra-v1beta2", "no-events"}


# ------------------------------------------------------------------------------------------------ kubectl
def _kubectl(sim, tmp_path, *args: str) -> subprocess.CompletedProcess:
    kubeconfig = sim.write_kubeconfig(tmp_path / "config")
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.slow  # runs kubectl itself (tests/conftest.py's hook marks only tests whose fixtures do)
def test_kubectl_against_each_legacy_cluster(legacy, tmp_path):
    require_tool("kubectl")
    name, sim = legacy
    groups = LEGACY[name][1]
    resources = _kubectl(sim, tmp_path, "api-resources", "--no-headers")
    assert resources.returncode == 0, resources.stderr
    listed = {line.split()[0]: line for line in resources.stdout.splitlines()}
    version = _kubectl(sim, tmp_path, "version", "-o", "json")
    assert json.loads(version.stdout)["serverVersion"]["gitVersion"] == LEGACY[name][0]
    assert _kubectl(sim, tmp_path, "get", "nodes").returncode == 0
    slices = _kubectl(sim, tmp_path, "get", "resourceslices", "-o", "json")
    if "resource.k8s.io" in groups:
        dra_version = groups["resource.k8s.io"][0]
        assert f"resource.k8s.io/{dra_version}" in listed["resourceslices"]
        assert slices.returncode == 0, slices.stderr
        items = json.loads(slices.stdout)["items"]
        assert items
        assert {i["apiVersion"] for i in items} == {f"resource.k8s.io/{dra_version}"}
        assert _kubectl(sim, tmp_path, "get", "resourceclaims", "-A").returncode == 0
    else:
        assert "resourceslices" not in listed
        assert slices.returncode == 1
        assert 'doesn\'t have a resource type "resourceslices"' in slices.stderr
    new_events = _kubectl(sim, tmp_path, "get", "events.events.k8s.io", "-A", "-o", "name")
    assert (new_events.returncode == 0) == ("events.k8s.io" in groups), new_events.stderr
    assert _kubectl(sim, tmp_path, "get", "events", "-A").returncode == 0
