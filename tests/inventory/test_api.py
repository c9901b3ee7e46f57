"""REST API: permission matrix, explicit fields, filters, no secrets, query counts, schema, error mapping."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from core.api.exceptions import portal_exception_handler
from inventory.errors import ClusterConfigError, LeaseLostError
from inventory.models import SyncState
from tests.inventory.factories import AcceleratorPodFactory, ClusterFactory, NodeFactory, SyncStateFactory

pytestmark = pytest.mark.django_db

ROLES = ["member", "lead", "approver", "security_approver", "platform_admin", "finance"]
SECRET = "API-SECRET-KUBECONFIG-9f8e7d"
NODE_FIELDS = {
    "id",
    "cluster",
    "uid",
    "name",
    "labels",
    "ready",
    "unschedulable",
    "capacity",
    "allocatable",
    "taints",
    "conditions",
    "kubelet_version",
    "k8s_created_at",
    "resource_version",
    "issues",
}
SYNC_FIELDS = {
    "kind",
    "phase",
    "resource_version",
    "listed_count",
    "list_total",
    "last_event_at",
    "last_success_at",
    "relists",
    "last_error",
    "served_version",
    "unavailable_reason",
}


@pytest.fixture
def api() -> APIClient:
    return APIClient()


@pytest.fixture
def world() -> dict[str, object]:
    cluster = ClusterFactory(name="api-a", kubeconfig=f"clusters: []\n# {SECRET}\n", kubeconfig_path=f"/etc/{SECRET}")
    SyncStateFactory(cluster=cluster, kind="nodes", phase=SyncState.Phase.WATCHING, relists=2)
    node = NodeFactory(cluster=cluster, name="gpu-1")
    return {"cluster": cluster, "node": node}


def urls(world) -> list[str]:
    return [
        reverse("inventory-api:cluster-list"),
        reverse("inventory-api:cluster-detail", kwargs={"pk": world["cluster"].pk}),
        reverse("inventory-api:node-list"),
        reverse("inventory-api:node-detail", kwargs={"pk": world["node"].pk}),
    ]


def test_anonymous_is_refused(api: APIClient, world) -> None:
    for url in urls(world):
        assert api.get(url).status_code in (401, 403), url


@pytest.mark.parametrize("role", ROLES)
def test_every_role_can_read(api: APIClient, world, role: str, request: pytest.FixtureRequest) -> None:
    api.force_authenticate(request.getfixturevalue(role))
    for url in urls(world):
        assert api.get(url).status_code == 200, url


@pytest.mark.parametrize("name", ["inventory-api:cluster-detail", "inventory-api:node-detail"])
def test_unknown_pk_is_404(api: APIClient, member: User, name: str) -> None:
    api.force_authenticate(member)
    assert api.get(reverse(name, kwargs={"pk": 999_999})).status_code == 404


def test_api_is_read_only(api: APIClient, platform_admin: User, world) -> None:
    api.force_authenticate(platform_admin)
    assert api.post(reverse("inventory-api:node-list"), {"name": "x"}).status_code == 405
    assert api.delete(reverse("inventory-api:cluster-detail", kwargs={"pk": world["cluster"].pk})).status_code == 405


def test_cluster_representation_has_sync_states_and_no_secrets(api: APIClient, member: User, world) -> None:
    api.force_authenticate(member)
    response = api.get(reverse("inventory-api:cluster-list"))
    assert SECRET not in response.content.decode()
    (cluster,) = response.json()["results"]
    assert set(cluster) == {"id", "name", "description", "connection", "sync_enabled", "server_version", "sync_states"}
    (state,) = cluster["sync_states"]
    assert set(state) == SYNC_FIELDS
    assert (state["kind"], state["phase"], state["relists"]) == ("nodes", "watching", 2)
    detail = api.get(reverse("inventory-api:cluster-detail", kwargs={"pk": world["cluster"].pk}))
    assert SECRET not in detail.content.decode()
    assert "kubeconfig" not in detail.json()


def test_node_representation(api: APIClient, member: User, world) -> None:
    api.force_authenticate(member)
    response = api.get(reverse("inventory-api:node-detail", kwargs={"pk": world["node"].pk}))
    body = response.json()
    assert set(body) == NODE_FIELDS
    assert body["cluster"] == {"id": world["cluster"].pk, "name": "api-a"}
    assert body["capacity"]["nvidia.com/gpu"] == "8"
    assert body["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert SECRET not in response.content.decode()


def test_tombstoned_nodes_are_excluded(api: APIClient, member: User) -> None:
    node = NodeFactory(deleted_at=timezone.now())
    api.force_authenticate(member)
    assert api.get(reverse("inventory-api:node-list")).json()["results"] == []
    assert api.get(reverse("inventory-api:node-detail", kwargs={"pk": node.pk})).status_code == 404


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"label": "team=ml"}, ["cpu-1", "gpu-1"]),
        ({"label": "pool"}, ["gpu-2"]),
        ({"extended_resource": "nvidia.com/gpu"}, ["gpu-1", "gpu-2"]),
        ({"schedulable": "yes"}, ["cpu-1", "gpu-1"]),
        ({"schedulable": "no"}, ["cpu-2", "gpu-2"]),
        ({"taint": "nvidia.com/gpu"}, ["gpu-2"]),
        ({"ready": "false"}, ["cpu-2"]),
        ({"name": "gpu"}, ["gpu-1", "gpu-2"]),
    ],
)
def test_node_filters(api: APIClient, member: User, params: dict, expected: list[str]) -> None:
    cluster = ClusterFactory()
    NodeFactory(cluster=cluster, name="gpu-1", labels={"team": "ml"})
    NodeFactory(
        cluster=cluster,
        name="gpu-2",
        labels={"pool": "a"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    NodeFactory(cluster=cluster, name="cpu-1", labels={"team": "ml"}, capacity={"cpu": "8"}, allocatable={"cpu": "8"})
    NodeFactory(cluster=cluster, name="cpu-2", labels={}, capacity={"cpu": "8"}, ready=False, unschedulable=True)
    api.force_authenticate(member)
    response = api.get(reverse("inventory-api:node-list"), params)
    assert response.status_code == 200
    assert sorted(n["name"] for n in response.json()["results"]) == expected


def test_cluster_filter_and_bad_choice(api: APIClient, member: User) -> None:
    a, b = ClusterFactory(), ClusterFactory()
    NodeFactory(cluster=a, name="in-a")
    NodeFactory(cluster=b, name="in-b")
    api.force_authenticate(member)
    assert [n["name"] for n in api.get(reverse("inventory-api:node-list"), {"cluster": a.pk}).json()["results"]] == [
        "in-a"
    ]
    assert api.get(reverse("inventory-api:node-list"), {"extended_resource": "no.such/thing"}).status_code == 400


def test_limit_offset_pagination(api: APIClient, member: User) -> None:
    NodeFactory.create_batch(7)
    api.force_authenticate(member)
    body = api.get(reverse("inventory-api:node-list"), {"limit": 5, "offset": 5}).json()
    assert body["count"] is None  # not counted: see the next test
    assert len(body["results"]) == 2
    assert body["next"] is None
    assert "offset" not in body["previous"]


def test_query_counts_do_not_grow_with_rows(api: APIClient, member: User, django_assert_max_num_queries) -> None:
    for cluster in ClusterFactory.create_batch(4):
        NodeFactory.create_batch(10, cluster=cluster)
        for kind in ("nodes", "pods", "events"):
            SyncStateFactory(cluster=cluster, kind=kind)
    api.force_authenticate(member)
    with django_assert_max_num_queries(2):
        nodes = api.get(reverse("inventory-api:node-list"), {"label": "nvidia.com/gpu.product", "limit": 100})
    assert len(nodes.json()["results"]) == 40
    with django_assert_max_num_queries(3):
        clusters = api.get(reverse("inventory-api:cluster-list"))
    assert all(len(c["sync_states"]) == 3 for c in clusters.json()["results"])


def test_schema_generates(client, member: User) -> None:
    client.force_login(member)
    response = client.get(reverse("api-schema"), {"format": "json"})
    assert response.status_code == 200
    schema = response.json()
    assert {"/api/v1/nodes/", "/api/v1/nodes/{id}/", "/api/v1/clusters/"} <= set(schema["paths"])
    cluster_fields = set(schema["components"]["schemas"]["Cluster"]["properties"])
    assert "kubeconfig" not in cluster_fields
    assert "kubeconfig_path" not in cluster_fields
    node_params = {p["name"] for p in schema["paths"]["/api/v1/nodes/"]["get"]["parameters"]}
    assert {"cluster", "name", "label", "extended_resource", "schedulable", "taint", "ready", "limit"} <= node_params


def test_portal_errors_map_to_4xx() -> None:
    assert portal_exception_handler(ClusterConfigError("bad kubeconfig"), {}).status_code == 400
    conflict = portal_exception_handler(LeaseLostError("lease lost"), {})
    assert conflict.status_code == 409
    assert conflict.data == {"detail": "lease lost", "code": "LeaseLostError"}
    assert portal_exception_handler(ValueError("not ours"), {}) is None


@pytest.mark.parametrize(("route", "factory"), [("inventory-api:node-list", NodeFactory),
                                                ("inventory-api:pod-list", AcceleratorPodFactory)])
def test_node_and_pod_lists_page_by_next_links_without_counting(
        api: APIClient, platform_admin: User, route: str, factory: type, django_assert_num_queries) -> None:
    """The two largest live lists after devices are not counted (a COUNT(*) over every cluster's rows on each page
    cost more than the page): `count` is null, and the `next` links walk every row once, in order."""
    rows = factory.create_batch(7)
    api.force_authenticate(platform_admin)
    seen: list[int] = []
    url: str | None = reverse(route) + "?limit=3"
    while url:
        with django_assert_num_queries(1):  # the page, limit+1 rows: no COUNT(*)
            body = api.get(url).json()
        assert body["count"] is None
        seen += [item["id"] for item in body["results"]]
        url = body["next"]
    assert sorted(seen) == sorted(row.pk for row in rows)
    assert len(seen) == len(set(seen))
