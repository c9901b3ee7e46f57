"""The `upstream` scenario: every resource.k8s.io/v1 field, loaded by the store and served over HTTP."""

from __future__ import annotations

import json

import kubernetes
import pytest

from kubesim.scenario import load_scenario


@pytest.fixture(scope="module")
def upstream() -> list[dict]:
    return load_scenario("upstream")


def kind(objs, k):
    return [o for o in objs if o["kind"] == k]


def keys(objs, path):
    """Union of the keys found at a dotted path (``*`` walks list items) over objects."""
    found: set[str] = set()

    def walk(value, parts):
        if not parts:
            if isinstance(value, dict):
                found.update(value)
            return
        head, rest = parts[0], parts[1:]
        if head == "*":
            for item in value if isinstance(value, list) else (value.values() if isinstance(value, dict) else []):
                walk(item, rest)
        elif isinstance(value, dict) and head in value:
            walk(value[head], rest)

    for o in objs:
        walk(o, path.split("."))
    return found


def test_every_resource_field_is_set(upstream):
    slices, claims = kind(upstream, "ResourceSlice"), kind(upstream, "ResourceClaim")
    assert {
        "driver",
        "pool",
        "nodeName",
        "nodeSelector",
        "allNodes",
        "perDeviceNodeSelection",
        "devices",
        "sharedCounters",
        "partitionTypeAttribute",
        "skipNodeOperations",
    } <= keys(slices, "spec")
    assert {
        "name",
        "attributes",
        "capacity",
        "consumesCounters",
        "nodeName",
        "nodeSelector",
        "allNodes",
        "taints",
        "bindsToNode",
        "bindingConditions",
        "bindingFailureConditions",
        "allowMultipleAllocations",
        "nodeAllocatableResources",
    } <= keys(slices, "spec.devices.*")
    assert {"int", "bool", "string", "version", "ints", "bools", "strings", "versions"} <= keys(
        slices, "spec.devices.*.attributes.*"
    )
    assert {"default", "validValues", "validRange"} <= keys(slices, "spec.devices.*.capacity.*.requestPolicy")
    assert {"min", "max", "step"} <= keys(slices, "spec.devices.*.capacity.*.requestPolicy.validRange")
    effects = {t["effect"] for s in slices for d in s["spec"].get("devices", []) for t in d.get("taints", [])}
    assert effects == {"None", "NoSchedule", "NoExecute"}
    assert {"key", "value", "effect", "timeAdded"} <= keys(slices, "spec.devices.*.taints.*")
    assert {"selectors", "config", "extendedResourceName"} <= keys(kind(upstream, "DeviceClass"), "spec")
    tmpl = kind(upstream, "ResourceClaimTemplate")
    assert {"metadata", "spec"} <= keys(tmpl, "spec")
    assert {
        "deviceClassName",
        "selectors",
        "allocationMode",
        "count",
        "adminAccess",
        "tolerations",
        "capacity",
    } <= keys(claims, "spec.devices.requests.*.exactly")
    modes = {
        r["exactly"].get("allocationMode") for c in claims for r in c["spec"]["devices"]["requests"] if "exactly" in r
    }
    assert {"ExactCount", "All"} <= modes
    assert {"name", "deviceClassName", "selectors", "allocationMode", "count", "tolerations", "capacity"} <= keys(
        claims, "spec.devices.requests.*.firstAvailable.*"
    )
    assert {"requests", "matchAttribute", "distinctAttribute"} <= keys(claims, "spec.devices.constraints.*")
    assert {"requests", "opaque"} <= keys(claims, "spec.devices.config.*")
    assert {"devices", "nodeSelector", "allocationTimestamp"} <= keys(claims, "status.allocation")
    assert {
        "request",
        "driver",
        "pool",
        "device",
        "adminAccess",
        "tolerations",
        "bindingConditions",
        "bindingFailureConditions",
        "shareID",
        "consumedCapacity",
        "skipNodeOperations",
    } <= keys(claims, "status.allocation.devices.results.*")
    sources = {e["source"] for c in claims for e in c["status"]["allocation"]["devices"].get("config", [])}
    assert sources == {"FromClass", "FromClaim"}
    assert {"apiGroup", "resource", "name", "uid"} <= keys(claims, "status.reservedFor.*")
    assert {"driver", "pool", "device", "shareID", "conditions", "data", "networkData"} <= keys(
        claims, "status.devices.*"
    )
    assert {"interfaceName", "ips", "hardwareAddress"} <= keys(claims, "status.devices.*.networkData")
    assert any("resource.kubernetes.io/delete-protection" in c["metadata"].get("finalizers", []) for c in claims)
    assert any(
        c["metadata"].get("annotations", {}).get("resource.kubernetes.io/extended-resource-claim") == "true"
        for c in claims
    )
    sharing = {
        e["opaque"]["parameters"].get("sharing", {}).get("strategy")
        for o in claims + tmpl
        for e in (o["spec"].get("spec", o["spec"]))["devices"].get("config", [])
    }
    assert {"TimeSlicing", "MPS"} <= sharing


