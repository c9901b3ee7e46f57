"""Derive the accelerator inventory (Device, Finding, ClaimAllocation, AllocationInterval) from mirrored rows.

Every function is set-based and deterministic: given a scope (node names, DRA pools, pod/claim uids, or None for
everything) it recomputes exactly the derived rows of that scope from the mirrored rows, with a bounded number of
queries. The sync engine calls `derive_scope` inside the transaction that applied a watch batch, so derived rows
are current as soon as the batch is visible; `derive_cluster` recomputes everything (after a full listing, and as
the reference in tests).

Rules (DESIGN.md §2, kubernetes-gpu-facts.md):
- "in use" comes from pod requests (device plugin) or claim allocations (DRA), never from capacity - allocatable;
- time-slicing/MPS replicas are units, not cards: cards = units / replicas; MIG slices belong to parent cards, with
  the mixed strategy (`nvidia.com/mig-<profile>`) and with the single strategy (`nvidia.com/gpu` on a node labelled
  `nvidia.com/mig.strategy=single` whose product ends in `-MIG-<profile>`: cards = slices / slices per card);
- a node whose `nvidia.com/mig.config.state` is not `success` is being (or failed to be) repartitioned: a finding;
- DRA holders: the opaque config that applies to a result says how its pods share the device (time-slicing, MPS,
  unknown); a device with `allowMultipleAllocations` is shared by capacity: what its allocations consume and what is
  left is derived per capacity (inventory/k8s/consumable.py), and it stays free while a request still fits;
- DRA pools: only the highest generation counts; a pool with fewer slices than resourceSliceCount is incomplete
  and its devices are never counted as free; shared counters block partitions of a card whose other partitions
  (or the whole card) are allocated.

Modules: scopes (Scope and what depends on what), common (labels, MIG rules, helpers), claims (ClaimAllocation),
plugin (the device-plugin path), dra (the DRA path and pool findings), nodes (node findings), intervals
(AllocationInterval) and entrypoints (derive_scope, derive_cluster and the replacement of rows).
"""

from inventory.services.derive.claims import claim_allocations_rebuild
from inventory.services.derive.common import PoolKey, dra_attribute, mig_slices_per_card
from inventory.services.derive.entrypoints import derive_cluster, derive_scope
from inventory.services.derive.intervals import claim_intervals_derive, pod_intervals_derive
from inventory.services.derive.scopes import (
    SCOPE_COLUMNS,
    Scope,
    scope_for_changes,
    scope_for_listing,
    stored_scope_values,
    written_scope_values,
)

__all__ = [
    "SCOPE_COLUMNS",
    "PoolKey",
    "Scope",
    "claim_allocations_rebuild",
    "claim_intervals_derive",
    "derive_cluster",
    "derive_scope",
    "dra_attribute",
    "mig_slices_per_card",
    "pod_intervals_derive",
    "scope_for_changes",
    "scope_for_listing",
    "stored_scope_values",
    "written_scope_values",
]
