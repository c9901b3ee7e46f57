"""Accelerator inventory REST API: permission matrix, explicit fields, filters, redaction, query counts, schema."""

from __future__ import annotations

import pytest
import yaml
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from inventory.models import Device, Finding, Health, Mode, Path
from tests.inventory.factories import (
    GPU_UUID,
    PCI_BUS_ID,
    AcceleratorPodFactory,
    ClusterFactory,
    DeviceClassFactory,
    DraDeviceFactory,
    FindingFactory,
    PluginDeviceFactory,
    PodFactory,
    ResourceClaimFactory,
    ResourceSliceFactory,
    TimeSlicedDeviceFactory,
)

pytestmark = pytest.mark.django_db

ROLES = ["member", "lead", "approver", "security_approver", "platform_admin", "finance"]
PLATFORM = ["approver", "security_approver", "platform_admin"]
TENANT_AND_FINANCE = ["member", "lead", "finance"]
BASENAMES = ["device", "pod", "resource-slice", "device-class", "resource-claim", "finding"]
EVIL = "<script>alert(1)</script>"
DEVICE_FIELDS = {
    "id",
    "cluster",
    "key",
    "path",
    "mode",
    "unit",
    "node_name",
    "node_pool",
    "node_schedulable",
    "resource_name",
    "driver",
    "pool",
    "device_name",
    "pool_generation",
    "pool_complete",
    "model",
    "memory_mib",
    "architecture",
    "compute_capability",
    "driver_version",
    "cuda_version",
    "mig_profile",
    "units_per_card",
    "parent",
    "cards",
    "capacity",
    "allocatable",
    "in_use",
    "free",
    "unhealthy",
    "health",
    "attributes",
    "capacities",
    "consumes_counters",
    "allow_multiple_allocations",
    "taints",
    "blocked_by",
    "claim_uid",
    "claim_namespace",
    "claim_name",
    "request_name",
    "admin_access",
    "share_id",
    "reserved_for",
    "sharing",
    "sharing_detail",
    "holders",
    "consumed_capacity",
    "consumed_share",
    "updated_at",
}
POD_FIELDS = {
    "id",
    "cluster",
    "uid",
    "namespace",
    "name",
    "node_name",
    "phase",
    "stage",
    "stage_layer",
    "stage_detail",
    "restarts",
    "extended_requests",
    "claim_names",
    "scheduling_message",
    "scheduling_reasons",
    "k8s_created_at",
}


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def world() -> dict[str, object]:
    cluster = ClusterFactory(name="api-lab")
    return {
        "device": DraDeviceFactory(cluster=cluster),
        "pod": AcceleratorPodFactory(cluster=cluster),
        "resource-slice": ResourceSliceFactory(cluster=cluster),
        "device-class": DeviceClassFactory(cluster=cluster),
        "resource-claim": ResourceClaimFactory(cluster=cluster),
        "finding": FindingFactory(cluster=cluster),
    }


def urls(world) -> list[str]:
    out = []
    for basename in BASENAMES:
        out.append(reverse(f"inventory-api:{basename}-list"))
        out.append(reverse(f"inventory-api:{basename}-detail", kwargs={"pk": world[basename].pk}))
    return out


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


# Permission matrix ------------------------------------------------------------------------------------------------


def test_anonymous_is_refused(api: APIClient, world) -> None:
    for url in urls(world):
        assert api.get(url).status_code in (401, 403), url


@pytest.mark.parametrize("role", ROLES)
def test_every_role_can_read(api: APIClient, world, role: str, request: pytest.FixtureRequest) -> None:
    api.force_authenticate(request.getfixturevalue(role))
    for url in urls(world):
        assert api.get(url).status_code == 200, url


@pytest.mark.parametrize("basename", BASENAMES)
def test_unknown_pk_is_404(api: APIClient, member: User, basename: str) -> None:
    api.force_authenticate(member)
    assert api.get(reverse(f"inventory-api:{basename}-detail", kwargs={"pk": 999_999})).status_code == 404


@pytest.mark.parametrize("basename", BASENAMES)
def test_api_is_read_only(api: APIClient, platform_admin: User, world, basename: str) -> None:
    api.force_authenticate(platform_admin)
    assert api.post(reverse(f"inventory-api:{basename}-list"), {}).status_code == 405
    detail = reverse(f"inventory-api:{basename}-detail", kwargs={"pk": world[basename].pk})
    assert api.delete(detail).status_code == 405


