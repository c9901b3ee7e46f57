"""Quota reads shared by the pages and the API: per namespace and quota key what is hard, used and pending, and
what an approver needs to decide a request."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q

from catalog.models import Offering, OfferingCapacity
from inventory.k8s.semantics import (
    effective_limits,
    format_quantity,
    is_extended_resource,
    parse_quantity,
    quota_scope_text,
)
from inventory.k8s.semantics.kueue import quotas_from_json, usage_from_json
from inventory.models import ClusterQueue, LocalQueue, ResourceQuota
from portal.quota.kueue import targets_for_requests
from portal.quota.models import ON_THE_WAY, PENDING, ClusterQueueQuotaState, QuotaRequest
from portal.quota.services import quota_keys, recent_increases
from portal.tenancy.models import QuotaTarget, TenantNamespace

# The pod the quota pages speak for: requests cpu (NotBestEffort), no priority class, no activeDeadlineSeconds. A
# quota scoped to other pods is listed with its scope but does not set the namespace's effective limit.
ORDINARY_POD: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}


def _int(value: Any) -> int:
    try:
        return int(parse_quantity(value))
    except ValueError:
        return 0


def quota_rows(user: User | AnonymousUser) -> list[dict[str, Any]]:
    """Per namespace the user may see and per accelerator quota key: hard, used, headroom, pending units."""
    owned = list(TenantNamespace.objects.visible_to(user).select_related("tenant", "cluster"))
    keys_to_offerings: dict[str, list[str]] = defaultdict(list)
    for offering in Offering.objects.browsable():
        for key in quota_keys(offering):
            keys_to_offerings[key].append(offering.slug)
    pending: dict[tuple[int, str, str], int] = defaultdict(int)
    for r in QuotaRequest.objects.filter(state__in=ON_THE_WAY).select_related("offering"):
        pending[(r.cluster_id, r.namespace, quota_keys(r.offering)[0])] += r.units
    rows: list[dict[str, Any]] = []
    if not owned:
        return rows
    condition = Q(pk__in=[])
    for tn in owned:
        condition |= Q(cluster_id=tn.cluster_id, namespace=tn.namespace)
    quotas: dict[tuple[int, str], list[ResourceQuota]] = defaultdict(list)
    for quota in ResourceQuota.objects.live().filter(condition).order_by("name"):  # one query for every namespace
        quotas[(quota.cluster_id, quota.namespace)].append(quota)
    for tn in owned:
        here = quotas[(tn.cluster_id, tn.namespace)]
        limits, _ = effective_limits(_entries(here), ORDINARY_POD)
        for quota in here:
            scope = quota_scope_text((quota.raw or {}).get("spec"))
            for key, hard in sorted((quota.hard or {}).items()):
                if key not in keys_to_offerings:
                    continue
                used = _int((quota.used or {}).get(key, 0))
                effective = limits.get(key)
                binds = effective is not None and effective.binding.quota == quota.name and len(effective.quotas) > 1
                rows.append({"cluster": tn.cluster.name, "namespace": tn.namespace, "tenant": tn.tenant.slug,
                             "quota": quota.name, "key": key, "offerings": keys_to_offerings[key], "hard": _int(hard),
                             "used": used, "headroom": max(_int(hard) - used, 0), "scope": scope,
                             "effective_limit": int(effective.limit) if effective else None,
                             "effective_headroom": int(effective.headroom) if effective else None,
                             "binding_quota": effective.binding.quota if effective else "", "binds": binds,
                             "pending_units": pending.get((tn.cluster_id, tn.namespace, key), 0)})
    return rows


def queue_rows(user: User | AnonymousUser) -> list[dict[str, Any]]:
    """The Kueue side of the quota page: per ClusterQueue fed by a LocalQueue of the user's namespaces and per
    accelerator resource cell, the nominal quota, use, borrowing and lending limits, and units on the way."""
    owned = list(TenantNamespace.objects.visible_to(user).values_list("cluster_id", "namespace"))
    if not owned:
        return []
    condition = Q(pk__in=[])
    for cluster_id, namespace in owned:
        condition |= Q(cluster_id=cluster_id, namespace=namespace)
    feeders: dict[tuple[int, str], list[str]] = defaultdict(list)
    for cluster_id, namespace, name, target in LocalQueue.objects.live().filter(condition).order_by(
            "namespace", "name").values_list("cluster_id", "namespace", "name", "cluster_queue"):
        feeders[(cluster_id, target)].append(f"{namespace}/{name}")
    if not feeders:
        return []
    pending: dict[tuple[int, str, str, str], int] = defaultdict(int)
    for cluster_id, queue, flavor, resource, units in QuotaRequest.objects.filter(
            state__in=ON_THE_WAY, target=QuotaTarget.CLUSTER_QUEUE).values_list(
            "cluster_id", "cluster_queue", "flavor", "resource", "units"):
        pending[(cluster_id, queue, flavor, resource)] += units
    queues = Q(pk__in=[])
    for cluster_id, name in feeders:
        queues |= Q(cluster_id=cluster_id, name=name)
    rows: list[dict[str, Any]] = []
    for queue in ClusterQueue.objects.live().filter(queues).select_related("cluster").order_by("cluster__name", "name"):
        usage = usage_from_json(queue.usage)
        for cell in quotas_from_json(queue.quotas):
            if not is_extended_resource(cell.resource):
                continue
            rows.append({"cluster": queue.cluster.name, "cluster_queue": queue.name, "cohort": queue.cohort,
                         "flavor": cell.flavor, "resource": cell.resource, "nominal": format_quantity(cell.nominal),
                         "used": format_quantity(usage.get((cell.flavor, cell.resource), Fraction(0))),
                         "borrowing_limit": None if cell.borrowing_limit is None
                         else format_quantity(cell.borrowing_limit),
                         "lending_limit": None if cell.lending_limit is None else format_quantity(cell.lending_limit),
                         "local_queues": feeders[(queue.cluster_id, queue.name)],
                         "pending_units": pending.get((queue.cluster_id, queue.name, cell.flavor, cell.resource), 0)})
    return rows


def queue_states(queues: set[tuple[str, str]]) -> list[ClusterQueueQuotaState]:
    """The portal's grant state of these (cluster name, ClusterQueue) pairs (those `queue_rows` shows)."""
    if not queues:
        return []
    condition = Q(pk__in=[])
    for cluster, name in queues:
        condition |= Q(cluster__name=cluster, cluster_queue=name)
    return list(ClusterQueueQuotaState.objects.filter(condition).select_related("cluster"))


