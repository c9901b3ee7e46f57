"""Discovery on the demo scenario: one proposal per distinct unit; curated entries are never overwritten."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from catalog.models import Lifecycle, Offering
from catalog.services.discovery import discovery_run, proposal_decide
from catalog.services.offerings import offering_update

pytestmark = pytest.mark.slow

# (unit kind, how requested, product/profile): what the demo's inventory sells.
EXPECTED_DEVICE_PLUGIN = {
    ("whole", "nvidia.com/gpu", "NVIDIA-H100-80GB-HBM3"),
    ("whole", "nvidia.com/gpu", "NVIDIA-A100-SXM4-40GB"),
    ("whole", "nvidia.com/gpu", "NVIDIA-H200"),
    ("mig", "nvidia.com/mig-1g.10gb", "NVIDIA-A100-SXM4-80GB"),
    ("mig", "nvidia.com/mig-2g.20gb", "NVIDIA-A100-SXM4-80GB"),
    ("mig", "nvidia.com/mig-3g.40gb", "NVIDIA-A100-SXM4-80GB"),
    # MIG single strategy: the slices are nvidia.com/gpu on nodes whose product names the profile.
    ("mig", "nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"),
    ("time-slicing", "nvidia.com/gpu", "Tesla-T4-SHARED"),
    ("mps", "nvidia.com/gpu", "NVIDIA-L4-SHARED"),
}


def test_discovery_proposes_each_unit_once_and_respects_curation(demo_cluster, platform_admin) -> None:
    counts = discovery_run(actor=platform_admin)
    proposals = list(Offering.objects.proposals())
    assert counts["created"] == len(proposals) > 0
    device_plugin = {(o.unit_kind, o.resource_name, o.node_selector.get("nvidia.com/gpu.product"))
                     for o in proposals if not o.is_dra}
    assert device_plugin == EXPECTED_DEVICE_PLUGIN
    t4 = next(o for o in proposals if o.unit_kind == "time-slicing")
    assert (t4.units_per_card, t4.isolation) == (4, "none")  # a replica is a quarter-card ticket, not a card
    single = next(o for o in proposals if o.unit_kind == "mig" and o.resource_name == "nvidia.com/gpu")
    assert (single.units_per_card, single.memory_mib, single.isolation, single.name) == (
        7, 9984, "hardware", "NVIDIA-A100-SXM4-80GB — MIG slice (1g.10gb, single strategy)")
    dra = {(o.unit_kind, o.device_class_name, o.cel_selector) for o in proposals if o.is_dra}
    assert ("dra-device", "gpu.nvidia.com",
            'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"') in dra
    assert any(kind == "dra-partition" and 'profile == "1g.10gb"' in cel for kind, _, cel in dra)
    # Every proposal's selector really matches something (they come from the inventory).
    assert AuditEvent.objects.filter(verb="offering.proposed").count() == len(proposals)

    # Running again creates nothing new.
    assert discovery_run()["created"] == 0

    # Curate: accept one and edit it, dismiss another; discovery leaves both alone from now on.
    accepted = proposal_decide(actor=platform_admin, offering_id=t4.pk, accept=True)
    offering_update(actor=platform_admin, offering_id=accepted.pk, data={"name": "T4 quarter card", "memory_mib": 1})
    dismissed = next(o for o in proposals if o.unit_kind == "mps")
    proposal_decide(actor=platform_admin, offering_id=dismissed.pk, accept=False)
    again = discovery_run()
    assert again["created"] == 0
    accepted.refresh_from_db()
    assert (accepted.name, accepted.memory_mib, accepted.lifecycle) == ("T4 quarter card", 1, Lifecycle.ACTIVE)
    dismissed.refresh_from_db()
    assert dismissed.lifecycle == Lifecycle.DISMISSED
    assert not Offering.objects.browsable().filter(pk=dismissed.pk).exists()
