"""What the generator needs from the inventory: the cluster's namespaces the user may target (their tenants'), and
for a DRA offering the DeviceClass's extendedResourceName and the driver whose attributes requirement selectors
read."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count

from catalog.models import Offering
from core.types import RequestUser
from inventory.models import Cluster, DeviceClass, Namespace
from inventory.models import Device as InventoryDevice
from inventory.scoping import targets_for

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
DEFAULT_DRIVER = "gpu.nvidia.com"


@dataclass(frozen=True)
class GeneratorFacts:
    namespaces: tuple[str, ...]
    extended_resource_name: str
    driver: str


def user_namespaces(user: RequestUser | None, cluster: Cluster) -> list[str]:
    """The namespaces of `cluster` the user may target (the tenancy's answer, inventory.scoping.targets_for; none
    without a user or a registered tenancy: fail closed)."""
    return targets_for(user, cluster)


def generator_facts(*, cluster: Cluster | None, offering: Offering | None, user: RequestUser | None = None) -> GeneratorFacts:
    namespaces: tuple[str, ...] = ()
    extended, driver = "", DEFAULT_DRIVER
    if cluster is not None:
        live = [n for n in Namespace.objects.live().filter(cluster=cluster).order_by("name")
                .values_list("name", flat=True) if n not in SYSTEM_NAMESPACES]
        allowed = set(user_namespaces(user, cluster))
        namespaces = tuple(n for n in live if n in allowed)
        if offering is not None and offering.is_dra:
            raw = (DeviceClass.objects.live().filter(cluster=cluster, name=offering.device_class_name)
                   .values_list("raw", flat=True).first()) or {}
            extended = str((raw.get("spec") or {}).get("extendedResourceName") or "")
            top = (InventoryDevice.objects.filter(cluster=cluster, path="dra", mode=offering.unit_kind)
                   .values("driver").annotate(n=Count("pk")).order_by("-n", "driver").first())
            if top:
                driver = top["driver"]
    return GeneratorFacts(namespaces, extended, driver)


def namespace_error(cluster: Cluster, namespace: str, allowed: tuple[str, ...]) -> str:
    if not allowed:
        return (f"You own no namespace in {cluster.name}: ask your team lead or a platform admin to map one to "
                "your team.")
    return f"{namespace!r} is not one of your namespaces in {cluster.name} ({', '.join(allowed[:10])})."
