"""ClaimAllocation rows: one per device allocated to a ResourceClaim, read from its status."""

from __future__ import annotations

from typing import Any

from inventory.k8s.semantics.values import as_dict, as_list
from inventory.models import (
    ClaimAllocation,
    ResourceClaim,
)
from inventory.services.derive.common import PoolKey
from inventory.sharing import sharing_for_result


def claim_allocation_rows(cluster_id: int, claim: dict[str, Any]) -> list[ClaimAllocation]:
    raw = claim["raw"]
    status = as_dict(raw.get("status"))
    allocation = as_dict(status.get("allocation"))
    devices = as_dict(allocation.get("devices"))
    results = as_list(devices.get("results"))
    reserved = [
        {"name": str(r.get("name", "")), "uid": str(r.get("uid", "")), "resource": str(r.get("resource", ""))}
        for r in (status.get("reservedFor") or [])
        if isinstance(r, dict)
    ]
    configs = as_list(devices.get("config"))
    rows = []
    for result in results:
        if not isinstance(result, dict) or not all(isinstance(result.get(k), str) for k in ("driver", "pool", "device")):
            continue
        request = str(result.get("request", ""))[:253]
        sharing = sharing_for_result(configs, driver=result["driver"], request=request)
        consumed = result.get("consumedCapacity")
        rows.append(ClaimAllocation(
            cluster_id=cluster_id, claim_uid=claim["uid"], namespace=claim["namespace"], claim_name=claim["name"],
            request=request, driver=result["driver"][:253], pool=result["pool"][:253],
            device=result["device"][:253], admin_access=bool(result.get("adminAccess")),
            share_id=str(result.get("shareID") or "")[:64], reserved_for=reserved,
            consumed_capacity={str(k)[:253]: str(v)[:64] for k, v in consumed.items()}
            if isinstance(consumed, dict) else {},
            sharing=sharing.strategy, sharing_detail=sharing.describe()[:200],
        ))
    return rows


def claim_allocations_rebuild(*, cluster_id: int, claim_uids: set[str] | None) -> set[PoolKey]:
    """Rebuild ClaimAllocation rows of these claims (None = all); returns the pools touched before and after."""
    existing = ClaimAllocation.objects.filter(cluster_id=cluster_id).order_by()
    claims = ResourceClaim.objects.filter(cluster_id=cluster_id, deleted_at__isnull=True)
    if claim_uids is not None:
        existing = existing.filter(claim_uid__in=claim_uids)
        claims = claims.filter(uid__in=claim_uids)
    pools: set[PoolKey] = set(existing.values_list("driver", "pool").distinct())
    existing.delete()
    rows: list[ClaimAllocation] = []
    for claim in claims.filter(allocated=True).values("uid", "namespace", "name", "raw").iterator(chunk_size=2000):
        rows.extend(claim_allocation_rows(cluster_id, claim))
    ClaimAllocation.objects.bulk_create(rows, batch_size=1000)
    pools |= {(r.driver, r.pool) for r in rows}
    return pools
