"""Inventory pages: permission matrix, htmx partials, filters, sync-state polling, secrets and escaping."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from inventory.models import Cluster, Node, SyncIssue, SyncState
from tests.inventory.factories import ClusterFactory, NodeFactory, PodFactory, SyncStateFactory

pytestmark = pytest.mark.django_db

ROLES = ["member", "lead", "approver", "security_approver", "platform_admin", "finance"]
SECRET = "SUPER-SECRET-TOKEN-e1b2c3d4"
HTMX = {"HX-Request": "true"}


def _kubeconfig(name: str, token: str) -> str:
    return (f"clusters: [{{name: {name}, cluster: {{server: 'https://127.0.0.1:6443'}}}}]\n"
            f"users: [{{name: u, user: {{token: {token}}}}}]\n"
            f"contexts: [{{name: {name}, context: {{cluster: {name}, user: u}}}}]\ncurrent-context: {name}\n")


@pytest.fixture
def world() -> dict[str, object]:
    cluster = ClusterFactory(name="prod-a", kubeconfig=f"clusters: [{{name: x}}]\ntoken: {SECRET}\n")
    SyncStateFactory(cluster=cluster, kind="nodes", phase=SyncState.Phase.LISTING, listed_count=40, list_total=100)
    node = NodeFactory(cluster=cluster, name="gpu-a")
    return {"cluster": cluster, "node": node}


def page_urls(world: dict[str, object]) -> list[str]:
    cluster, node = world["cluster"], world["node"]
    return [
        reverse("inventory:cluster_list"),
        reverse("inventory:cluster_detail", kwargs={"pk": cluster.pk}),
        reverse("inventory:cluster_sync_state", kwargs={"pk": cluster.pk}),
        reverse("inventory:node_list"),
        reverse("inventory:node_detail", kwargs={"pk": node.pk}),
    ]


def names(response) -> list[str]:
    return sorted(node.name for node in response.context["page_obj"])


# Permission matrix ------------------------------------------------------------------------------------------------


def test_anonymous_is_redirected_to_login(client: Client, world) -> None:
    for url in page_urls(world):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url


@pytest.mark.parametrize("role", ROLES)
def test_every_role_sees_every_page(client: Client, world, role: str, request: pytest.FixtureRequest) -> None:
    client.force_login(request.getfixturevalue(role))
    for url in page_urls(world):
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("name", ["inventory:cluster_detail", "inventory:cluster_sync_state", "inventory:node_detail"])
def test_unknown_pk_is_404(client: Client, member: User, name: str) -> None:
    client.force_login(member)
    assert client.get(reverse(name, kwargs={"pk": 999_999})).status_code == 404


def test_tombstoned_node_is_absent_from_list_but_detail_says_deleted(client: Client, member: User) -> None:
    live = NodeFactory(name="alive")
    gone = NodeFactory(name="gone", cluster=live.cluster, deleted_at=timezone.now())
    client.force_login(member)
    assert names(client.get(reverse("inventory:node_list"))) == ["alive"]
    assert b"deleted" in client.get(gone.get_absolute_url()).content


# htmx partials ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["inventory:node_list", "inventory:cluster_list"])
def test_htmx_gets_only_the_results_partial(client: Client, member: User, world, name: str) -> None:
    client.force_login(member)
    partial = client.get(reverse(name), headers=HTMX)
    assert b"<html" not in partial.content
    assert b'id="results"' in partial.content
    assert "HX-Request" in partial["Vary"]
    full = client.get(reverse(name))
    assert b"<html" in full.content
    assert b'id="results"' in full.content
    assert b'hx-headers=\'{"X-CSRFToken"' in full.content


def test_node_list_form_is_wired_for_htmx(client: Client, member: User) -> None:
    client.force_login(member)
    html = client.get(reverse("inventory:node_list")).content.decode()
    for attr in ['hx-target="#results"', 'hx-trigger="input delay:300ms, change"', 'hx-push-url="true"']:
        assert attr in html


def test_paginator_keeps_filters_and_works_with_htmx(client: Client, member: User) -> None:
    cluster = ClusterFactory()
    NodeFactory.create_batch(55, cluster=cluster)
    client.force_login(member)
    html = client.get(reverse("inventory:node_list"), {"extended_resource": "nvidia.com/gpu"}, headers=HTMX)
    assert len(html.context["page_obj"]) == 50
    assert 'hx-get="?extended_resource=nvidia.com%2Fgpu&amp;page=2"' in html.content.decode()
    page2 = client.get(reverse("inventory:node_list"), {"extended_resource": "nvidia.com/gpu", "page": 2}, headers=HTMX)
    assert len(page2.context["page_obj"]) == 5
    assert b"<html" not in page2.content


# Filters --------------------------------------------------------------------------------------------------------------


@pytest.fixture
def fleet() -> Cluster:
    cluster = ClusterFactory(name="fleet")
    other = ClusterFactory(name="other")
    NodeFactory(cluster=cluster, name="h100-1", labels={"team": "ml", "nvidia.com/gpu.product": "H100"})
    NodeFactory(
        cluster=cluster,
        name="a100-tainted",
        labels={"team": "vision", "nvidia.com/gpu.product": "A100"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    )
    NodeFactory(
        cluster=cluster,
        name="cpu-1",
        labels={"team": "ml"},
        capacity={"cpu": "64", "memory": "256Gi"},
        allocatable={"cpu": "63", "memory": "250Gi"},
    )
    NodeFactory(cluster=cluster, name="cpu-cordoned", labels={}, capacity={"cpu": "64"}, unschedulable=True)
    NodeFactory(
        cluster=cluster,
        name="cpu-draining",
        labels={},
        capacity={"cpu": "64"},
        ready=False,
        taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}],
    )
    NodeFactory(
        cluster=other,
        name="fpga-soft",
        labels={"team": "ml"},
        capacity={"cpu": "8", "xilinx.com/fpga": "2"},
        taints=[{"key": "dedicated", "value": "fpga", "effect": "PreferNoSchedule"}],
    )
    return cluster


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"name": "CPU"}, ["cpu-1", "cpu-cordoned", "cpu-draining"]),
        ({"label": "team"}, ["a100-tainted", "cpu-1", "fpga-soft", "h100-1"]),
        ({"label": "team=ml"}, ["cpu-1", "fpga-soft", "h100-1"]),
        ({"label": "nvidia.com/gpu.product=A100"}, ["a100-tainted"]),
        ({"extended_resource": "nvidia.com/gpu"}, ["a100-tainted", "h100-1"]),
        ({"extended_resource": "xilinx.com/fpga"}, ["fpga-soft"]),
        ({"schedulable": "yes"}, ["cpu-1", "fpga-soft", "h100-1"]),
        ({"schedulable": "no"}, ["a100-tainted", "cpu-cordoned", "cpu-draining"]),
        ({"taint": "nvidia.com/gpu"}, ["a100-tainted"]),
        ({"taint": "dedicated"}, ["fpga-soft"]),
        ({"ready": "false"}, ["cpu-draining"]),
        (
            {"ready": "true", "label": "team=ml", "schedulable": "yes", "extended_resource": "nvidia.com/gpu"},
            ["h100-1"],
        ),
    ],
)
def test_node_filters(client: Client, member: User, fleet: Cluster, params: dict, expected: list[str]) -> None:
    client.force_login(member)
    response = client.get(reverse("inventory:node_list"), params, headers=HTMX)
    assert response.status_code == 200
    assert names(response) == expected


def test_cluster_filter_and_extended_resource_choices(client: Client, member: User, fleet: Cluster) -> None:
    client.force_login(member)
    response = client.get(reverse("inventory:node_list"), {"cluster": fleet.pk})
    assert "fpga-soft" not in names(response)
    assert len(names(response)) == 5
    choices = [value for value, _label in response.context["filter"].form.fields["extended_resource"].choices]
    assert choices == ["", "nvidia.com/gpu", "xilinx.com/fpga"]


def test_node_row_shows_gpu_product_and_reduced_allocatable(client: Client, member: User) -> None:
    NodeFactory(name="degraded", allocatable={"cpu": "190", "nvidia.com/gpu": "7"})
    client.force_login(member)
    html = client.get(reverse("inventory:node_list")).content.decode()
    assert "NVIDIA-H100-80GB-HBM3" in html
    assert 'class="chip reduced"' in html
    assert "nvidia.com/gpu <b>8 / 7</b>" in html


def test_node_list_query_count_does_not_grow_with_rows(
    client: Client, member: User, django_assert_max_num_queries
) -> None:
    for cluster in ClusterFactory.create_batch(3):
        NodeFactory.create_batch(15, cluster=cluster)
    client.force_login(member)
    client.get(reverse("inventory:node_list"))  # warm the session
    with django_assert_max_num_queries(8):
        response = client.get(reverse("inventory:node_list"), {"label": "nvidia.com/gpu.product"})
    assert len(response.context["page_obj"]) == 45


# Node detail ------------------------------------------------------------------------------------------------------


def test_node_detail_shows_capacity_pods_conditions_and_issues(client: Client, member: User, member_owns) -> None:
    node = NodeFactory(name="gpu-x", allocatable={"cpu": "190", "nvidia.com/gpu": "7"}, issues=["capacity.foo: bad"])
    member_owns(node.cluster, "team-a")
    PodFactory(cluster=node.cluster, node_name="gpu-x", namespace="team-a", name="train-1")
    PodFactory(cluster=node.cluster, node_name="gpu-x", name="gone", deleted_at=timezone.now())
    PodFactory(cluster=node.cluster, node_name="elsewhere", name="not-here")
    PodFactory(node_name="gpu-x", name="other-cluster")  # same node name in another cluster
    client.force_login(member)
    response = client.get(node.get_absolute_url())
    html = response.content.decode()
    assert [p.name for p in response.context["pods"]] == ["train-1"]
    assert "KubeletReady" in html
    assert "capacity.foo: bad" in html
    assert '<tr class="reduced"><td>nvidia.com/gpu</td><td class="num">8</td><td class="num">7</td></tr>' in html
    assert reverse("inventory:node_list") in html


# Clusters and sync-state polling -------------------------------------------------------------------------------------


def test_sync_state_fragment_polls_while_listing(client: Client, member: User) -> None:
    cluster = ClusterFactory()
    state = SyncStateFactory(cluster=cluster, kind="pods", phase=SyncState.Phase.LISTING, listed_count=3, list_total=9)
    client.force_login(member)
    url = reverse("inventory:cluster_sync_state", kwargs={"pk": cluster.pk})
    listing = client.get(url, headers=HTMX)
    assert listing.status_code == 200
    assert b'hx-trigger="every 2s"' in listing.content
    assert b'<progress max="9" value="3">' in listing.content

    SyncState.objects.filter(pk=state.pk).update(phase=SyncState.Phase.WATCHING)
    done = client.get(url, headers=HTMX)
    assert done.status_code == 286
    assert b"every 2s" not in done.content
    assert b"<progress" not in done.content
    assert b"watching" in done.content


def test_cluster_list_shows_progress_and_table(client: Client, member: User) -> None:
    busy, quiet = ClusterFactory(name="busy"), ClusterFactory(name="quiet")
    SyncStateFactory(cluster=busy, kind="nodes", phase=SyncState.Phase.LISTING, listed_count=5, list_total=50)
    SyncStateFactory(
        cluster=quiet,
        kind="nodes",
        phase=SyncState.Phase.ERROR,
        relists=4,
        resource_version="777",
        last_error="boom " * 100,
    )
    NodeFactory(cluster=quiet)
    NodeFactory(cluster=quiet, deleted_at=timezone.now())
    client.force_login(member)
    response = client.get(reverse("inventory:cluster_list"))
    html = response.content.decode()
    assert html.count('hx-trigger="every 2s"') == 1
    assert '<progress max="50" value="5">' in html
    assert "777" in html
    assert "boom boom" in html
    assert "boom…</span>" in html
    quiet_rows = {row.kind: row for row in response.context["overview"][1].rows}
    assert (quiet_rows["nodes"].live, quiet_rows["nodes"].tombstoned, quiet_rows["nodes"].state.relists) == (1, 1, 4)
    assert quiet_rows["pods"].phase == "never"


def test_cluster_detail_lists_issues_and_counts(client: Client, member: User) -> None:
    cluster = ClusterFactory()
    SyncIssue.objects.create(cluster=cluster, kind="pods", name="weird", namespace="ns", error="no uid")
    NodeFactory(cluster=cluster, deleted_at=timezone.now())
    client.force_login(member)
    response = client.get(cluster.get_absolute_url())
    assert b"no uid" in response.content
    assert b"ns/weird" in response.content
    assert {r.kind: r.tombstoned for r in response.context["sync"].rows}["nodes"] == 1


# Secrets and escaping ---------------------------------------------------------------------------------------------


def test_kubeconfig_never_rendered(client: Client, platform_admin: User, world) -> None:
    client.force_login(platform_admin)
    urls = [
        *page_urls(world),
        reverse("admin:inventory_cluster_changelist"),
        reverse("admin:inventory_cluster_change", args=[world["cluster"].pk]),
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
        assert SECRET not in response.content.decode(), url


def test_hostile_strings_are_escaped(client: Client, member: User) -> None:
    evil = "<script>alert(1)</script>"
    cluster = ClusterFactory(name="evil-cluster", description=evil)
    SyncStateFactory(cluster=cluster, last_error=evil, phase=SyncState.Phase.ERROR)
    node = NodeFactory(
        cluster=cluster,
        name="evil-node",
        labels={"x": evil, evil: "v"},
        taints=[{"key": "k", "value": evil, "effect": "NoSchedule"}],
        conditions=[{"type": "Ready", "status": "False", "reason": evil, "message": evil}],
        issues=[evil],
    )
    client.force_login(member)
    for url in [
        reverse("inventory:node_list"),
        node.get_absolute_url(),
        reverse("inventory:cluster_list"),
        cluster.get_absolute_url(),
    ]:
        html = client.get(url).content.decode()
        assert "<script>alert(1)" not in html, url
        assert "&lt;script&gt;alert(1)" in html, url


# Admin -------------------------------------------------------------------------------------------------------------


def test_admin_keeps_kubeconfig_when_left_empty(client: Client, platform_admin: User) -> None:
    cluster = ClusterFactory(name="adm", kubeconfig=_kubeconfig("x", SECRET))
    client.force_login(platform_admin)
    url = reverse("admin:inventory_cluster_change", args=[cluster.pk])
    assert "••• (set)" in client.get(url).content.decode()
    data = {
        "name": "adm",
        "description": "changed",
        "connection": "kubeconfig",
        "kubeconfig": "",
        "kubeconfig_path": "",
        "context": "",
        "sync_enabled": "on",
    }
    assert client.post(url, data).status_code == 302
    cluster.refresh_from_db()
    assert cluster.description == "changed"
    assert SECRET in cluster.kubeconfig

    assert client.post(url, {**data, "kubeconfig": _kubeconfig("y", "other-token")}).status_code == 302
    cluster.refresh_from_db()
    assert cluster.kubeconfig == _kubeconfig("y", "other-token")

    bad = client.post(url, {**data, "kubeconfig": "not: [valid"})
    assert bad.status_code == 200
    assert b"not valid YAML" in bad.content
    bomb = "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nclusters: [*b]\n"
    refused = client.post(url, {**data, "kubeconfig": bomb})
    assert refused.status_code == 200
    assert b"kubeconfig refused (yaml-anchor)" in refused.content  # the hardened reader: no aliases


def test_parse_kubeconfig_refuses_aliases_depth_and_several_documents() -> None:
    from inventory.errors import ClusterConfigError
    from inventory.services.clients import parse_kubeconfig

    valid = ("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://k:6443'}}]\n"
             "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
             "current-context: x\n")
    assert parse_kubeconfig(valid)["clusters"] == [{"name": "c", "cluster": {"server": "https://k:6443"}}]
    for text in ("base: &x {name: c}\nclusters: [*x]\n", "clusters: " + "[" * 200 + "]" * 200 + "\n",
                 "clusters: [{name: c}]\n---\nclusters: [{name: d}]\n"):
        with pytest.raises(ClusterConfigError, match="refused"):
            parse_kubeconfig(text)


@pytest.mark.parametrize("model", ["syncstate", "node", "pod", "event", "resourceslice", "namespace"])
def test_admin_mirrored_models_are_read_only(client: Client, platform_admin: User, model: str) -> None:
    client.force_login(platform_admin)
    assert client.get(reverse(f"admin:inventory_{model}_changelist")).status_code == 200
    assert client.get(reverse(f"admin:inventory_{model}_add")).status_code == 403


def test_node_model_is_unchanged_by_views(client: Client, member: User) -> None:
    node = NodeFactory()
    client.force_login(member)
    client.get(node.get_absolute_url())
    assert Node.objects.get(pk=node.pk).updated_at == node.updated_at


def test_cluster_list_query_count_is_constant(client: Client, member: User, django_assert_max_num_queries) -> None:
    # session + user + count + page + sync states + one grouped count per synced kind, whatever the clusters.
    from inventory.kinds import SYNCED_KINDS

    for cluster in ClusterFactory.create_batch(6):
        NodeFactory.create_batch(3, cluster=cluster)
        SyncStateFactory(cluster=cluster, kind="nodes")
    client.force_login(member)
    with django_assert_max_num_queries(5 + len(SYNCED_KINDS)):
        response = client.get(reverse("inventory:cluster_list"))
    assert len(response.context["overview"]) == 6
