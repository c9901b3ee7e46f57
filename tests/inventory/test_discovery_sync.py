"""Discovery decides what is synced: legacy clusters (no DRA, DRA v1beta1 / v1beta2 only, no events.k8s.io) sync
without errors, at the best served version, converted to the v1 shape; unserved kinds are a stated state."""

from __future__ import annotations

import io
import threading

import pytest
import redis
import yaml
from django.conf import settings
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from inventory.leases import lease_backend
from inventory.models import Cluster, Device, ResourceClaim, ResourceSlice, SyncState
from inventory.services.clients import client_for
from inventory.services.clusters import cluster_register
from inventory.services.sync import kind_sync_window, sync_state_for
from kubesim import Simulator
from tests.conftest import live_cluster

pytestmark = pytest.mark.django_db(transaction=True)

DRA_KINDS = ("resourceslices", "deviceclasses", "resourceclaims", "resourceclaimtemplates")


def _sync_command(name: str) -> str:
    out = io.StringIO()
    call_command("sync", "--cluster", name, "--once", stdout=out)  # raises CommandError (exit 1) on failure
    return out.getvalue()


@pytest.fixture
def served(request):
    """A scenario served and registered (not synced yet): (sim, cluster)."""
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    scenario, api = request.param
    with Simulator(scenario=scenario, api=api, port=0) as sim:
        cluster = cluster_register(name=scenario, kubeconfig=yaml.safe_dump(sim.kubeconfig()))
        yield sim, cluster


@pytest.mark.parametrize("served", [("legacy-no-dra", None)], indirect=True)
def test_sync_once_on_a_cluster_without_dra_exits_0_and_says_what_it_skipped(served, platform_admin):
    _, cluster = served
    output = _sync_command(cluster.name)
    for kind in DRA_KINDS:
        assert f"{kind:<24} skipped: DRA not available on this cluster (Kubernetes 1.31)" in output
    assert "nodes" in output
    states = {s.kind: s for s in SyncState.objects.filter(cluster=cluster)}
    for kind in DRA_KINDS:
        assert states[kind].phase == SyncState.Phase.UNSERVED
        assert states[kind].unavailable_reason == "DRA not available on this cluster (Kubernetes 1.31)"
        assert states[kind].last_error == ""
    assert states["nodes"].served_version == "v1"
    cluster.refresh_from_db()
    assert cluster.server_version == "v1.31.4"
    api = APIClient()
    api.force_authenticate(platform_admin)
    listed = api.get(reverse("inventory-api:cluster-detail", kwargs={"pk": cluster.pk})).json()["sync_states"]
    by_kind = {s["kind"]: s for s in listed}
    assert by_kind["resourceslices"]["phase"] == "unserved"
    assert by_kind["resourceslices"]["unavailable_reason"] == "DRA not available on this cluster (Kubernetes 1.31)"
    assert by_kind["pods"]["served_version"] == "v1"
    assert Device.objects.filter(cluster=cluster, path="device-plugin").exists()


@pytest.mark.parametrize("served", [("legacy-no-dra", "no-admission-policies")], indirect=True)
def test_sync_once_without_admission_policies(served):
    _, cluster = served
    output = _sync_command(cluster.name)
    assert ("validatingadmissionpolicies skipped: ValidatingAdmissionPolicy admissionregistration.k8s.io/v1 not "
            "served on this cluster (Kubernetes 1.29); it needs Kubernetes 1.30 or newer") in output


def _devices(cluster: Cluster) -> list[tuple]:
    return sorted(
        Device.objects.filter(cluster=cluster, path="dra").values_list(
            "key", "node_name", "model", "memory_mib", "in_use", "free", "health", "claim_name", "attributes",
            "capacities", "consumes_counters",
        )
    )


