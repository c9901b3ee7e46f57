"""What the generator needs from the inventory: the cluster's namespaces, and for a DRA offering the DeviceClass's
extendedResourceName and the driver whose attributes requirement selectors read."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

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


def generator_facts(*, cluster: Cluster | None, offering: Offering | None) -> GeneratorFacts:
    namespaces: tuple[str, ...] = ()
    extended, driver = "", DEFAULT_DRIVER
    if cluster is not None:
        namespaces = tuple(
            n for n in Namespace.objects.live().filter(cluster=cluster).order_by("name").values_list("name", flat=True)
            if n not in SYSTEM_NAMESPACES
        )
        if offering is not None and offering.is_dra:
            raw = (DeviceClass.objects.live().filter(cluster=cluster, name=offering.device_class_name)
                   .values_list("raw", flat=True).first()) or {}
            extended = str((raw.get("spec") or {}).get("extendedResourceName") or "")
            drivers = Counter(InventoryDevice.objects.filter(cluster=cluster, path="dra", mode=offering.unit_kind)
                              .values_list("driver", flat=True)[:5000])
            if drivers:
                driver = drivers.most_common(1)[0][0]
    return GeneratorFacts(namespaces, extended, driver)
