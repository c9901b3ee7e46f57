"""Discovery: propose offerings from the inventory for the platform admin to curate.

One proposal per distinct sellable unit seen in the clusters:
- device plugin: (unit kind, extended resource, GPU product label) — whole cards, MIG profiles (mixed strategy:
  `nvidia.com/mig-<profile>`; single strategy: `nvidia.com/gpu` on nodes whose product label ends in
  `-MIG-<profile>`, selected by that label), time-slice replicas and MPS shares of each product;
- DRA: (unit kind, DeviceClass, product, MIG profile) for every mirrored DeviceClass whose selectors match devices.
  The unit's isolation and guarantee follow the class's opaque config (inventory/sharing.py): time-sliced, MPS
  (with its thread percentage and memory limit) or unknown — never an exclusive card when the config says
  otherwise or cannot be read; devices with `allowMultipleAllocations` are shared by capacity.

Proposals are keyed by `discovery_key`. Discovery refreshes a proposal that is still `proposed` and not curated,
never touches a curated offering (accepted, edited or created by hand) or a dismissed proposal, and skips units
that a curated offering with the same request already covers.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from typing import Any

from django.db import transaction

from audit.services import audit_record
from catalog.isolation import ISOLATION_OF
from catalog.models import DEFAULT_ISOLATION, DRA_KINDS, Isolation, Lifecycle, Offering, UnitKind
from catalog.services.matching import ClusterDevices, clusters_devices
from core.types import RequestUser
from inventory.k8s import consumable
from inventory.k8s.semantics import parse_quantity
from inventory.models import Mode
from inventory.sharing import Sharing, Strategy, class_config, sharing_for_class

logger = logging.getLogger(__name__)

PRODUCT_LABEL = "nvidia.com/gpu.product"
_SHARE = {UnitKind.TIME_SLICING: "time-slice replica", UnitKind.MPS: "MPS share", UnitKind.MIG: "MIG slice",
          UnitKind.WHOLE: "whole card", UnitKind.DRA_DEVICE: "DRA device", UnitKind.DRA_PARTITION: "DRA partition"}


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")[:80]


def _attr(device: dict[str, Any], name: str) -> Any:
    raw = (device.get("attributes") or {}).get(name)
    if not isinstance(raw, dict):
        raw = (device.get("attributes") or {}).get(f"{device.get('driver')}/{name}")
    if isinstance(raw, dict):
        for kind in ("string", "version", "int", "bool"):
            if kind in raw:
                return raw[kind]
    return None


def _cel_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _compat(devices: list[dict[str, Any]]) -> dict[str, Any]:
    """Compatibility facts every device of a proposal shares (the weakest driver/CUDA among them)."""
    from catalog.versions import parse_version

    def lowest(field: str) -> str:
        versions = [(parse_version(d[field]), d[field]) for d in devices if d.get(field)]
        versions = [v for v in versions if v[0] is not None]
        return min(versions)[1] if versions else ""

    cc = {d["compute_capability"] for d in devices if d.get("compute_capability")}
    arch = {d["architecture"].lower() for d in devices if d.get("architecture")}
    return {
        "driver_min": lowest("driver_version")[:32], "cuda_max": lowest("cuda_version")[:16],
        "compute_capability": next(iter(cc)) if len(cc) == 1 else "",
        "architecture": next(iter(arch)) if len(arch) == 1 else "",
    }


def _proposals(loaded: ClusterDevices) -> dict[str, dict[str, Any]]:
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for device in loaded.devices:
        if device["mode"] == Mode.OTHER:
            continue
        if device["path"] == "device-plugin":
            node = loaded.nodes.get(device["node_name"])
            product = (node.labels.get(PRODUCT_LABEL) if node else "") or device["model"]
            groups[("dp", device["mode"], device["resource_name"], product)].append(device)
    out: dict[str, dict[str, Any]] = {}
    for (_, mode, resource, product), devices in groups.items():
        unit = UnitKind(mode)
        first = devices[0]
        per_card = max((d["capacity"] / d["cards"] for d in devices if d["cards"]), default=1)
        key = f"dp:{mode}:{resource}:{product}"
        label = resource.split("/")[-1]
        if unit == UnitKind.MIG and not resource.startswith("nvidia.com/mig-"):
            label = f"{first['mig_profile']}, single strategy"  # nvidia.com/gpu stands for the node's MIG slices
        out[key] = {
            "slug": _slug(f"{product}-{resource.split('/')[-1]}-{mode}"),
            "name": f"{first['model'] or product} — {_SHARE[unit]}" + (f" ({label})" if unit == UnitKind.MIG else ""),
            "unit_kind": mode, "model": first["model"], "resource_name": resource,
            "node_selector": {PRODUCT_LABEL: product} if product else {},
            "memory_mib": first["memory_mib"], "units_per_card": round(per_card) or 1,
            "isolation": DEFAULT_ISOLATION[unit],
            "compute_share": {"whole": "1 card", "time-slicing": f"time-shared, 1 of {round(per_card)} replicas",
                              "mps": f"MPS, 1 of {round(per_card)} shares"}.get(mode, "MIG compute slices"),
            "fault_domain": "own card" if unit == UnitKind.WHOLE else (
                "own MIG instance" if unit == UnitKind.MIG else "shared with the other replicas on the card"),
            "request_sizes": [1, 2, 4, 8] if unit == UnitKind.WHOLE else [1],
            **_compat(devices),
        }
    for class_name, raw_class in loaded.classes.items():
        for unit in (UnitKind.DRA_DEVICE, UnitKind.DRA_PARTITION):
            probe = Offering(unit_kind=unit, device_class_name=class_name, node_selector={}, tolerations=[])
            match = loaded.match(probe)
            by_shape: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
            for device in match.devices:
                by_shape[(str(_attr(device, "productName") or ""), str(_attr(device, "profile") or ""))].append(
                    device)
            for (product, profile), devices in by_shape.items():
                driver = devices[0]["driver"]
                clauses = []
                if product:
                    clauses.append(f"device.attributes[{_cel_string(driver)}].productName == {_cel_string(product)}")
                if profile:
                    clauses.append(f"device.attributes[{_cel_string(driver)}].profile == {_cel_string(profile)}")
                key = f"dra:{class_name}:{unit}:{product}:{profile}"
                label = " ".join(x for x in (product, profile) if x) or class_name
                sharing = sharing_for_class(class_config(raw_class))
                out[key] = {
                    "slug": _slug(f"{label}-{class_name}-{unit}"),
                    "name": f"{label} — {_SHARE[unit]} ({class_name})",
                    "unit_kind": unit.value, "model": devices[0]["model"], "device_class_name": class_name,
                    "cel_selector": " && ".join(clauses), "memory_mib": devices[0]["memory_mib"],
                    "isolation": DEFAULT_ISOLATION[unit], "node_selector": {}, "request_sizes": [1],
                    "compute_share": "1 device" if unit == UnitKind.DRA_DEVICE else f"MIG {profile}".strip(),
                    "fault_domain": "own card" if unit == UnitKind.DRA_DEVICE else "own partition of a shared card",
                    **_compat(devices),
                    **_shared_unit(unit, sharing, devices),
                }
    return out


def _shared_unit(unit: UnitKind, sharing: Sharing, devices: list[dict[str, Any]]) -> dict[str, Any]:
    """Isolation and guarantee of a DRA unit whose class config shares it, or whose devices are shared by capacity
    (`allowMultipleAllocations`): what replaces the exclusive card's description."""
    what = "card" if unit == UnitKind.DRA_DEVICE else "partition"
    if sharing.strategy == Strategy.TIME_SLICING:
        return {"isolation": ISOLATION_OF[sharing.strategy],
                "compute_share": f"1 {what}, time-sliced between the claim's pods ({sharing.detail})"[:80],
                "fault_domain": "shared with the claim's other pods (no memory isolation)"}
    if sharing.strategy == Strategy.MPS:
        out: dict[str, Any] = {
            "isolation": ISOLATION_OF[sharing.strategy],
            "compute_share": (f"MPS, up to {sharing.active_thread_percentage}% of the SMs per pod"
                              if sharing.active_thread_percentage is not None else f"1 {what} through MPS")[:80],
            "fault_domain": "the MPS server, shared with the claim's other pods",
        }
        if sharing.pinned_memory_limit:
            try:
                limit = int(parse_quantity(sharing.pinned_memory_limit) / 2**20)
            except ValueError:
                limit = 0
            memory = devices[0]["memory_mib"]
            if limit and (memory is None or limit < memory):
                out["memory_mib"] = limit  # what one pod may pin
        return out
    if sharing.strategy == Strategy.UNKNOWN:
        return {"isolation": ISOLATION_OF[sharing.strategy], "compute_share": f"unknown: {sharing.detail}"[:80],
                "fault_domain": "unknown (driver config not understood)"}
    if any(d["allow_multiple_allocations"] for d in devices):
        return {"isolation": Isolation.UNKNOWN,
                "compute_share": _capacity_share(devices[0])[:80],
                "fault_domain": f"shared with the other claims on the {what}"}
    return {}