@pytest.mark.slow  # one live legacy cluster per API profile (about 3 s each)
@pytest.mark.parametrize(("scenario", "version"), [("legacy-dra-v1beta1", "v1beta1"), ("legacy-dra-v1beta2", "v1beta2")])
def test_older_dra_versions_sync_converted_and_derive_like_v1(scenario, version):
    with live_cluster(scenario, name="old") as (_, old):
        states = {s.kind: s for s in SyncState.objects.filter(cluster=old)}
        for kind in DRA_KINDS:
            assert states[kind].served_version == f"resource.k8s.io/{version}"
            assert states[kind].phase != SyncState.Phase.UNSERVED
        slices = list(ResourceSlice.objects.filter(cluster=old).exclude(device_count=0))
        assert slices
        for row in slices:
            assert row.served_raw["apiVersion"] == f"resource.k8s.io/{version}"
            assert row.raw["apiVersion"] == "resource.k8s.io/v1"
            device = row.raw["spec"]["devices"][0]
            assert "attributes" in device
            assert "basic" not in device
            if version == "v1beta1":
                assert "basic" in row.served_raw["spec"]["devices"][0]
        claim = ResourceClaim.objects.get(cluster=old, name="gpu-health-probe")
        assert claim.raw["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] is True
        old_devices = _devices(old)
    assert old_devices
    # the same scenario served at v1: the portal derives exactly the same devices
    with Simulator(scenario=scenario, api="current", port=0) as sim:
        current = cluster_register(name="current", kubeconfig=yaml.safe_dump(sim.kubeconfig()))
        _sync_command("current")
        for kind in DRA_KINDS:
            assert SyncState.objects.get(cluster=current, kind=kind).served_version == "resource.k8s.io/v1"
        assert not ResourceSlice.objects.filter(cluster=current, served_raw__isnull=False).exists()
        assert [d[1:] for d in _devices(current)] == [d[1:] for d in old_devices]


@pytest.mark.parametrize("served", [("legacy-no-events", None)], indirect=True)
def test_cluster_without_events_api_syncs_core_events(served, platform_admin, client):
    _, cluster = served
    output = _sync_command(cluster.name)
    skipped = [line for line in output.splitlines() if "skipped" in line]
    assert skipped
    assert all("Kueue is not installed" in line for line in skipped)  # the only optional group this scenario lacks
    assert SyncState.objects.get(cluster=cluster, kind="events").served_version == "v1"
    client.force_login(platform_admin)
    page = client.get(reverse("inventory:cluster_detail", args=[cluster.pk])).content.decode()
    assert "events.k8s.io not served on this cluster (Kubernetes 1.35); Events are read from core/v1" in page


@pytest.mark.slow  # one live cluster per API profile (about 2 s each)
@pytest.mark.parametrize(
    ("served", "expected"),
    [
        (("legacy-no-dra", None), "DRA not available on this cluster (Kubernetes 1.31)"),
        (("legacy-dra-v1beta1", None), "ResourceSlice served as v1beta1"),
        (("legacy-dra-v1beta2", None), "ResourceSlice served as v1beta2"),
    ],
    indirect=["served"],
)
def test_cluster_page_states_what_is_served(served, expected, member, client):
    _, cluster = served
    client.force_login(member)
    url = reverse("inventory:cluster_detail", args=[cluster.pk])
    assert "Not discovered yet" in client.get(url).content.decode()
    _sync_command(cluster.name)
    response = client.get(url)
    assert response.status_code == 200
    assert expected in response.content.decode()


def _window(cluster: Cluster, kind: str, seconds: float):
    state = sync_state_for(cluster_id=cluster.pk, kind=kind)
    lease = lease_backend().acquire(state, 30)
    client = client_for(cluster)
    try:
        return kind_sync_window(cluster_id=cluster.pk, kind=kind, client=client, lease=lease, window_seconds=seconds)
    finally:
        client.close()
        lease.release()


@pytest.mark.slow  # waits for discovery to change (about 3.5 s)
@pytest.mark.parametrize("served", [("legacy-dra-v1beta1", None)], indirect=True)
def test_watcher_of_an_unserved_kind_sleeps_until_discovery_changes(served, settings):
    sim, cluster = served
    sim.serve_api("no-dra")
    settings.PORTAL_UNSERVED_RECHECK_SECONDS = 0.3
    # the objects are stored but the 1.31 control plane does not serve them: the watcher records the state, no error
    result = _window(cluster, "resourceslices", 1.0)
    assert result.lists == []
    assert result.errors == []
    state = SyncState.objects.get(cluster=cluster, kind="resourceslices")
    assert state.phase == SyncState.Phase.UNSERVED
    assert state.unavailable_reason == "DRA not available on this cluster (Kubernetes 1.31)"
    # the control plane is upgraded to 1.32 while the watcher sleeps: it lists at v1beta1 within its window
    threading.Timer(0.5, sim.serve_api, args=("dra-v1beta1",)).start()
    result = _window(cluster, "resourceslices", 2.0)
    assert len(result.lists) == 1
    assert result.lists[0].count == ResourceSlice.objects.filter(cluster=cluster).count() > 0
    state.refresh_from_db()
    assert state.served_version == "resource.k8s.io/v1beta1"
    assert state.unavailable_reason == ""


@pytest.mark.slow  # watch recovery with real waits (about 3.5 s)
@pytest.mark.parametrize("served", [("legacy-dra-v1beta1", None)], indirect=True)
def test_a_404_rereads_discovery_and_relists_at_the_new_version(served):
    sim, cluster = served
    _sync_command(cluster.name)
    assert SyncState.objects.get(cluster=cluster, kind="resourceclaims").served_version.endswith("/v1beta1")
    sim.serve_api("current")  # upgraded to 1.35: v1beta1 is gone, v1 is served
    result = _window(cluster, "resourceclaims", 2.0)
    assert any("404" in error for error in result.errors)
    assert len(result.lists) == 1
    state = SyncState.objects.get(cluster=cluster, kind="resourceclaims")
    assert state.served_version == "resource.k8s.io/v1"
    assert not ResourceClaim.objects.filter(cluster=cluster, deleted_at__isnull=True, served_raw__isnull=False).exists()
