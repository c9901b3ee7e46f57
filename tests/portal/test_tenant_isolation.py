"""Tenant isolation in the inventory and the manifest tools: another tenant's pods and claims are counted, never
named; validation, feasibility and dry runs stay within the reader's namespaces; scoping fails closed."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import Client
from rest_framework.test import APIClient

from catalog.feasibility import explain_pod, snapshot_from_objects
from catalog.feasibility.viewer import OTHER_CLAIM, OTHER_POD, Viewer
from inventory import scoping
from inventory.models import Pod
from tests.catalog.feasibility_fixtures.builders import gpu_node, gpu_pod
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory, DraDeviceFactory, NodeFactory, PluginDeviceFactory, PodFactory
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.django_db
SECRET_NAMES = ("vision-team", "detector-secret", "claim-secret", "ckpt-pod")


@pytest.fixture
def world(member, approver, finance) -> dict[str, Any]:
    """Tenant A (member) owns ml-research; tenant B owns vision-team and holds a DRA device and a node's GPUs."""
    cluster = ClusterFactory(name="lab")
    give_namespaces(member, cluster, "ml-research", tenant_slug="team-a")
    give_namespaces(make_user("bob"), cluster, "vision-team", tenant_slug="team-b")
    node = NodeFactory(cluster=cluster, name="gpu-node-007")
    PodFactory(cluster=cluster, namespace="vision-team", name="detector-secret", node_name=node.name, phase="Running")
    PodFactory(cluster=cluster, namespace="ml-research", name="mine-train", node_name=node.name, phase="Running",
               accelerator=True, extended_requests={"nvidia.com/gpu": 1})
    PodFactory(cluster=cluster, namespace="vision-team", name="ckpt-pod", node_name=node.name, phase="Running",
               accelerator=True, extended_requests={"nvidia.com/gpu": 2})
    plugin = PluginDeviceFactory(cluster=cluster, node_name=node.name)
    held = DraDeviceFactory(cluster=cluster, node_name=node.name, claim_uid="uid-b", claim_namespace="vision-team",
                            claim_name="claim-secret", request_name="gpu", in_use=1, free=0,
                            reserved_for=[{"resource": "pods", "name": "ckpt-pod", "uid": "pod-uid-b"}])
    own = DraDeviceFactory(cluster=cluster, node_name=node.name, claim_uid="uid-a", claim_namespace="ml-research",
                           claim_name="mine-claim", request_name="gpu", in_use=1, free=0,
                           reserved_for=[{"resource": "pods", "name": "mine-train", "uid": "pod-uid-a"}])
    return {"cluster": cluster, "node": node, "plugin": plugin, "held": held, "own": own}


def _leaks(body: str) -> list[str]:
    return [name for name in SECRET_NAMES if name in body]


def test_the_node_page_counts_other_tenants_pods_and_names_only_yours(world, client: Client, member, approver) -> None:
    client.force_login(member)
    body = client.get(world["node"].get_absolute_url()).content.decode()
    assert "mine-train" in body
    assert _leaks(body) == []
    assert "2 pods of other tenants run here (not shown)" in body
    client.force_login(approver)
    body = client.get(world["node"].get_absolute_url()).content.decode()
    assert "detector-secret" in body
    assert "ckpt-pod" in body


def test_devices_of_other_tenants_are_in_use_never_by_whom(world, client: Client, member) -> None:
    user = member
    api = APIClient()
    api.force_authenticate(user)
    listed = {d["key"]: d for d in api.get("/api/v1/devices/?limit=100").json()["results"]}
    held = listed[world["held"].key]
    assert (held["claim_namespace"], held["claim_name"], held["claim_uid"]) == ("redacted",) * 3
    assert held["reserved_for"] == [{"resource": "pods", "name": "redacted", "uid": "redacted"}]
    assert held["in_use"] == 1
    detail = api.get(f"/api/v1/devices/{world['held'].pk}/").json()
    assert {k: detail[k] for k in held} == {k: held[k] for k in held}, "list and detail agree"
    own = listed[world["own"].key]
    assert (own["claim_namespace"], own["claim_name"]) == ("ml-research", "mine-claim")
    client.force_login(user)
    for url in (f"/inventory/devices/{world['held'].pk}/", f"/inventory/nodes/{world['node'].pk}/devices/",
                f"/inventory/devices/{world['plugin'].pk}/"):
        body = client.get(url).content.decode()
        assert _leaks(body) == [], url
    assert "in use (another tenant)" in client.get(f"/inventory/nodes/{world['node'].pk}/devices/").content.decode()
    assert "1 pod of other tenants (not shown)" in client.get(f"/inventory/devices/{world['plugin'].pk}/"
                                                              ).content.decode()