def _capacity_share(device: dict[str, Any]) -> str:
    """`shared by capacity: memory range 10Gi..80Gi in steps of 10Gi; default 10Gi`."""
    capacities = consumable.device_capacities(device["driver"], device["capacities"])
    policies = [f"{consumable.short_name(name, device['driver'])} {capacity.policy.describe(capacity.binary)}"
                for name, capacity in sorted(capacities.items()) if capacity.policy is not None]
    return "shared by capacity" + (f": {'; '.join(policies)}" if policies else "")


def _covered(curated: list[Offering], proposal: dict[str, Any]) -> bool:
    for offering in curated:
        if offering.unit_kind != proposal["unit_kind"]:
            continue
        if offering.unit_kind in DRA_KINDS:
            if (offering.device_class_name == proposal.get("device_class_name")
                    and offering.cel_selector.strip() == proposal.get("cel_selector", "").strip()):
                return True
        elif offering.resource_name == proposal.get("resource_name") and offering.node_selector == proposal.get(
            "node_selector"
        ):
            return True
    return False


@transaction.atomic(durable=True)
def discovery_run(*, actor: RequestUser | None = None) -> dict[str, int]:
    """Create or refresh proposals from every cluster's inventory. Returns counts of created/refreshed/skipped."""
    proposals: dict[str, dict[str, Any]] = {}
    for loaded in clusters_devices():
        for key, proposal in _proposals(loaded).items():
            proposals.setdefault(key, proposal)
    existing = {o.discovery_key: o for o in Offering.objects.select_for_update().filter(discovery_key__in=proposals)}
    curated = list(Offering.objects.filter(curated=True).exclude(lifecycle=Lifecycle.DISMISSED))
    slugs = set(Offering.objects.values_list("slug", flat=True))
    counts = {"created": 0, "refreshed": 0, "skipped": 0}
    for key, proposal in sorted(proposals.items()):
        offering = existing.get(key)
        if offering is not None:
            if offering.curated or offering.lifecycle != Lifecycle.PROPOSED:
                counts["skipped"] += 1
                continue
            changed = {k: v for k, v in proposal.items() if k != "slug" and getattr(offering, k) != v}
            if changed:
                for name, value in changed.items():
                    setattr(offering, name, value)
                offering.save()
                counts["refreshed"] += 1
            continue
        if _covered(curated, proposal):
            counts["skipped"] += 1
            continue
        slug, n = proposal["slug"], 2
        while slug in slugs:
            slug, n = f"{proposal['slug'][:76]}-{n}", n + 1
        slugs.add(slug)
        offering = Offering.objects.create(**{**proposal, "slug": slug}, discovery_key=key,
                                           lifecycle=Lifecycle.PROPOSED, curated=False)
        audit_record(actor=actor, verb="offering.proposed", target=offering, data={"discovery_key": key})
        counts["created"] += 1
    return counts


@transaction.atomic(durable=True)
def proposal_decide(*, actor: RequestUser | None, offering_id: int, accept: bool) -> Offering:
    """Accept a proposal into the catalog (active, curated) or dismiss it (discovery will not propose it again)."""
    offering = Offering.objects.select_for_update().get(pk=offering_id)
    if offering.lifecycle != Lifecycle.PROPOSED:
        from catalog.errors import CatalogError

        raise CatalogError(f"{offering.name} is not a proposal (it is {offering.get_lifecycle_display().lower()}).")
    offering.lifecycle = Lifecycle.ACTIVE if accept else Lifecycle.DISMISSED
    offering.curated = True
    offering.save()
    audit_record(actor=actor, verb="offering.accepted" if accept else "offering.dismissed", target=offering,
                 data={"discovery_key": offering.discovery_key})
    return offering