# Representations ----------------------------------------------------------------------------------------------------


def test_device_representation(api: APIClient, platform_admin: User, world) -> None:
    api.force_authenticate(platform_admin)
    body = api.get(reverse("inventory-api:device-detail", kwargs={"pk": world["device"].pk})).json()
    assert set(body) == DEVICE_FIELDS
    assert body["cluster"] == {"id": world["device"].cluster_id, "name": "api-lab"}
    assert body["attributes"]["uuid"] == {"string": GPU_UUID}
    assert body["capacities"] == {"memory": {"value": "80Gi"}}
    assert (body["path"], body["mode"], body["free"]) == ("dra", "dra-device", 1)


def test_pod_representation_and_only_accelerator_live_pods(api: APIClient, member: User, world) -> None:
    PodFactory(cluster=world["pod"].cluster, name="cpu-only")
    AcceleratorPodFactory(cluster=world["pod"].cluster, name="gone", deleted_at=timezone.now())
    api.force_authenticate(member)
    (pod,) = results(api.get(reverse("inventory-api:pod-list")))
    assert set(pod) == POD_FIELDS
    assert pod["extended_requests"] == {"nvidia.com/gpu": 4}
    assert pod["stage"] == "pending-unscheduled"
    assert pod["scheduling_reasons"]["reasons"][0]["category"] == "insufficient-resource"
    assert pod["scheduling_message"].startswith("0/3 nodes are available")


def test_dra_object_representations(api: APIClient, platform_admin: User, world) -> None:
    api.force_authenticate(platform_admin)
    (rs,) = results(api.get(reverse("inventory-api:resource-slice-list")))
    assert set(rs) == {
        "id",
        "cluster",
        "uid",
        "name",
        "driver",
        "pool_name",
        "pool_generation",
        "pool_slice_count",
        "node_name",
        "device_count",
        "spec",
    }
    assert rs["spec"]["devices"][0]["attributes"]["uuid"] == {"string": GPU_UUID}
    (dc,) = results(api.get(reverse("inventory-api:device-class-list")))
    assert set(dc) == {"id", "cluster", "uid", "name", "extended_resource_name", "selectors"}
    assert dc["selectors"] == [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]
    (claim,) = results(api.get(reverse("inventory-api:resource-claim-list")))
    assert set(claim) == {
        "id",
        "cluster",
        "uid",
        "namespace",
        "name",
        "allocated",
        "reserved_for_count",
        "devices",
        "reserved_for",
    }
    assert claim["devices"][0]["device"] == "gpu-0"
    assert claim["reserved_for"] == [{"resource": "pods", "name": "trainer-0", "uid": "pod-uid-0"}]
    (finding,) = results(api.get(reverse("inventory-api:finding-list")))
    assert set(finding) == {
        "id",
        "cluster",
        "kind",
        "severity",
        "scope",
        "subject",
        "node_name",
        "message",
        "evidence",
        "first_seen_at",
        "updated_at",
    }


def test_malformed_raw_objects_do_not_break_the_api(api: APIClient, member: User) -> None:
    ResourceSliceFactory(raw={"spec": "not-a-dict"})
    DeviceClassFactory(raw={"spec": {"selectors": "nope"}})
    ResourceClaimFactory(raw={"status": {"allocation": None, "reservedFor": None}})
    api.force_authenticate(member)
    assert results(api.get(reverse("inventory-api:resource-slice-list")))[0]["spec"] == {}
    assert results(api.get(reverse("inventory-api:device-class-list")))[0]["selectors"] == []
    claim = results(api.get(reverse("inventory-api:resource-claim-list")))[0]
    assert (claim["devices"], claim["reserved_for"]) == ([], [])


# Filters --------------------------------------------------------------------------------------------------------------


