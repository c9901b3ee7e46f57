"""Who reads an explanation: other tenants' pods and claims are named only to readers who may see them.

The snapshot holds every pod and claim of the cluster (they all take capacity), so the explainer knows who holds what;
a tenant reading why their pod does not fit learns that a node is full or a device is "allocated to a claim of
another tenant", never that tenant's names. The portal builds the viewer from the same rule as the inventory pages
(inventory.redaction.holder_rule); the command-line tools, which read the operator's own files, show everything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

OTHER_POD = "a pod of another tenant"
OTHER_CLAIM = "a claim of another tenant"


@dataclass(frozen=True, slots=True)
class Viewer:
    shows: Callable[[str], bool] | None = None  # namespace → may the reader see names there (None: everything)

    def visible(self, key: str) -> bool:
        """`key` is "namespace/name"."""
        return self.shows is None or self.shows(key.split("/", 1)[0])

    def pod(self, key: str, label: str = "") -> str:
        return (label or key) if self.visible(key) else OTHER_POD

    def claim(self, key: str) -> str:
        return key if self.visible(key) else OTHER_CLAIM


EVERYONE = Viewer()
