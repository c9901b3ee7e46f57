"""Accelerator inventory pages: permission matrix, htmx partials, capacity filters, redaction, escaping, N+1 guards."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from inventory.models import Device, Finding, Health, Mode, Path
from inventory.scoping import NamespaceScope, tenancy_override
from tests.inventory.factories import (
    GPU_UUID,
    PCI_BUS_ID,
    AcceleratorPodFactory,
    ClusterFactory,
    DraDeviceFactory,
    FindingFactory,
    NodeFactory,
    PluginDeviceFactory,
    PodFactory,
    TimeSlicedDeviceFactory,
)

pytestmark = pytest.mark.django_db

ROLES = ["member", "lead", "approver", "security_approver", "platform_admin", "finance"]
PLATFORM = ["approver", "security_approver", "platform_admin"]
TENANT_AND_FINANCE = ["member", "lead", "finance"]
HTMX = {"HX-Request": "true"}
EVIL = "<script>alert(1)</script>"
LIST_PAGES = ["inventory:overview", "inventory:capacity", "inventory:pending_pods", "inventory:findings"]


@pytest.fixture
def world() -> dict[str, object]:
    cluster = ClusterFactory(name="lab")
    node = NodeFactory(cluster=cluster, name="gpu-a")
    plugin = PluginDeviceFactory(cluster=cluster, node_name="gpu-a")
    dra = DraDeviceFactory(cluster=cluster, node_name="gpu-a")
    AcceleratorPodFactory(cluster=cluster)
    FindingFactory(cluster=cluster, node_name="gpu-a")
    return {"cluster": cluster, "node": node, "plugin": plugin, "dra": dra}


def page_urls(world: dict[str, object]) -> list[str]:
    return [
        *(reverse(name) for name in LIST_PAGES),
        reverse("inventory:node_devices", kwargs={"pk": world["node"].pk}),
        world["plugin"].get_absolute_url(),
        world["dra"].get_absolute_url(),
    ]


def keys(response) -> list[str]:
    return sorted(device.key for device in response.context["page_obj"])


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


@pytest.mark.parametrize("name", ["inventory:device_detail", "inventory:node_devices"])
def test_unknown_pk_is_404(client: Client, member: User, name: str) -> None:
    client.force_login(member)
    assert client.get(reverse(name, kwargs={"pk": 999_999})).status_code == 404


def test_catalog_then_overview_lead_the_nav(client: Client, member: User) -> None:
    client.force_login(member)
    html = client.get(reverse("inventory:node_list")).content.decode()
    nav = html[html.index('id="site-nav"') :]
    links = [chunk.split('"')[1] for chunk in nav.split("<a href=")[1:5]]
    assert links == [reverse("catalog:offering_list"), reverse("catalog:generate"), reverse("catalog:validate"),
                     reverse("inventory:overview")]


# htmx partials ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LIST_PAGES)
def test_htmx_gets_only_the_results_partial(client: Client, member: User, world, name: str) -> None:
    client.force_login(member)
    partial = client.get(reverse(name), headers=HTMX)
    assert b"<html" not in partial.content
    assert b'id="results"' in partial.content
    assert "HX-Request" in partial["Vary"]
    full = client.get(reverse(name))
    assert b"<html" in full.content
    assert b'id="results"' in full.content


@pytest.mark.parametrize("name", ["inventory:capacity", "inventory:pending_pods", "inventory:findings"])
def test_filter_forms_are_wired_for_htmx(client: Client, member: User, name: str) -> None:
    client.force_login(member)
    html = client.get(reverse(name)).content.decode()
    for attr in ['hx-target="#results"', 'hx-trigger="input delay:300ms, change"', 'hx-push-url="true"']:
        assert attr in html


def test_node_detail_lazy_loads_the_device_panel(client: Client, member: User, world) -> None:
    client.force_login(member)
    node = world["node"]
    html = client.get(node.get_absolute_url()).content.decode()
    panel_url = reverse("inventory:node_devices", kwargs={"pk": node.pk})
    assert f'hx-get="{panel_url}" hx-trigger="load"' in html
    panel = client.get(panel_url, headers=HTMX)
    assert b"<html" not in panel.content
    assert {d.key for d in panel.context["devices"]} == {world["plugin"].key, world["dra"].key}


def test_node_panel_shows_usage_and_holder_claim(client: Client, member: User) -> None:
    cluster = ClusterFactory()
    node = NodeFactory(cluster=cluster, name="n1")
    DraDeviceFactory(
        cluster=cluster,
        node_name="n1",
        in_use=1,
        free=0,
        claim_namespace="team-a",
        claim_name="train-claim",
        reserved_for=[{"name": "p", "uid": "u", "resource": "pods"}],
    )
    PluginDeviceFactory(cluster=cluster, node_name="other-node")
    PluginDeviceFactory(node_name="n1")  # same node name, other cluster
    client.force_login(member)
    own = NamespaceScope(pairs=frozenset({(cluster.pk, "team-a")}))  # the member's tenant owns team-a
    with tenancy_override(scope=lambda user: own, targets=lambda user, c: ["team-a"]):
        response = client.get(reverse("inventory:node_devices", kwargs={"pk": node.pk}))
    assert len(response.context["devices"]) == 1
    assert "team-a/train-claim" in response.content.decode()
    other = NamespaceScope(pairs=frozenset({(cluster.pk, "team-b")}))  # a member of another tenant
    with tenancy_override(scope=lambda user: other, targets=lambda user, c: ["team-b"]):
        elsewhere = client.get(reverse("inventory:node_devices", kwargs={"pk": node.pk})).content.decode()
    assert "train-claim" not in elsewhere
    assert "in use (another tenant)" in elsewhere


# Overview ------------------------------------------------------------------------------------------------------------


def test_overview_counts_units_and_cards_per_mode_without_mixing(client: Client, member: User) -> None:
    cluster = ClusterFactory(name="lab")
    TimeSlicedDeviceFactory(cluster=cluster, node_name="t4-a")  # 4 cards, 16 units, 5 used
    PluginDeviceFactory(cluster=cluster, node_name="h100-a")  # 8 cards, 8 units, 2 used
    PluginDeviceFactory(cluster=cluster, node_name="h100-b", allocatable=7, in_use=0)  # 1 unhealthy
    DraDeviceFactory(cluster=cluster, pool_complete=False, health=Health.UNKNOWN, free=0)
    client.force_login(member)
    response = client.get(reverse("inventory:overview"))
    ((_cluster, rows),) = response.context["clusters"]
    by_mode = {row.mode: row for row in rows}
    ts = by_mode[Mode.TIME_SLICING]
    assert (ts.cards, ts.units, ts.in_use, ts.free, ts.largest_placeable) == (4, 16, 5, 11, 11)
    whole = by_mode[Mode.WHOLE]
    assert (whole.cards, whole.units, whole.allocatable, whole.free, whole.unhealthy) == (16, 16, 15, 13, 1)
    assert whole.largest_placeable == 7
    assert by_mode[Mode.DRA_DEVICE].unknown == 1
    html = response.content.decode()
    assert "nvidia.com/gpu (time-slice replica, 4 per card)" in html
    assert "nvidia.com/gpu (whole card)" in html
    link = (
        f"{reverse('inventory:capacity')}?cluster={cluster.pk}&amp;model=Tesla-T4&amp;mode=time-slicing"
        "&amp;unit=nvidia.com/gpu"
    )
    assert link in html


def test_overview_link_filters_the_capacity_view(client: Client, member: User) -> None:
    cluster = ClusterFactory()
    ts = TimeSlicedDeviceFactory(cluster=cluster)
    PluginDeviceFactory(cluster=cluster)
    client.force_login(member)
    params = {"cluster": cluster.pk, "model": "Tesla-T4", "mode": "time-slicing", "unit": "nvidia.com/gpu"}
    assert keys(client.get(reverse("inventory:capacity"), params)) == [ts.key]


# Capacity filters -------------------------------------------------------------------------------------------------


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
            mig_profile="1g.10gb",
            memory_mib=9728,
            model="NVIDIA-A100",
            node_pool="mig-pool",
            capacity=14,
            allocatable=14,
            in_use=0,
            cards=2,
        ),
        "dra": DraDeviceFactory(cluster=lab, node_name="dra-1"),
        "dra-sick": DraDeviceFactory(
            cluster=other, node_name="dra-2", health=Health.UNHEALTHY, allocatable=0, free=0, unhealthy=1
        ),
    }


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"model": "Tesla-T4"}, ["t4"]),
        ({"model": "NVIDIA-H100-80GB-HBM3"}, ["h100", "h100-full"]),
        ({"memory_min": "80000"}, ["dra", "dra-sick", "h100", "h100-full"]),
        ({"memory_min": "81800"}, ["dra", "dra-sick"]),
        ({"mode": "mig"}, ["mig"]),
        ({"mode": "time-slicing"}, ["t4"]),
        ({"pool": "t4-pool"}, ["t4"]),
        ({"pool": "dra-pool"}, ["dra", "dra-sick"]),
        ({"path": "dra"}, ["dra", "dra-sick"]),
        ({"path": "device-plugin"}, ["h100", "h100-full", "mig", "t4"]),
        ({"free": "true"}, ["dra", "h100", "mig", "t4"]),
        ({"free": "false"}, ["dra-sick", "h100-full"]),
        ({"health": "unhealthy"}, ["dra-sick"]),
        ({"held": "true"}, ["h100", "h100-full", "t4"]),
        ({"node": "t4-1"}, ["t4"]),
        ({"unit": "nvidia.com/mig-1g.10gb"}, ["mig"]),
        ({"path": "device-plugin", "free": "true", "memory_min": "15000", "pool": "h100-pool"}, ["h100"]),
    ],
)
def test_capacity_filters(client: Client, member: User, fleet, params: dict, expected: list[str]) -> None:
    client.force_login(member)
    response = client.get(reverse("inventory:capacity"), params, headers=HTMX)
    assert response.status_code == 200
    assert keys(response) == sorted(fleet[name].key for name in expected)


def test_capacity_cluster_filter_and_select_choices(client: Client, member: User, fleet) -> None:
    client.force_login(member)
    response = client.get(reverse("inventory:capacity"), {"cluster": fleet["mig"].cluster_id})
    assert keys(response) == sorted([fleet["mig"].key, fleet["dra-sick"].key])
    form = response.context["filter"].form
    assert [v for v, _ in form.fields["model"].choices] == [
        "",
        "NVIDIA-A100",
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-H100-80GB-HBM3",
        "Tesla-T4",
    ]
    assert [v for v, _ in form.fields["pool"].choices] == ["", "dra-pool", "h100-pool", "mig-pool", "t4-pool"]
    assert "Memory ≥ (MiB per unit)" in response.content.decode()


def test_capacity_rows_show_counts_memory_and_pool(client: Client, member: User) -> None:
    PluginDeviceFactory(node_name="h100-x", in_use=3)
    client.force_login(member)
    html = client.get(reverse("inventory:capacity")).content.decode()
    assert '<b class="has-free">5</b> / 8 / 8' in html
    assert "79.6 GiB" in html
    assert "h100-pool" in html


def test_capacity_is_paginated_and_keeps_filters(client: Client, member: User) -> None:
    cluster = ClusterFactory()
    PluginDeviceFactory.create_batch(55, cluster=cluster)
    client.force_login(member)
    response = client.get(reverse("inventory:capacity"), {"mode": "whole"}, headers=HTMX)
    assert len(response.context["page_obj"]) == 50
    assert 'hx-get="?mode=whole&amp;page=2"' in response.content.decode()


def test_invalid_filter_value_shows_errors_not_500(client: Client, member: User, fleet) -> None:
    client.force_login(member)
    response = client.get(reverse("inventory:capacity"), {"mode": "bogus"}, headers=HTMX)
    assert response.status_code == 200
    assert b'class="error"' in response.content


# Device detail ----------------------------------------------------------------------------------------------------


def test_dra_device_detail_shows_attributes_holder_and_pool(client: Client, platform_admin: User) -> None:
    device = DraDeviceFactory(
        in_use=1,
        free=0,
        claim_uid="cu-1",
        claim_namespace="team-a",
        claim_name="big-claim",
        request_name="gpu",
        admin_access=True,
        share_id="share-7",
        pool_complete=False,
        pool_generation=42,
        blocked_by="counter gpu-0-counters/memory used by gpu-0-mig-1",
        consumes_counters=[{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "10Gi"}}}],
        taints=[{"key": "maintenance", "value": "planned", "effect": "NoSchedule"}],
        reserved_for=[{"name": "trainer-0", "uid": "pod-uid-0", "resource": "pods"}],
    )
    client.force_login(platform_admin)
    html = client.get(device.get_absolute_url()).content.decode()
    for text in [
        "team-a/big-claim",
        "share-7",
        "trainer-0",
        "pod-uid-0",
        "gpu-0-counters",
        "maintenance",
        "generation 42",
        "incomplete",
        "used by gpu-0-mig-1",
        "80Gi",
        "productName",
        "570.124.6",
        GPU_UUID,
        PCI_BUS_ID,
    ]:
        assert text in html, text


def test_plugin_device_detail_lists_pods_requesting_the_resource(client: Client, member: User, member_owns) -> None:
    cluster = ClusterFactory()
    member_owns(cluster, "team-ml")
    device = TimeSlicedDeviceFactory(cluster=cluster, node_name="t4-1")
    AcceleratorPodFactory(
        cluster=cluster, node_name="t4-1", name="uses-it", stage="running", extended_requests={"nvidia.com/gpu": 2}
    )
    AcceleratorPodFactory(
        cluster=cluster, node_name="t4-1", name="other-resource", extended_requests={"nvidia.com/mig-1g.10gb": 1}
    )
    AcceleratorPodFactory(cluster=cluster, node_name="elsewhere", name="elsewhere")
    AcceleratorPodFactory(cluster=cluster, node_name="t4-1", name="deleted", deleted_at=timezone.now())
    # Served by the scheduler's generated DRA claim (DRAExtendedResource): the claim's devices hold it, not this one.
    AcceleratorPodFactory(cluster=cluster, node_name="t4-1", name="dra-backed", stage="running",
                          extended_requests={"nvidia.com/gpu": 1}, raw={"status": {"extendedResourceClaimStatus": {
                              "resourceClaimName": "dra-backed-extended-resources-x7k2p",
                              "requestMappings": [{"containerName": "main", "requestName": "container-0-request-0",
                                                   "resourceName": "nvidia.com/gpu"}]}}})
    client.force_login(member)
    response = client.get(device.get_absolute_url())
    assert [(pod.name, amount) for pod, amount in response.context["pods"]] == [("uses-it", 2)]
    html = response.content.decode()
    assert "4 per physical card" in html
    assert "Physical cards behind" in html


# Pending pods ------------------------------------------------------------------------------------------------------


def test_pending_pods_defaults_to_unscheduled_and_shows_reasons(client: Client, member: User) -> None:
    cluster = ClusterFactory()
    AcceleratorPodFactory(cluster=cluster, name="waiting")
    AcceleratorPodFactory(
        cluster=cluster,
        name="bound",
        stage="bound-not-started",
        node_name="n1",
        stage_detail="ContainerCreating: failed to inject CDI devices",
        stage_layer="runtime",
    )
    AcceleratorPodFactory(cluster=cluster, name="crashed", stage="failed-after-start", restarts=4)
    AcceleratorPodFactory(cluster=cluster, name="running", stage="running")
    PodFactory(cluster=cluster, name="cpu-only", stage="pending-unscheduled")
    client.force_login(member)
    response = client.get(reverse("inventory:pending_pods"))
    assert [p.name for p in response.context["page_obj"]] == ["waiting"]
    html = response.content.decode()
    assert '<td class="num">2</td><td>node(s) didn&#x27;t match Pod&#x27;s node affinity/selector</td>' in html
    assert "insufficient-resource" in html
    assert "1 node lacks nvidia.com/gpu" in html  # human summary
    assert "0/3 nodes are available: 1 Insufficient nvidia.com/gpu" in html  # raw beside it
    bound = client.get(reverse("inventory:pending_pods"), {"stage": "bound-not-started"}, headers=HTMX)
    assert [p.name for p in bound.context["page_obj"]] == ["bound"]
    assert "failed to inject CDI devices" in bound.content.decode()
    crashed = client.get(reverse("inventory:pending_pods"), {"stage": "failed-after-start"})
    assert [p.name for p in crashed.context["page_obj"]] == ["crashed"]
    # A stage outside the page's purpose falls back to the default tab.
    assert [
        p.name for p in client.get(reverse("inventory:pending_pods"), {"stage": "running"}).context["page_obj"]
    ] == ["waiting"]


def test_pending_pods_namespace_and_cluster_filters(client: Client, member: User) -> None:
    a, b = ClusterFactory(), ClusterFactory()
    AcceleratorPodFactory(cluster=a, namespace="team-a", name="p-a")
    AcceleratorPodFactory(cluster=b, namespace="team-b", name="p-b")
    client.force_login(member)
    url = reverse("inventory:pending_pods")
    assert [p.name for p in client.get(url, {"namespace": "team-b"}).context["page_obj"]] == ["p-b"]
    assert [p.name for p in client.get(url, {"cluster": a.pk}).context["page_obj"]] == ["p-a"]


# Findings -----------------------------------------------------------------------------------------------------------


def test_findings_filters_and_evidence(client: Client, member: User) -> None:
    a, b = ClusterFactory(), ClusterFactory()
    FindingFactory(cluster=a, subject="s1", evidence={"allocatable": 7, "capacity": 8})
    FindingFactory(cluster=a, subject="s2", kind=Finding.Kind.POOL_INCOMPLETE, severity=Finding.Severity.ERROR)
    FindingFactory(cluster=b, subject="s3", severity=Finding.Severity.INFO, kind=Finding.Kind.DEVICE_TAINTED)
    client.force_login(member)
    url = reverse("inventory:findings")
    subjects = lambda params: sorted(f.subject for f in client.get(url, params).context["page_obj"])  # noqa: E731
    assert subjects({}) == ["s1", "s2", "s3"]
    assert subjects({"cluster": a.pk}) == ["s1", "s2"]
    assert subjects({"kind": "pool-incomplete"}) == ["s2"]
    assert subjects({"severity": "info"}) == ["s3"]
    html = client.get(url, {"cluster": a.pk}).content.decode()
    assert "&quot;allocatable&quot;: 7" in html
    rows = html[html.index("<tbody"):]  # before it, the random CSRF token in hx-headers may contain "s1"
    assert rows.index(">s2<") < rows.index(">s1<")  # errors first


# Redaction ------------------------------------------------------------------------------------------------------------


def _sensitive_device() -> Device:
    return DraDeviceFactory(
        mode=Mode.DRA_PARTITION,
        parent="GPU-PARENT-aaaa-bbbb",
        attributes={
            "uuid": {"string": GPU_UUID},
            "resource.kubernetes.io/pciBusID": {"string": PCI_BUS_ID},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:17"},
            "serialNumber": {"string": "SN-1324-5678"},
            "parentUUID": {"string": "GPU-PARENT-aaaa-bbbb"},
            "productName": {"string": "NVIDIA A100"},
        },
    )


SENSITIVE_STRINGS = [GPU_UUID, PCI_BUS_ID, "pci0000:17", "SN-1324-5678", "GPU-PARENT-aaaa-bbbb"]


@pytest.mark.parametrize("role", TENANT_AND_FINANCE)
def test_tenants_and_finance_see_redacted_identifiers(client: Client, role: str, request) -> None:
    device = _sensitive_device()
    FindingFactory(cluster=device.cluster, evidence={"uuid": GPU_UUID, "devices": [{"pciBusID": PCI_BUS_ID}]})
    client.force_login(request.getfixturevalue(role))
    for url in [device.get_absolute_url(), reverse("inventory:findings")]:
        html = client.get(url).content.decode()
        for secret in SENSITIVE_STRINGS:
            assert secret not in html, (url, secret)
        assert "redacted" in html
    assert "NVIDIA A100" in client.get(device.get_absolute_url()).content.decode()


@pytest.mark.parametrize("role", PLATFORM)
def test_platform_roles_see_identifiers(client: Client, role: str, request) -> None:
    device = _sensitive_device()
    client.force_login(request.getfixturevalue(role))
    html = client.get(device.get_absolute_url()).content.decode()
    for secret in SENSITIVE_STRINGS:
        assert secret in html, secret


# Escaping -------------------------------------------------------------------------------------------------------------


def test_hostile_strings_are_escaped(client: Client, platform_admin: User) -> None:
    cluster = ClusterFactory(name="evil")
    node = NodeFactory(cluster=cluster, name="evil-node")
    device = DraDeviceFactory(
        cluster=cluster,
        node_name="evil-node",
        model=EVIL,
        node_pool=EVIL,
        blocked_by=EVIL,
        claim_name=EVIL,
        attributes={EVIL: {"string": EVIL}, "uuid": {"string": EVIL}},
        capacities={"memory": {"value": EVIL}},
        taints=[{"key": EVIL, "value": EVIL, "effect": "NoSchedule"}],
        reserved_for=[{"name": EVIL, "uid": EVIL}],
    )
    AcceleratorPodFactory(
        cluster=cluster,
        name="evil-pod",
        namespace="evil-ns",
        scheduling_message=f"0/1 nodes are available: 1 {EVIL}.",
        scheduling_reasons={"reasons": [{"count": 1, "reason": EVIL, "category": EVIL}]},
        extended_requests={EVIL: 1},
    )
    FindingFactory(cluster=cluster, message=EVIL, subject=EVIL, evidence={EVIL: EVIL})
    client.force_login(platform_admin)
    for url in [
        reverse("inventory:overview"),
        reverse("inventory:capacity"),
        reverse("inventory:pending_pods"),
        reverse("inventory:findings"),
        device.get_absolute_url(),
        reverse("inventory:node_devices", kwargs={"pk": node.pk}),
    ]:
        html = client.get(url).content.decode()
        assert "<script>alert(1)" not in html, url
        assert "&lt;script&gt;alert(1)" in html, url


# Query counts ------------------------------------------------------------------------------------------------------------


def _make_rows(count: int) -> None:
    for i in range(count):
        cluster = ClusterFactory(name=f"qc-{i % 3}")
        PluginDeviceFactory(cluster=cluster)
        TimeSlicedDeviceFactory(cluster=cluster)
        DraDeviceFactory(
            cluster=cluster,
            node_name=f"dra-{i}",
            reserved_for=[{"name": "p", "uid": "u"}],
            claim_name="c",
            claim_namespace="n",
        )
        AcceleratorPodFactory(cluster=cluster)
        FindingFactory(cluster=cluster)


@pytest.mark.parametrize("rows", [3, 15])
@pytest.mark.parametrize("name", LIST_PAGES)
def test_list_page_query_count_is_constant(
    client: Client, member: User, django_assert_max_num_queries, rows: int, name: str
) -> None:
    _make_rows(rows)
    client.force_login(member)
    client.get(reverse(name))  # warm the session
    # session + user + filter-form choices (clusters, models, pools) + count + page (+ group check for redaction)
    with django_assert_max_num_queries(9):
        response = client.get(reverse(name))
    assert response.status_code == 200


@pytest.mark.parametrize("rows", [3, 15])
def test_node_panel_and_device_detail_query_count_is_constant(
    client: Client, member: User, django_assert_max_num_queries, rows: int
) -> None:
    cluster = ClusterFactory()
    node = NodeFactory(cluster=cluster, name="busy")
    device = PluginDeviceFactory(cluster=cluster, node_name="busy")
    for _ in range(rows):
        DraDeviceFactory(cluster=cluster, node_name="busy")
        AcceleratorPodFactory(cluster=cluster, node_name="busy", stage="running")
    client.force_login(member)
    client.get(device.get_absolute_url())
    with django_assert_max_num_queries(5):
        panel = client.get(reverse("inventory:node_devices", kwargs={"pk": node.pk}))
    assert len(panel.context["devices"]) == rows + 1
    with django_assert_max_num_queries(6):
        detail = client.get(device.get_absolute_url())
    assert len(detail.context["pods"]) + detail.context["other_pods"] == rows


def test_device_paths_are_both_listed(client: Client, member: User, world) -> None:
    client.force_login(member)
    response = client.get(reverse("inventory:capacity"))
    assert {d.path for d in response.context["page_obj"]} == {Path.DRA, Path.DEVICE_PLUGIN}


@pytest.mark.parametrize("name", ["inventory:capacity", "inventory:pending_pods", "inventory:findings",
                                  "inventory:node_list"])
def test_the_cluster_filter_reads_its_choices_in_one_plain_query(client: Client, member: User, name: str) -> None:
    """No server-side cursor (DECLARE, FETCH, CLOSE: three round trips per page view) and no kubeconfig column."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    clusters = ClusterFactory.create_batch(2)
    client.force_login(member)
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse(name))
    assert response.status_code == 200
    page = response.content.decode()
    assert all(f'<option value="{cluster.pk}">{cluster.name}</option>' in page for cluster in clusters)
    statements = [q["sql"] for q in queries.captured_queries]
    assert not [sql for sql in statements if sql.lstrip().upper().startswith("DECLARE")]
    cluster_reads = [sql for sql in statements if 'FROM "inventory_cluster"' in sql]
    assert cluster_reads
    assert not [sql for sql in cluster_reads if "kubeconfig" in sql]