@pytest.fixture
def fleet() -> dict[str, Device]:
    lab, other = ClusterFactory(name="lab"), ClusterFactory(name="other")
    return {
        "h100": PluginDeviceFactory(cluster=lab, node_name="h100-1"),
        "h100-full": PluginDeviceFactory(cluster=lab, node_name="h100-2", in_use=8),
        "t4": TimeSlicedDeviceFactory(cluster=lab, node_name="t4-1"),
        "mig": PluginDeviceFactory(
            cluster=other,
            node_name="a100-mig",
            resource_name="nvidia.com/mig-1g.10gb",
            mode=Mode.MIG,
            memory_mib=9728,
            model="NVIDIA-A100",
            node_pool="mig-pool",
            capacity=14,
            allocatable=14,
            in_use=0,
            cards=2,
        ),
        "dra": DraDeviceFactory(cluster=lab, node_name="dra-1"),
        "dra-held": DraDeviceFactory(cluster=other, node_name="dra-2", in_use=1, free=0, claim_name="c"),
        "dra-unknown": DraDeviceFactory(
            cluster=other, node_name="dra-2", health=Health.UNKNOWN, free=0, pool_complete=False
        ),
    }


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"node": "t4-1"}, ["t4"]),
        ({"model": "Tesla-T4"}, ["t4"]),
        ({"mode": "mig"}, ["mig"]),
        ({"mode": "dra-device"}, ["dra", "dra-held", "dra-unknown"]),
        ({"path": "device-plugin"}, ["h100", "h100-full", "mig", "t4"]),
        ({"path": "dra"}, ["dra", "dra-held", "dra-unknown"]),
        ({"pool": "t4-pool"}, ["t4"]),
        ({"free": "true"}, ["dra", "h100", "mig", "t4"]),
        ({"free": "false"}, ["dra-held", "dra-unknown", "h100-full"]),
        ({"held": "true"}, ["dra-held", "h100", "h100-full", "t4"]),
        ({"held": "false"}, ["dra", "dra-unknown", "mig"]),
        ({"health": "unknown"}, ["dra-unknown"]),
        ({"memory_min": "81600"}, ["dra", "dra-held", "dra-unknown"]),
        ({"memory_min": "10000"}, ["dra", "dra-held", "dra-unknown", "h100", "h100-full", "t4"]),
        ({"path": "dra", "free": "true"}, ["dra"]),
    ],
)
def test_device_filters(api: APIClient, member: User, fleet, params: dict, expected: list[str]) -> None:
    api.force_authenticate(member)
    got = sorted(d["key"] for d in results(api.get(reverse("inventory-api:device-list"), params)))
    assert got == sorted(fleet[name].key for name in expected)


def test_device_cluster_filter_and_bad_values(api: APIClient, member: User, fleet) -> None:
    api.force_authenticate(member)
    url = reverse("inventory-api:device-list")
    got = sorted(d["key"] for d in results(api.get(url, {"cluster": fleet["mig"].cluster_id})))
    assert got == sorted(fleet[n].key for n in ("mig", "dra-held", "dra-unknown"))
    assert api.get(url, {"mode": "bogus"}).status_code == 400
    # model and pool are exact-match text in the API (no table scan for choices): an unknown one matches nothing
    assert results(api.get(url, {"model": "no-such-model"})) == []
    assert api.get(url, {"cluster": "not-a-number"}).status_code == 400
    assert api.get(url, {"memory_min": "lots"}).status_code == 400


def test_pod_filters(api: APIClient, member: User) -> None:
    a, b = ClusterFactory(), ClusterFactory()
    AcceleratorPodFactory(cluster=a, namespace="team-a", name="waiting")
    AcceleratorPodFactory(cluster=a, namespace="team-a", name="running", stage="running")
    AcceleratorPodFactory(cluster=b, namespace="team-b", name="other")
    api.force_authenticate(member)
    url = reverse("inventory-api:pod-list")
    names = lambda params: sorted(p["name"] for p in results(api.get(url, params)))  # noqa: E731
    assert names({"cluster": a.pk}) == ["running", "waiting"]
    assert names({"namespace": "team-b"}) == ["other"]
    assert names({"stage": "running"}) == ["running"]
    assert names({"stage": "pending-unscheduled", "cluster": a.pk}) == ["waiting"]


def test_finding_filters(api: APIClient, member: User) -> None:
    a, b = ClusterFactory(), ClusterFactory()
    FindingFactory(cluster=a, subject="s1", node_name="n1")
    FindingFactory(
        cluster=a, subject="s2", kind=Finding.Kind.POOL_INCOMPLETE, severity=Finding.Severity.ERROR, node_name=""
    )
    FindingFactory(cluster=b, subject="s3", severity=Finding.Severity.INFO, node_name="n3")
    api.force_authenticate(member)
    url = reverse("inventory-api:finding-list")
    subjects = lambda params: sorted(f["subject"] for f in results(api.get(url, params)))  # noqa: E731
    assert subjects({"cluster": a.pk}) == ["s1", "s2"]
    assert subjects({"kind": "pool-incomplete"}) == ["s2"]
    assert subjects({"severity": "info"}) == ["s3"]
    assert subjects({"node": "n1"}) == ["s1"]


