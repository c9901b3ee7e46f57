"""The entry points: recompute the derived rows of a scope (or of the whole cluster) and replace them."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.db import copy_upsert
from inventory.models import (
    ChangeEvent,
    ClaimAllocation,
    Device,
    Finding,
    Node,
    Path,
    ResourceSlice,
)
from inventory.representations import device_content_hash, device_documents, device_selector_hash
from inventory.services.changes import changes_record, device_changes
from inventory.services.derive.claims import claim_allocations_rebuild
from inventory.services.derive.common import POOL_SCOPE_PREFIX, PoolKey, pool_of_scope, pool_scope, pools_q
from inventory.services.derive.dra import PoolState, dra_devices, pool_findings, pool_states
from inventory.services.derive.intervals import claim_intervals_derive, claims_with_shares, pod_intervals_derive
from inventory.services.derive.nodes import NODE_FINDING_DEVICE_FIELDS, node_findings
from inventory.services.derive.plugin import plugin_devices, pod_requests_by_node
from inventory.services.derive.scopes import Scope
from inventory.signals import devices_changed

_NODE_NAME = NODE_FINDING_DEVICE_FIELDS.index("node_name")
POOL_CHUNK = 500  # pools per step of a whole-cluster derivation (its memory: one chunk's slices and devices)


def _replace(model: type[Device] | type[Finding], cluster_id: int, scope_filter: Q, rows: list[Any],
             unique: list[str], keep_fields: set[str], write: list[Any] | None = None) -> None:
    """Make the rows of `scope_filter` exactly `rows`: upsert them (or only `write`, the changed ones), delete
    the others."""
    keys = {tuple(getattr(r, f) for f in unique if f != "cluster") for r in rows}
    rows = rows if write is None else write
    existing = model.objects.filter(Q(cluster_id=cluster_id) & scope_filter).order_by()
    gone = [pk for pk, *key in existing.values_list("pk", *[f for f in unique if f != "cluster"])
            if tuple(key) not in keys]
    if gone:
        model.objects.filter(pk__in=gone).delete()
    if rows:
        fields = [f.name for f in model._meta.concrete_fields
                  if f.name not in {"id", "cluster", *unique, *keep_fields}]
        copy_upsert(model, rows, unique_fields=unique, update_fields=fields)


def derive_scope(*, cluster_id: int, scope: Scope | None) -> None:
    """Recompute every derived row that depends on `scope` (None: the whole cluster). Bounded query count."""
    scope = Scope.everything() if scope is None else scope
    nodes, pools = scope.nodes, scope.pools
    if scope.claim_uids is None or scope.claim_uids:
        touched = claim_allocations_rebuild(cluster_id=cluster_id, claim_uids=scope.claim_uids)
        if pools is not None:
            pools = pools | touched
        claim_intervals_derive(cluster_id=cluster_id, claim_uids=scope.claim_uids)
    if scope.claim_uids is not None and (scope.pools is None or scope.pools):
        # The shares of claims on consumable-capacity devices depend on the devices' published capacities: when a
        # pool's slices change, re-derive the intervals of the claims holding shares there.
        shared = claims_with_shares(cluster_id, scope.pools) - scope.claim_uids
        if shared:
            claim_intervals_derive(cluster_id=cluster_id, claim_uids=shared)
    if scope.pod_uids is None or scope.pod_uids:
        pod_intervals_derive(cluster_id=cluster_id, pod_uids=scope.pod_uids)

    if nodes is None or pools is None or scope.node_facts is None:
        # All devices (node and pool rows depend on each other), pool by pool, POOL_CHUNK at a time: the memory of a
        # whole-cluster derivation is one chunk's slices and devices, not the cluster's (on `large`, 5,000 slices
        # and 20,000 DRA devices were 380 MB at once).
        known = sorted(_known_pools(cluster_id))
        for start in range(0, len(known), POOL_CHUNK):
            chunk = set(known[start:start + POOL_CHUNK])
            _derive_pools(cluster_id, chunk, pool_states(cluster_id, chunk))
        _derive_nodes(cluster_id, None)
        return
    nodes, pools = set(nodes) | scope.node_facts, set(pools)
    if scope.node_facts:  # DRA devices carry their node's pool and schedulability
        pools |= set(ResourceSlice.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True,
                                                  node_name__in=scope.node_facts)
                     .order_by().values_list("driver", "pool_name").distinct())
    if pools:  # node findings look at what NODE_FINDING_DEVICE_FIELDS say of the node's DRA devices
        nodes |= _derive_pools(cluster_id, pools, pool_states(cluster_id, pools))
    if nodes:
        _derive_nodes(cluster_id, nodes)


def _node_rows(cluster_id: int, nodes: set[str] | None) -> dict[str, dict[str, Any]]:
    rows = Node.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True)
    if nodes is not None:
        rows = rows.filter(name__in=nodes)
    return {r["name"]: r for r in rows.values("name", "labels", "capacity", "allocatable", "ready", "unschedulable")}


def _known_pools(cluster_id: int) -> set[PoolKey]:
    """Every pool the cluster's DRA rows name: published in a live slice, or still carrying devices or findings
    (which a whole-cluster derivation must remove when the pool is gone)."""
    pools: set[PoolKey] = set(ResourceSlice.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True)
                              .order_by().values_list("driver", "pool_name").distinct())
    pools |= set(Device.objects.filter(cluster_id=cluster_id, path=Path.DRA).order_by()
                 .values_list("driver", "pool").distinct())
    pools |= {pool_of_scope(scope) for scope in Finding.objects.filter(
        cluster_id=cluster_id, scope__startswith=POOL_SCOPE_PREFIX).order_by().values_list("scope", flat=True)
        .distinct()}
    return pools


def _derive_pools(cluster_id: int, pools: set[PoolKey], states: dict[PoolKey, PoolState]) -> set[str]:
    """Replace the DRA devices and pool findings of `pools`; returns the nodes whose DRA devices changed in what their
    node findings read (a taint or an allocation changes none of it: the node is left alone)."""
    allocations: dict[PoolKey, list[ClaimAllocation]] = defaultdict(list)
    query = ClaimAllocation.objects.filter(cluster_id=cluster_id).filter(pools_q(pools))
    for allocation in query.order_by("claim_uid", "request", "device"):
        allocations[(allocation.driver, allocation.pool)].append(allocation)
    node_names = {r["node_name"] for s in states.values() for r in s.current if r["node_name"]}
    per_device_nodes = {
        str(d.get("nodeName")) for s in states.values() for r in s.current
        for d in ((r["raw"].get("spec") or {}).get("devices") or []) if isinstance(d, dict) and d.get("nodeName")
    }
    nodes = _node_rows(cluster_id, node_names | per_device_nodes)
    devices: list[Device] = []
    findings: list[Finding] = []
    for key in sorted(states):
        pool_devices = dra_devices(cluster_id, states[key], allocations.get(key, []), nodes)
        devices.extend(pool_devices)
        findings.extend(pool_findings(cluster_id, states[key], pool_devices))
    device_scope = Q(path=Path.DRA) & pools_q(pools)
    finding_scope = Q(scope__in=sorted(pool_scope(pool) for pool in pools))
    node_facts = _replace_devices(cluster_id, device_scope, devices)
    _replace(Finding, cluster_id, finding_scope, findings, ["cluster", "kind", "subject"], {"first_seen_at"})
    return node_facts


def _replace_devices(cluster_id: int, scope: Q, devices: list[Device]) -> set[str]:
    """Replace the devices of `scope`, writing only rows whose content changed (most rows of a batch do not), and
    the change-feed events of the rows whose CMDB snapshot changed. Returns the nodes of the devices that appeared,
    went, or changed in NODE_FINDING_DEVICE_FIELDS (before or after)."""
    now = timezone.now()
    current: dict[str, str] = {}
    feed_hashes: dict[str, str] = {}
    facts: dict[str, tuple[Any, ...]] = {}  # key -> NODE_FINDING_DEVICE_FIELDS, node_name among them
    for key, content_hash, feed_hash, *fields in (Device.objects.filter(Q(cluster_id=cluster_id) & scope).order_by()
                                                  .values_list("key", "content_hash", "feed_hash",
                                                               *NODE_FINDING_DEVICE_FIELDS)):
        current[key], feed_hashes[key], facts[key] = content_hash, feed_hash, tuple(fields)
    node_facts: set[str] = set()
    for device in devices:  # new, or changed in what node findings read: its node, before and after
        was = facts.pop(device.key, None)
        if was != tuple(getattr(device, name) for name in NODE_FINDING_DEVICE_FIELDS):
            node_facts |= {device.node_name} | ({was[_NODE_NAME]} if was else set())
    node_facts |= {fields[_NODE_NAME] for fields in facts.values()}  # gone
    node_facts.discard("")
    changed = []
    for device in devices:
        device.content_hash = device_content_hash(device)
        if current.get(device.key) == device.content_hash:
            continue
        device.updated_at = now
        device.selector_hash = device_selector_hash(device)
        device.api_document, device.api_document_redacted = device_documents(device)
        changed.append(device)
    keys = {d.key for d in devices}
    # The events first: generating them sets each rewritten row's feed_hash, which the replacement then stores.
    changes_record(cluster_id=cluster_id, object_type=ChangeEvent.ObjectType.DEVICE,
                   changes=device_changes(previous=feed_hashes, rewritten=changed, kept=keys))
    _replace(Device, cluster_id, scope, devices, ["cluster", "key"], set(), write=changed)
    if changed or set(current) - keys:
        _announce(cluster_id)
    return node_facts


def _derive_nodes(cluster_id: int, nodes: set[str] | None) -> None:
    node_rows = _node_rows(cluster_id, nodes)
    requested = pod_requests_by_node(cluster_id, nodes)
    dra_by_node: dict[str, list[Device]] = defaultdict(list)
    dra = Device.objects.filter(cluster_id=cluster_id, path=Path.DRA).order_by("node_name", "key")
    if nodes is not None:
        dra = dra.filter(node_name__in=nodes)
    for device in dra.only("key", *NODE_FINDING_DEVICE_FIELDS):
        dra_by_node[device.node_name].append(device)
    devices: list[Device] = []
    findings: list[Finding] = []
    for name in sorted(node_rows):
        node = node_rows[name]
        plugin = plugin_devices(cluster_id, node, requested.get(name, {}))
        devices.extend(plugin)
        findings.extend(node_findings(cluster_id, node, plugin, dra_by_node.get(name, [])))
    if nodes is None:
        device_scope, finding_scope = Q(path=Path.DEVICE_PLUGIN), Q(scope__startswith="node/")
    else:
        device_scope = Q(path=Path.DEVICE_PLUGIN, node_name__in=nodes)
        finding_scope = Q(scope__in=[f"node/{n}" for n in nodes])
    _replace_devices(cluster_id, device_scope, devices)
    _replace(Finding, cluster_id, finding_scope, findings, ["cluster", "kind", "subject"], {"first_seen_at"})


def _announce(cluster_id: int) -> None:
    """Tell listeners (the catalog's capacity refresh) after the commit. Robust: a listener's failure (Redis down) is
    logged by Django and never propagates into the sync batch whose commit ran it, so it cannot end a watcher."""
    transaction.on_commit(lambda: devices_changed.send(sender=Device, cluster_id=cluster_id), robust=True)


def derive_cluster(*, cluster_id: int) -> None:
    """Recompute every derived row of the cluster from scratch."""
    derive_scope(cluster_id=cluster_id, scope=None)
