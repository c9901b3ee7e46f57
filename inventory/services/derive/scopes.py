"""What a watch batch or a listing touched (a Scope), and which derived rows depend on it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from inventory.services.derive.common import PoolKey
from inventory.services.derive.plugin import SHARE_COLUMNS, plugin_share, share_values, written_share_values

# The node columns a DRA device carries (its node pool from the labels, its schedulability): when none of them
# changed, a node's DRA pools need no re-derivation.
NODE_FACT_COLUMNS = ("labels", "ready", "unschedulable", "deleted_at")
_DIMENSIONS = ("nodes", "pools", "pod_uids", "claim_uids", "node_facts")


@dataclass
class Scope:
    """What a batch touched; `None` in a dimension means "all of it". Expanded by `derive_scope` to dependents.

    `nodes`: the nodes whose device-plugin devices and findings depend on the change (their pods, their capacity).
    `node_facts`: the nodes whose facts that DRA devices carry (NODE_FACT_COLUMNS) may have changed; the pools
    published on them are re-derived too. A pod or a capacity change of a node touches only `nodes`, which keeps the
    most frequent batches from re-deriving every DRA device of the nodes they touch."""

    nodes: set[str] | None = field(default_factory=set)
    pools: set[PoolKey] | None = field(default_factory=set)
    pod_uids: set[str] | None = field(default_factory=set)
    claim_uids: set[str] | None = field(default_factory=set)
    node_facts: set[str] | None = field(default_factory=set)

    @classmethod
    def everything(cls) -> Scope:
        return cls(None, None, None, None, None)

    def __bool__(self) -> bool:
        return any(x is None or x for x in (getattr(self, name) for name in _DIMENSIONS))

    def merge(self, other: Scope) -> Scope:
        for name in _DIMENSIONS:
            mine, theirs = getattr(self, name), getattr(other, name)
            setattr(self, name, None if mine is None or theirs is None else mine | theirs)
        return self


def scope_for_listing(kind: str) -> Scope:
    """After a complete listing of `kind`, everything that depends on that kind."""
    return {
        "nodes": Scope(nodes=None, node_facts=None),
        "pods": Scope(nodes=None, pod_uids=None),
        "resourceslices": Scope(nodes=None, pools=None),
        "resourceclaims": Scope(pools=None, claim_uids=None),
    }.get(kind, Scope())


def scope_for_rows(kind: str, rows: Iterable[dict[str, Any]]) -> Scope:
    """Which derived rows depend on these mirrored rows (old or new versions); `scope_for_changes` adds the nodes where
    a pod's share changed and the nodes whose facts changed."""
    nodes: set[str] = set()
    pools: set[PoolKey] = set()
    pod_uids: set[str] = set()
    claim_uids: set[str] = set()
    for row in rows:
        if kind == "nodes":
            nodes.add(row["name"])
        elif kind == "pods":  # the nodes: those where a pod's share changed (scope_for_changes)
            pod_uids.add(row["uid"])
        elif kind == "resourceslices":  # the nodes: those where the pools' DRA devices changed (derive_scope)
            pools.add((row.get("driver", ""), row.get("pool_name", "")))
        elif kind == "resourceclaims":
            claim_uids.add(row["uid"])
    return Scope(nodes=nodes, pools=pools, pod_uids=pod_uids, claim_uids=claim_uids)


def scope_for_changes(kind: str, before: Iterable[dict[str, Any]], after: Iterable[dict[str, Any]]) -> Scope:
    """Which derived rows depend on a batch that replaced the `before` rows (`stored_scope_values` of the stored
    versions) with the `after` rows (`written_scope_values` of the versions written). A node counts among
    `node_facts` only when it is new, gone, renamed, or one of its NODE_FACT_COLUMNS changed; a pod's node among
    `nodes` only when the pod's `plugin_share` changed."""
    before, after = list(before), list(after)
    scope = scope_for_rows(kind, before).merge(scope_for_rows(kind, after))
    if kind == "pods":  # a pod's node: only where what the pod adds to its in-use counts changed
        shares = {row["uid"]: plugin_share(row) for row in before}
        for row in after:
            was, now = shares.get(row["uid"]), plugin_share(row)
            if was != now and scope.nodes is not None:
                scope.nodes |= {share[0] for share in (was, now) if share is not None}
    if kind == "nodes":
        stored = {row["uid"]: row for row in before}
        changed = set()
        for row in after:
            old = stored.get(row["uid"])
            if old is None or any(old[c] != row[c] for c in ("name", *NODE_FACT_COLUMNS)):
                changed |= {row["name"]} | ({old["name"]} if old else set())
        scope.node_facts = changed
    return scope


SCOPE_COLUMNS = {
    "nodes": ("uid", "name", *NODE_FACT_COLUMNS),
    "pods": ("uid", *SHARE_COLUMNS),  # and the raw parts `plugin_share` reads (share_values, written_share_values)
    "resourceslices": ("uid", "driver", "pool_name"),
    "resourceclaims": ("uid",),
}


def stored_scope_values(kind: str, queryset: Any) -> list[dict[str, Any]]:
    """The stored rows of `queryset` as `scope_for_changes` reads them (its `before`)."""
    return list(share_values(queryset) if kind == "pods" else queryset.values(*SCOPE_COLUMNS[kind]))


def written_scope_values(kind: str, rows: Iterable[Any]) -> list[dict[str, Any]]:
    """Rows about to be written as `scope_for_changes` reads them (its `after`)."""
    if kind == "pods":
        return [written_share_values(row) for row in rows]
    return [{column: getattr(row, column) for column in SCOPE_COLUMNS[kind]} for row in rows]