def _entries(quotas: Any) -> list[dict[str, Any]]:
    """Mirrored ResourceQuota rows (or `.values()` dicts) as the semantics module reads them."""
    out = []
    for q in quotas:
        row = q if isinstance(q, dict) else {"name": q.name, "hard": q.hard, "used": q.used, "raw": q.raw}
        out.append({"name": row["name"], "hard": row["hard"] or {}, "used": row["used"] or {},
                    "spec": (row.get("raw") or {}).get("spec")})
    return out


def request_context(request: QuotaRequest) -> dict[str, Any]:
    """What an approver needs to decide (see `request_contexts`)."""
    return request_contexts([request])[request.pk]


def request_contexts(requests: Sequence[QuotaRequest]) -> dict[int, dict[str, Any]]:
    """What an approver needs to decide, per request: the namespace's effective limit (every quota of the namespace
    applies; the tightest binds) and use, free capacity, and granted quota against physical capacity. Granted quota
    in the cluster is the sum over namespaces of each one's effective limit (two quotas on one key are not two
    grants). A fixed number of queries however many requests (the approvers' queue and the API list many)."""
    if not requests:
        return {}
    clusters = {r.cluster_id for r in requests}
    quotas: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in ResourceQuota.objects.live().filter(cluster_id__in=clusters).values(
            "cluster_id", "namespace", "name", "hard", "used", "raw"):
        quotas[row["cluster_id"]][row["namespace"]].append(row)
    # Physical capacity is the capacity recomputation's quota_capacity (catalog.services.capacity
    # quota_key_capacity), the number the offering pages and the oversubscription page show: read, never recomputed
    # here, so every page agrees until the next recomputation.
    figures = {(row["offering_id"], row["cluster_id"]): row for row in OfferingCapacity.objects.filter(
        cluster_id__in=clusters, offering_id__in={r.offering_id for r in requests}).values(
        "offering_id", "cluster_id", "quota_capacity", "free", "computed_at")}
    recent = recent_increases(requests)
    queue_targets = targets_for_requests(requests)
    limits_cache: dict[tuple[int, str], dict[str, Any]] = {}
    out: dict[int, dict[str, Any]] = {}
    for request in requests:
        key = quota_keys(request.offering)[0]
        if (request.cluster_id, key) not in limits_cache:
            limits_cache[(request.cluster_id, key)] = {
                namespace: effective_limits(_entries(rows), ORDINARY_POD)[0].get(key)
                for namespace, rows in quotas[request.cluster_id].items()}
        limits = limits_cache[(request.cluster_id, key)]
        granted_now = sum(int(limit.limit) for limit in limits.values() if limit is not None)
        here = limits.get(request.namespace)
        hard_here, used_here = (int(here.limit), int(here.used)) if here else (0, 0)
        capacity = figures.get((request.offering_id, request.cluster_id)) or {
            "quota_capacity": None, "free": 0, "computed_at": None}
        physical, free = capacity["quota_capacity"], capacity["free"]
        # Until the sync shows it active, the request's units are not in the mirrored quotas yet.
        pending = request.state in PENDING
        # a grant on a ClusterQueue leaves the ResourceQuotas as they are
        granted_after = granted_now + (request.units if pending and not request.on_cluster_queue else 0)
        out[request.pk] = {
            "quota_key": key, "namespace_hard": hard_here, "namespace_used": used_here,
            "binding_quota": here.binding.quota if here else "",
            "namespace_quotas": [{"quota": q.quota, "hard": int(q.hard), "used": int(q.used), "scope": q.scope}
                                 for q in here.quotas] if here else [],
            "namespace_recent_increase": recent[request.pk] + request.units,
            "offering_free_units": free or 0, "granted_in_cluster": granted_now, "granted_after": granted_after,
            "physical_capacity": physical, "capacity_computed_at": capacity["computed_at"],
            "oversubscription": round(granted_after / physical, 3) if physical else None}
        if request.on_cluster_queue:
            # the cell as the sync shows it (nominal, borrowing and lending limits, cohort, use, the LocalQueues
            # feeding it) and the nominal quota after the request; None when the queue or the cell is gone
            target = queue_targets.get(request.pk)
            out[request.pk]["cluster_queue"] = None if target is None else {
                **target.to_json(), "nominal_after": format_quantity(target.nominal + (request.units if pending else 0))}
            # The namespace's ResourceQuotas still apply to every pod Kueue admits: a queue grant beyond their
            # headroom admits Jobs whose pods the API server then refuses.
            if here is not None and hard_here - used_here < request.units:
                out[request.pk]["resource_quota_warning"] = (
                    f"ResourceQuota {here.binding.quota} also limits {key} in {request.namespace} to {hard_here} "
                    f"({used_here} in use): pods beyond {max(hard_here - used_here, 0)} more are refused at creation "
                    "even when Kueue admits their Job.")
    return out
