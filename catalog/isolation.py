"""What a DeviceClass's opaque config makes of the units an offering sells (reads only).

The rules of which config the portal understands live in `inventory.sharing`; here they meet the catalog: which
isolation such a unit has, and which isolations an offering on that DeviceClass may therefore not claim.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.models import Isolation
from inventory.models import DeviceClass
from inventory.sharing import Sharing, Strategy, class_config, sharing_for_class

ISOLATION_OF = {Strategy.TIME_SLICING: Isolation.NONE, Strategy.MPS: Isolation.LIMITED,
                Strategy.UNKNOWN: Isolation.UNKNOWN}
# What a shared (or possibly shared) device is not: the pods using one claim share it.
REFUSED_WHEN_SHARED = frozenset({Isolation.EXCLUSIVE, Isolation.HARDWARE})


@dataclass(frozen=True)
class DeclaredSharing:
    cluster: str
    sharing: Sharing

    @property
    def isolation(self) -> str:
        return ISOLATION_OF.get(self.sharing.strategy, Isolation.EXCLUSIVE)


def declared_sharing(device_class_name: str) -> list[DeclaredSharing]:
    """Per cluster, the sharing the mirrored DeviceClass of that name declares, when it is not exclusive (a config
    the portal does not understand counts: its isolation is unknown)."""
    if not device_class_name:
        return []
    out = []
    for cluster, raw in (DeviceClass.objects.live().filter(name=device_class_name)
                         .order_by("cluster__name").values_list("cluster__name", "raw")):
        sharing = sharing_for_class(class_config(raw or {}))
        if sharing.shared:
            out.append(DeclaredSharing(cluster, sharing))
    return out


def isolation_problem(device_class_name: str, isolation: str) -> str:
    """Why an offering on this DeviceClass cannot claim `isolation` ("" if it can)."""
    if isolation not in REFUSED_WHEN_SHARED:
        return ""
    for declared in declared_sharing(device_class_name):
        return (f"DeviceClass {device_class_name} declares {declared.sharing.describe()} in its config (cluster "
                f"{declared.cluster}): its devices are shared by the pods of a claim, not "
                f"{Isolation(isolation).label.lower()}. Choose {Isolation(declared.isolation).label.lower()}.")
    return ""