def test_dra_object_filters(api: APIClient, member: User) -> None:
    a, b = ClusterFactory(), ClusterFactory()
    ResourceSliceFactory(cluster=a, driver="gpu.nvidia.com", pool_name="p1")
    ResourceSliceFactory(cluster=b, driver="neuron.amazonaws.com", pool_name="p2")
    ResourceClaimFactory(cluster=a, namespace="ns-a")
    ResourceClaimFactory(cluster=b, namespace="ns-b", allocated=False)
    api.force_authenticate(member)
    slices = reverse("inventory-api:resource-slice-list")
    assert [s["pool_name"] for s in results(api.get(slices, {"driver": "neuron.amazonaws.com"}))] == ["p2"]
    assert [s["pool_name"] for s in results(api.get(slices, {"cluster": a.pk}))] == ["p1"]
    claims = reverse("inventory-api:resource-claim-list")
    assert [c["namespace"] for c in results(api.get(claims, {"allocated": "false"}))] == ["ns-b"]


# Redaction ------------------------------------------------------------------------------------------------------------


def _sensitive_world() -> None:
    cluster = ClusterFactory()
    DraDeviceFactory(
        cluster=cluster,
        mode=Mode.DRA_PARTITION,
        parent="GPU-PARENT-aaaa",
        attributes={
            "uuid": {"string": GPU_UUID},
            "resource.kubernetes.io/pciBusID": {"string": PCI_BUS_ID},
            "serial": {"string": "SN-99887766"},
            "productName": {"string": "NVIDIA A100"},
        },
    )
    ResourceSliceFactory(cluster=cluster)
    FindingFactory(cluster=cluster, evidence={"cards": [{"uuid": GPU_UUID, "pciBusID": PCI_BUS_ID}]})


SENSITIVE = [GPU_UUID, PCI_BUS_ID, "SN-99887766", "GPU-PARENT-aaaa"]


@pytest.mark.parametrize("role", TENANT_AND_FINANCE)
def test_tenants_and_finance_get_redacted_identifiers(api: APIClient, role: str, request) -> None:
    _sensitive_world()
    api.force_authenticate(request.getfixturevalue(role))
    for basename in ("device", "resource-slice", "finding"):
        response = api.get(reverse(f"inventory-api:{basename}-list"))
        text = response.content.decode()
        for secret in SENSITIVE:
            assert secret not in text, (basename, secret)
        assert "redacted" in text, basename
    (device,) = results(api.get(reverse("inventory-api:device-list")))
    assert device["attributes"]["uuid"] == "redacted"
    assert device["attributes"]["productName"] == {"string": "NVIDIA A100"}
    assert device["parent"] == "redacted"


@pytest.mark.parametrize("role", PLATFORM)
def test_platform_roles_get_identifiers(api: APIClient, role: str, request) -> None:
    _sensitive_world()
    api.force_authenticate(request.getfixturevalue(role))
    text = "".join(
        api.get(reverse(f"inventory-api:{b}-list")).content.decode() for b in ("device", "resource-slice", "finding")
    )
    for secret in SENSITIVE:
        assert secret in text, secret


def test_hostile_strings_are_returned_verbatim_as_json(api: APIClient, member: User) -> None:
    DraDeviceFactory(model=EVIL, attributes={EVIL: {"string": EVIL}})
    api.force_authenticate(member)
    response = api.get(reverse("inventory-api:device-list"))
    assert response["Content-Type"].startswith("application/json")
    assert results(response)[0]["attributes"] == {EVIL: {"string": EVIL}}


# Query counts ------------------------------------------------------------------------------------------------------------


def _make_rows(count: int) -> None:
    for i in range(count):
        cluster = ClusterFactory(name=f"qc-{i % 3}")
        PluginDeviceFactory(cluster=cluster)
        DraDeviceFactory(cluster=cluster)
        AcceleratorPodFactory(cluster=cluster)
        ResourceSliceFactory(cluster=cluster)
        DeviceClassFactory(cluster=cluster)
        ResourceClaimFactory(cluster=cluster)
        FindingFactory(cluster=cluster)


