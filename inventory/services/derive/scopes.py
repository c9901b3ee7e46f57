"""What a watch batch or a listing touched (a Scope), and which derived rows depend on it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from inventory.services.derive.common import PoolKey


@dataclass
class Scope:
    """What a batch touched; `None` in a dimension means "all of it". Expanded by `derive_scope` to dependents."""

    nodes: set[str] | None = field(default_factory=set)
    pools: set[PoolKey] | None = field(default_factory=set)
    pod_uids: set[str] | None = field(default_factory=set)
    claim_uids: set[str] | None = field(default_factory=set)

    @classmethod
    def everything(cls) -> Scope:
        return cls(None, None, None, None)

    def __bool__(self) -> bool:
        return any(x is None or x for x in (self.nodes, self.pools, self.pod_uids, self.claim_uids))

    def merge(self, other: Scope) -> Scope:
        for name in ("nodes", "pools", "pod_uids", "claim_uids"):
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, None if mine is None or theirs is None else mine | theirs)
        return self


def scope_for_listing(kind: str) -> Scope:
    """After a complete listing of `kind`, everything that depends on that kind."""
    return {
        "nodes": Scope(nodes=None),
        "pods": Scope(nodes=None, pod_uids=None),
        "resourceslices": Scope(nodes=None, pools=None),
        "resourceclaims": Scope(pools=None, claim_uids=None),
    }.get(kind, Scope())


def scope_for_rows(kind: str, rows: Iterable[dict[str, Any]]) -> Scope:
    """Which derived rows depend on these mirrored rows (old or new versions)."""
    nodes: set[str] = set()
    pools: set[PoolKey] = set()
    pod_uids: set[str] = set()
    claim_uids: set[str] = set()
    for row in rows:
        if kind == "nodes":
            nodes.add(row["name"])
        elif kind == "pods":
            if row.get("node_name"):
                nodes.add(row["node_name"])
            pod_uids.add(row["uid"])
        elif kind == "resourceslices":
            pools.add((row.get("driver", ""), row.get("pool_name", "")))
            if row.get("node_name"):
                nodes.add(row["node_name"])
        elif kind == "resourceclaims":
            claim_uids.add(row["uid"])
    return Scope(nodes=nodes, pools=pools, pod_uids=pod_uids, claim_uids=claim_uids)

SCOPE_COLUMNS = {
    "nodes": ("uid", "name"),
    "pods": ("uid", "node_name"),
    "resourceslices": ("uid", "driver", "pool_name", "node_name"),
    "resourceclaims": ("uid",),
}
