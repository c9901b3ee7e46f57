"""What the generator needs from the inventory: the cluster's namespaces the user may target (their tenants'), and
for a DRA offering the DeviceClass's extendedResourceName and the driver whose attributes requirement selectors
read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.utils.module_loading import import_string

from catalog.models import Offering
from inventory.models import Cluster, DeviceClass, Namespace
from inventory.models import Device as InventoryDevice

SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
DEFAULT_DRIVER = "gpu.nvidia.com"


@dataclass(frozen=True)
class GeneratorFacts:
    namespaces: tuple[str, ...]
    extended_resource_name: str
    driver: str


def user_namespaces(user: Any, cluster: Cluster) -> list[str] | None:
    """The namespaces of `cluster` the user may target, from the tenancy layer (settings.PORTAL_USER_NAMESPACES);
    None when no tenancy is configured."""
    path = getattr(settings, "PORTAL_USER_NAMESPACES", "")
    return list(import_string(path)(user, cluster)) if path and user is not None else None


def generator_facts(*, cluster: Cluster | None, offering: Offering | None, user: Any = None) -> GeneratorFacts:
    namespaces: tuple[str, ...] = ()
    extended, driver = "", DEFAULT_DRIVER
    if cluster is not None:
        live = [n for n in Namespace.objects.live().filter(cluster=cluster).order_by("name")
                .values_list("name", flat=True) if n not in SYSTEM_NAMESPACES]
        allowed = user_namespaces(user, cluster)
        namespaces = tuple(live if allowed is None else [n for n in live if n in set(allowed)])
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