@pytest.mark.parametrize("rows", [3, 30])
@pytest.mark.parametrize("basename", BASENAMES)
def test_list_query_count_is_constant(
    api: APIClient, member: User, django_assert_max_num_queries, rows: int, basename: str
) -> None:
    _make_rows(rows)
    api.force_authenticate(member)
    # filter-form choices (models, pools) + count + page + one group check for the redaction rule
    with django_assert_max_num_queries(5):
        response = api.get(reverse(f"inventory-api:{basename}-list"))
    body = response.json()
    if basename == "device":  # the devices list is not counted (count is null); pages of 50
        assert body["count"] is None
        assert len(body["results"]) == min(50, rows * 2)
        assert (body["next"] is not None) == (rows * 2 > 50)
    elif basename == "pod":  # nor is the accelerator pod list (nodes: tests/inventory/test_api.py)
        assert body["count"] is None
        assert len(body["results"]) == rows
    else:
        assert body["count"] == rows


# Schema ---------------------------------------------------------------------------------------------------------------


def test_schema_generates_with_inventory_endpoints(client, member: User) -> None:
    client.force_login(member)
    schema = client.get(reverse("api-schema"), {"format": "json"}).json()
    paths = set(schema["paths"])
    for prefix in ("devices", "pods", "resource-slices", "device-classes", "resource-claims", "findings"):
        assert {f"/api/v1/{prefix}/", f"/api/v1/{prefix}/{{id}}/"} <= paths, prefix
    params = {p["name"] for p in schema["paths"]["/api/v1/devices/"]["get"]["parameters"]}
    assert {
        "cluster",
        "node",
        "model",
        "mode",
        "path",
        "pool",
        "free",
        "held",
        "health",
        "memory_min",
        "limit",
        "offset",
    } <= params
    finding_params = {p["name"] for p in schema["paths"]["/api/v1/findings/"]["get"]["parameters"]}
    assert {"cluster", "kind", "severity", "node"} <= finding_params


# Realistic data: the demo simulator ---------------------------------------------------------------------------------


@pytest.mark.slow  # about 4 s
@pytest.mark.django_db(transaction=True)
def test_demo_simulator_inventory_through_api_and_pages(client, platform_admin: User, member: User) -> None:
    from inventory.leases import lease_backend
    from inventory.services.clients import client_for
    from inventory.services.clusters import cluster_register
    from inventory.services.sync import cluster_sync_once
    from kubesim import Simulator

    with Simulator(scenario="demo", port=0) as sim:
        cluster = cluster_register(name="demo", kubeconfig=yaml.safe_dump(sim.kubeconfig()))
        k8s = client_for(cluster)
        backend = lease_backend()
        try:
            cluster_sync_once(cluster_id=cluster.pk, client=k8s, lease_for=lambda s: backend.acquire(s, 30))
        finally:
            k8s.close()
    assert Device.objects.filter(cluster=cluster).exists()
    api = APIClient()
    api.force_authenticate(platform_admin)
    devices = api.get(reverse("inventory-api:device-list"), {"cluster": cluster.pk, "limit": 500}).json()
    assert len(devices["results"]) == Device.objects.filter(cluster=cluster).count()
    paths = {d["path"] for d in devices["results"]}
    assert Path.DEVICE_PLUGIN in paths
    for basename in BASENAMES:
        assert api.get(reverse(f"inventory-api:{basename}-list")).status_code == 200, basename
    client.force_login(member)
    for name in ("inventory:overview", "inventory:capacity", "inventory:pending_pods", "inventory:findings"):
        assert client.get(reverse(name)).status_code == 200, name
    checked = 0
    for device in Device.objects.filter(cluster=cluster, path=Path.DRA)[:20]:
        html = client.get(device.get_absolute_url()).content.decode()
        for attr, value in device.attributes.items():
            inner = next(iter(value.values()), "") if isinstance(value, dict) else value
            if any(word in attr.lower() for word in ("uuid", "pcibusid")) and inner:
                assert str(inner) not in html, (device.key, attr)
                checked += 1
    assert checked, "the demo scenario publishes DRA devices with UUID/PCI attributes"