def test_core_objects_are_complete(upstream):
    pods, nodes = kind(upstream, "Pod"), kind(upstream, "Node")
    assert {"resourceClaims", "initContainers", "overhead"} <= keys(pods, "spec")
    assert any(c.get("restartPolicy") == "Always" for p in pods for c in p["spec"].get("initContainers", []))
    assert {
        "phase",
        "conditions",
        "hostIP",
        "hostIPs",
        "podIP",
        "podIPs",
        "startTime",
        "qosClass",
        "containerStatuses",
        "initContainerStatuses",
        "resourceClaimStatuses",
        "extendedResourceClaimStatus",
        "message",
        "reason",
        "nominatedNodeName",
        "observedGeneration",
    } <= keys(pods, "status")
    assert {"resourceClaimName", "requestMappings"} <= keys(pods, "status.extendedResourceClaimStatus")
    assert {
        "capacity",
        "allocatable",
        "conditions",
        "nodeInfo",
        "addresses",
        "daemonEndpoints",
        "images",
        "runtimeHandlers",
        "features",
    } <= keys(nodes, "status")
    assert {
        "machineID",
        "systemUUID",
        "bootID",
        "kernelVersion",
        "osImage",
        "containerRuntimeVersion",
        "kubeletVersion",
        "kubeProxyVersion",
        "operatingSystem",
        "architecture",
        "swap",
    } <= keys(nodes, "status.nodeInfo")
    assert "example.com/gpu" in nodes[0]["status"]["allocatable"]
    quota = kind(upstream, "ResourceQuota")
    assert {"hard", "scopes", "scopeSelector"} <= keys(quota, "spec")
    assert {"hard", "used"} <= keys(quota, "status")
    assert {"series", "related", "reportingComponent", "reportingInstance", "eventTime", "action"} <= keys(
        kind(upstream, "Event"), ""
    ) | set(kind(upstream, "Event")[0])
    assert [n["metadata"]["name"] for n in kind(upstream, "Namespace")][-1] == "dra-upstream"


def test_upstream_loads_into_store_and_serves_over_http(upstream):
    from kubesim import Simulator

    sim = Simulator(scenario="upstream", port=0).start()
    try:
        expected = {
            "namespaces": 5,
            "deviceclasses": 2,
            "nodes": 1,
            "resourceslices": 5,
            "resourcequotas": 1,
            "resourceclaimtemplates": 1,
            "resourceclaims": 4,
            "pods": 2,
            "events": 1,
        }
        assert {p: len(sim.store.objects(p)) for p in expected} == expected
        stored = {s["metadata"]["name"]: s for s in sim.store.objects("resourceslices")}
        source = {s["metadata"]["name"]: s for s in kind(upstream, "ResourceSlice")}
        assert {n: s["spec"] for n, s in stored.items()} == {n: s["spec"] for n, s in source.items()}
        c = kubernetes.config.new_client_from_config_dict(sim.kubeconfig())
        try:
            dra = kubernetes.client.ResourceV1Api(c)
            body = json.loads(dra.list_resource_slice(_preload_content=False).data)
            assert body["kind"] == "ResourceSliceList"
            assert {i["metadata"]["name"]: i["spec"] for i in body["items"]} == {
                n: s["spec"] for n, s in source.items()
            }
            claims = json.loads(dra.list_namespaced_resource_claim("dra-upstream", _preload_content=False).data)[
                "items"
            ]
            shared = next(i for i in claims if i["metadata"]["name"] == "shared-gpus")
            assert shared["status"]["devices"][1]["networkData"]["interfaceName"] == "net1"
            pod = json.loads(
                kubernetes.client.CoreV1Api(c)
                .read_namespaced_pod("inference-0", "dra-upstream", _preload_content=False)
                .data
            )
            assert (
                pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
                == "inference-0-extended-resources-q8mzt"
            )
        finally:
            c.close()
    finally:
        sim.stop()
