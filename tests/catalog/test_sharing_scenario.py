"""End to end on kubesim's `dra-sharing` scenario, through the real sync: DeviceClasses whose opaque config time-slices
or MPS-shares the L40S cards, a config the portal cannot read, and H100s shared by consumable capacity — in the
inventory (holders, consumed/left, billed shares), the catalog (discovery, capacity), the explainer and the pages.
Numbers computed by hand from kubesim/scenarios/dra-sharing.yaml."""

from __future__ import annotations

import pytest
from django.urls import reverse

from catalog.feasibility import explain_pod
from catalog.feasibility.inventory import snapshot_for_cluster
from catalog.models import Isolation, Offering, OfferingCapacity
from catalog.services.capacity import capacity_refresh
from catalog.services.discovery import discovery_run
from inventory.models import AllocationInterval, Device, Pod
from inventory.redaction import REDACTED
from portal.tenancy.roles import Role
from tests.conftest import live_cluster, make_user
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow


@pytest.fixture
def sharing_cluster(transactional_db: None):
    with live_cluster("dra-sharing", name="dra-sharing") as (_sim, cluster):
        return cluster


def device(cluster, key: str) -> Device:
    return Device.objects.get(cluster=cluster, key=f"gpu.nvidia.com/{key}")


def test_inventory_holders_share_and_consume(sharing_cluster) -> None:
    cluster = sharing_cluster
    notebooks = device(cluster, "l40s-000/gpu-0")
    assert (notebooks.claim_name, notebooks.sharing, notebooks.sharing_detail, len(notebooks.reserved_for)) == (
        "notebooks", "time-slicing", "time-sliced (interval Long)", 2)
    mps = device(cluster, "l40s-000/gpu-1")
    assert (mps.sharing, mps.sharing_detail) == ("mps", "MPS (active threads 50%, pinned memory 20Gi)")
    assert device(cluster, "l40s-001/gpu-0").sharing == "unknown"  # newer: a config version the portal cannot read
    assert device(cluster, "l40s-001/gpu-1").sharing == ""  # free
    # h100-shared-000: three embed shares (20Gi) and rerank (15Gi asked, 20Gi by the policy) fill the 80Gi.
    full = device(cluster, "h100-shared-000/gpu-0")
    assert (full.in_use, full.free, full.holders, full.consumed_share) == (1, 0, 4, 1.0)
    assert full.consumed_capacity["memory"] | {} == {
        "value": "80Gi", "consumed": "80Gi", "left": "0", "request_policy":
        "range 10Gi..80Gi in steps of 10Gi; default 10Gi"}
    # h100-shared-001: big-share 40Gi + spare-share 10Gi (the default): 30Gi left, still free for another share.
    part = device(cluster, "h100-shared-001/gpu-0")
    assert (part.in_use, part.free, part.holders, part.consumed_share) == (1, 1, 2, 0.625)
    assert (part.consumed_capacity["memory"]["consumed"], part.consumed_capacity["memory"]["left"]) == ("50Gi",
                                                                                                      "30Gi")
    shares = {i.name: i.share for i in AllocationInterval.objects.filter(cluster=cluster, holder_kind="claim")}
    assert (shares["big-share"], shares["spare-share"], shares["notebooks"]) == (0.5, 0.125, 1.0)
    assert sorted(v for k, v in shares.items() if k.startswith(("embed-", "rerank-"))) == [0.25] * 4


def test_catalog_states_isolation_and_counts_shared_devices(sharing_cluster, platform_admin) -> None:
    discovery_run(actor=platform_admin)
    proposals = {o.device_class_name: o for o in Offering.objects.proposals() if o.is_dra}
    assert {name: o.isolation for name, o in proposals.items()} == {
        "gpu.nvidia.com": Isolation.EXCLUSIVE, "timeslice.gpu.nvidia.com": Isolation.NONE,
        "mps.gpu.nvidia.com": Isolation.LIMITED, "newer.gpu.nvidia.com": Isolation.UNKNOWN,
        "shared.gpu.nvidia.com": Isolation.UNKNOWN,
    }
    assert proposals["mps.gpu.nvidia.com"].memory_mib == 20 * 1024
    assert proposals["shared.gpu.nvidia.com"].compute_share == (
        "shared by capacity: memory range 10Gi..80Gi in steps of 10Gi; default 10Gi")
    capacity_refresh(clusters=[sharing_cluster])
    shared = OfferingCapacity.objects.get(offering=proposals["shared.gpu.nvidia.com"])
    # h100-shared-000 is full (held); h100-shared-001 still takes a share (free, though two claims hold shares):
    # every unit is one of free, held, unknown, and no unit is blocked.
    assert (shared.total_units, shared.held, shared.free, shared.blocked) == (2, 1, 1, 0)


def test_explainer_says_how_much_capacity_is_left(sharing_cluster) -> None:
    pod = Pod.objects.get(cluster=sharing_cluster, name__startswith="finetune-")
    explanation = explain_pod(pod.raw, snapshot_for_cluster(sharing_cluster))
    assert not explanation.schedulable
    details = {v.name: v.details for v in explanation.nodes if v.name.startswith("h100-shared")}
    assert details == {
        "h100-shared-000": ["request gpu: 1 device needed, 1 match the selectors, 0 free",
                            "  gpu-0: capacity memory: requested 70Gi, 0 left of 80Gi (shared by 4 claims)"],
        "h100-shared-001": ["request gpu: 1 device needed, 1 match the selectors, 0 free",
                            "  gpu-0: capacity memory: requested 70Gi, 30Gi left of 80Gi (shared by 2 claims)"],
    }


def test_device_page_and_api_show_sharing_and_consumed_capacity(sharing_cluster, client, platform_admin) -> None:
    client.force_login(platform_admin)
    part = device(sharing_cluster, "h100-shared-001/gpu-0")
    body = client.get(reverse("inventory:device_detail", kwargs={"pk": part.pk})).content.decode()
    assert 'data-testid="consumed-capacity"' in body
    assert "<td class=\"num\">50Gi</td><td class=\"num\">30Gi</td>" in body
    assert "Shared by 2 claims (consumable capacity)" in body
    ts = device(sharing_cluster, "l40s-000/gpu-0")
    body = client.get(reverse("inventory:device_detail", kwargs={"pk": ts.pk})).content.decode()
    assert "Shared, not exclusively held: time-sliced (interval Long)" in body
    api = client.get(reverse("inventory-api:device-detail", kwargs={"pk": part.pk})).json()
    assert (api["holders"], api["consumed_share"], api["consumed_capacity"]["memory"]["left"]) == (2, 0.625, "30Gi")


def test_another_tenants_claim_config_is_not_shown(sharing_cluster, client) -> None:
    member = make_user("bob", Role.TENANT_MEMBER)
    give_namespaces(member, sharing_cluster, "team-a")
    client.force_login(member)
    mps = device(sharing_cluster, "l40s-000/gpu-1")  # held by team-b's inference-mps
    api = client.get(reverse("inventory-api:device-detail", kwargs={"pk": mps.pk})).json()
    assert (api["sharing"], api["claim_name"]) == ("mps", REDACTED)
    assert api["sharing_detail"] == REDACTED
    body = client.get(reverse("inventory:device_detail", kwargs={"pk": mps.pk})).content.decode()
    assert "Shared, not exclusively held: mps" in body
    assert "active threads" not in body