@pytest.mark.parametrize("who", ["approver", "finance"])
def test_roles_that_see_every_tenant_see_holders(world, request, who: str) -> None:
    api = APIClient()
    api.force_authenticate(request.getfixturevalue(who))
    listed = {d["key"]: d for d in api.get("/api/v1/devices/?limit=100").json()["results"]}
    assert listed[world["held"].key]["claim_name"] == "claim-secret"
    assert listed[world["held"].key]["reserved_for"][0]["name"] == "ckpt-pod"


MANIFEST = """
apiVersion: v1
kind: Pod
metadata: {name: probe, namespace: %s}
spec:
  containers:
  - name: main
    image: busybox:1.36
    resources: {limits: {nvidia.com/gpu: 1, cpu: "1", memory: 1Gi}}
"""


def test_validation_and_feasibility_stay_in_the_readers_namespaces(world, member) -> None:
    api = APIClient()
    api.force_authenticate(member)
    cluster = world["cluster"]
    report = api.post("/api/v1/manifests/validate/", {"manifest": MANIFEST % "vision-team", "cluster": cluster.pk,
                                                      "dry_run": True}, format="json").json()
    codes = [f["code"] for f in report["findings"]]
    assert "namespace-not-yours" in codes
    assert not {f["layer"] for f in report["findings"]} & {"quota", "feasibility"}
    assert [f["code"] for f in report["findings"] if f["layer"] == "dry-run"] == ["layers-skipped"]
    own = api.post("/api/v1/manifests/validate/", {"manifest": MANIFEST % "ml-research", "cluster": cluster.pk},
                   format="json").json()
    assert "namespace-not-yours" not in [f["code"] for f in own["findings"]]
    assert "feasibility" in {f["layer"] for f in own["findings"]}
    pod_manifest = {"metadata": {"name": "x", "namespace": "kube-system"},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}
    refused = api.post("/api/v1/feasibility/", {"cluster": cluster.name, "pod": pod_manifest}, format="json")
    assert refused.status_code == 400
    assert "not one of your namespaces" in refused.content.decode()


def test_a_dry_run_never_runs_outside_tenant_namespaces_even_for_admins(world, platform_admin) -> None:
    api = APIClient()
    api.force_authenticate(platform_admin)
    report = api.post("/api/v1/manifests/validate/", {"manifest": MANIFEST % "kube-system",
                                                      "cluster": world["cluster"].pk, "dry_run": True},
                      format="json").json()
    dry = [f for f in report["findings"] if f["layer"] == "dry-run"]
    assert [f["code"] for f in dry] == ["layers-skipped"]
    assert "kube-system" in dry[0]["message"]
    assert "namespace-not-yours" not in [f["code"] for f in report["findings"]]  # admins may validate anywhere


def test_explanations_name_other_tenants_pods_and_claims_only_to_those_who_may_see_them() -> None:
    node = gpu_node("gpu-a", gpus=4)
    theirs = gpu_pod("ckpt-pod", gpus=4, namespace="vision-team", node_name="gpu-a")
    snapshot = snapshot_from_objects(nodes=[node], pods=[theirs])
    pending = gpu_pod("mine", gpus=2, namespace="ml-research")
    full = explain_pod(pending, snapshot)
    assert any("vision-team/ckpt-pod" in hint for hint in full.hints)
    hidden = explain_pod(pending, snapshot, viewer=Viewer(shows=lambda ns: ns == "ml-research"))
    text = " ".join(hidden.hints + [d for n in hidden.nodes for d in n.details])
    assert "ckpt-pod" not in text
    assert OTHER_POD in text
    assert hidden.message == full.message
    assert OTHER_CLAIM == "a claim of another tenant"


def test_scoping_fails_closed_without_a_registered_tenancy(world, platform_admin) -> None:
    saved = (scoping._tenancy.scope, scoping._tenancy.targets)
    scoping._tenancy.scope = scoping._tenancy.targets = None
    try:
        assert not Pod.objects.visible_to(platform_admin).exists()
        assert scoping.targets_for(platform_admin, world["cluster"]) == []
        with pytest.raises(SystemCheckError, match=r"inventory\.E010"):
            call_command("check")
    finally:
        scoping._tenancy.scope, scoping._tenancy.targets = saved
    assert Pod.objects.visible_to(platform_admin).count() == 3
    call_command("check")  # registered by the portal app: clean
