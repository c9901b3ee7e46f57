"""AllocationInterval rows: when each pod or claim held which devices (for chargeback)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F, Q
from django.utils import timezone

from core.db import copy_upsert
from inventory.extract import parse_time
from inventory.k8s import consumable
from inventory.k8s.semantics.values import as_dict
from inventory.models import (
    AllocationInterval,
    ClaimAllocation,
    Pod,
    ResourceClaim,
)
from inventory.podstatus import pod_rejected_at_admission
from inventory.services.derive.claims import claim_allocation_rows
from inventory.services.derive.common import TERMINAL_PHASES, PoolKey
from inventory.services.derive.dra import pool_states
from inventory.services.derive.plugin import device_plugin_requests


def _pod_bound_at(raw: dict[str, Any]) -> datetime | None:
    status = as_dict(raw.get("status"))
    issues: list[str] = []
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            found = parse_time(condition.get("lastTransitionTime"), issues, "c")
            if found:
                return found
    metadata = raw.get("metadata") or {}
    return parse_time(status.get("startTime"), issues, "s") or parse_time(metadata.get("creationTimestamp"), issues, "m")


def _pod_ended_at(raw: dict[str, Any], phase: str, deleted_at: datetime | None) -> datetime | None:
    issues: list[str] = []
    status = as_dict(raw.get("status"))
    if phase in TERMINAL_PHASES:
        finished = []
        for container in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
            terminated = ((container or {}).get("state") or {}).get("terminated") if isinstance(container, dict) else None
            if isinstance(terminated, dict):
                found = parse_time(terminated.get("finishedAt"), issues, "f")
                if found:
                    finished.append(found)
        if finished:
            return max(finished)
    if deleted_at is not None or phase in TERMINAL_PHASES:
        metadata = raw.get("metadata") or {}
        return parse_time(metadata.get("deletionTimestamp"), issues, "d") or deleted_at or timezone.now()
    return None


def _upsert_intervals(cluster_id: int, holder_kind: str, holder_uids: set[str] | None,
                      rows: list[AllocationInterval]) -> None:
    existing = AllocationInterval.objects.filter(cluster_id=cluster_id, holder_kind=holder_kind).order_by()
    if holder_uids is not None:
        existing = existing.filter(holder_uid__in=holder_uids)
    keep = {(r.holder_uid, r.resource) for r in rows}
    stale = [pk for pk, uid, res in existing.values_list("pk", "holder_uid", "resource") if (uid, res) not in keep]
    if holder_kind == AllocationInterval.HolderKind.CLAIM and stale:
        # A claim deallocated (or reallocated elsewhere) while it still exists: the hold ended when we saw it.
        AllocationInterval.objects.filter(pk__in=stale, ended_at__isnull=True).update(ended_at=timezone.now())
    elif stale:
        AllocationInterval.objects.filter(pk__in=stale).delete()
    copy_upsert(
        AllocationInterval, rows, unique_fields=["cluster", "holder_kind", "holder_uid", "resource"],
        update_fields=["namespace", "name", "node_name", "quantity", "share", "consumed_capacity", "admin_access",
                       "started_at", "ended_at", "updated_at"],
    )


def pod_intervals_derive(*, cluster_id: int, pod_uids: set[str] | None) -> None:
    """Intervals of pods holding extended resources, from the pods' own timestamps (tombstones included).

    An extended resource the scheduler satisfied with a generated DRA claim (DRAExtendedResource) gets no pod
    interval: the claim's intervals hold those units, one per allocated device, so they are counted and billed
    once and keep the device's identity (driver/pool/device). A pod the kubelet rejected at admission (e.g. the
    device plugin refused a request for more than one shared unit) held nothing and gets no interval."""
    pods = Pod.objects.filter(cluster_id=cluster_id, accelerator=True).exclude(node_name="")
    if pod_uids is not None:
        pods = pods.filter(uid__in=pod_uids)
    rows = []
    columns = ("uid", "namespace", "name", "node_name", "phase", "deleted_at", "extended_requests")
    # Only the parts of the pod the timestamps come from, not the whole spec.
    rows_iter = pods.values(*columns, status=F("raw__status"), metadata=F("raw__metadata")).iterator(chunk_size=2000)
    for pod in rows_iter:
        raw = {"status": pod["status"], "metadata": pod["metadata"] if isinstance(pod["metadata"], dict) else {}}
        started = _pod_bound_at(raw)
        if started is None or pod_rejected_at_admission(raw):
            continue
        ended = _pod_ended_at(raw, pod["phase"], pod["deleted_at"])
        if ended is not None and ended < started:
            ended = started
        plugin = device_plugin_requests(pod["extended_requests"], pod["status"].get("extendedResourceClaimStatus")
                                         if isinstance(pod["status"], dict) else None)
        for resource, quantity in sorted(plugin.items()):
            if quantity > 0:
                rows.append(AllocationInterval(
                    cluster_id=cluster_id, holder_kind=AllocationInterval.HolderKind.POD, holder_uid=pod["uid"],
                    namespace=pod["namespace"], name=pod["name"], node_name=pod["node_name"], resource=resource[:300],
                    quantity=quantity, started_at=started, ended_at=ended,
                ))
    _upsert_intervals(cluster_id, AllocationInterval.HolderKind.POD, pod_uids, rows)


def claim_intervals_derive(*, cluster_id: int, claim_uids: set[str] | None) -> None:
    """Intervals of allocated claims per device: allocationTimestamp (or creation) to deletion."""
    claims = ResourceClaim.objects.filter(cluster_id=cluster_id)
    if claim_uids is not None:
        claims = claims.filter(uid__in=claim_uids)
    rows = []
    for claim in claims.values("uid", "namespace", "name", "deleted_at", "raw", "k8s_created_at").iterator(
        chunk_size=2000
    ):
        raw = claim["raw"]
        status = as_dict(raw.get("status"))
        allocation = as_dict(status.get("allocation"))
        if not allocation:
            continue
        issues: list[str] = []
        started = parse_time(allocation.get("allocationTimestamp"), issues, "a") or claim["k8s_created_at"]
        if started is None:
            continue
        ended = None
        if claim["deleted_at"] is not None:
            metadata = raw.get("metadata") or {}
            ended = parse_time(metadata.get("deletionTimestamp"), issues, "d") or claim["deleted_at"]
            ended = max(ended, started)
        node = ""
        selector = allocation.get("nodeSelector") or {}
        for term in selector.get("nodeSelectorTerms") or [] if isinstance(selector, dict) else []:
            for match in (term or {}).get("matchFields") or []:
                if isinstance(match, dict) and match.get("key") == "metadata.name" and match.get("values"):
                    node = str(match["values"][0])
        for allocated in claim_allocation_rows(cluster_id, claim):
            rows.append(AllocationInterval(
                cluster_id=cluster_id, holder_kind=AllocationInterval.HolderKind.CLAIM, holder_uid=claim["uid"],
                namespace=claim["namespace"], name=claim["name"], node_name=node[:253],
                resource=f"{allocated.driver}/{allocated.pool}/{allocated.device}"[:300], quantity=1,
                admin_access=allocated.admin_access, started_at=started, ended_at=ended,
                consumed_capacity=allocated.consumed_capacity if allocated.share_id else {}, share=1.0,
            ))
    _share_of_devices(cluster_id, rows)
    _upsert_intervals(cluster_id, AllocationInterval.HolderKind.CLAIM, claim_uids, rows)


def _share_of_devices(cluster_id: int, rows: list[AllocationInterval]) -> None:
    """Billing by consumed capacity: an interval on a shared device (a result with consumedCapacity) holds the
    largest fraction of any of the device's capacities it consumes; every other interval holds the whole device."""
    wanted = [r for r in rows if r.consumed_capacity]
    if not wanted:
        return
    keys = {tuple(r.resource.split("/", 2)) for r in wanted}
    states = pool_states(cluster_id, {(k[0], k[1]) for k in keys if len(k) == 3})
    capacities: dict[str, dict[str, consumable.Capacity]] = {}
    for state in states.values():
        for slice_row in state.current:
            for device in (slice_row["raw"].get("spec") or {}).get("devices") or []:
                key = f"{state.driver}/{state.pool}/{device.get('name')}" if isinstance(device, dict) else ""
                if key and key not in capacities and device.get("allowMultipleAllocations") is True:
                    capacities[key] = consumable.device_capacities(state.driver, device.get("capacity"))
    for row in wanted:
        found = capacities.get(row.resource)
        driver = row.resource.split("/", 1)[0]
        if found:
            row.share = round(consumable.dominant_share(
                consumable.consumed_amounts(driver, row.consumed_capacity), found), 6)


def claims_with_shares(cluster_id: int, pools: set[PoolKey] | None) -> set[str]:
    """Claims holding shares of devices in these pools: their intervals' shares depend on the devices' capacities."""
    query = ClaimAllocation.objects.filter(cluster_id=cluster_id).exclude(consumed_capacity={}).order_by()
    if pools is not None:
        condition = Q(pk__in=[])
        for driver, pool in pools:
            condition |= Q(driver=driver, pool=pool)
        query = query.filter(condition)
    return set(query.values_list("claim_uid", flat=True))
