"""Who sees which telemetry: one entry point per visible queryset (tenants their namespaces' rows and findings,
platform and finance roles everything, unallocated units included)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet

from inventory.models import Device
from portal.chargeback.services import Scope
from portal.telemetry.models import TelemetryFinding, UtilizationRollup

DIMENSIONS = ("tenant", "namespace", "offering", "cluster", "node", "unit_kind", "hour")
_FIELDS = {"tenant": "tenant__slug", "namespace": "namespace", "offering": "offering__slug", "cluster": "cluster__name",
           "node": "node_name", "unit_kind": "unit_kind", "hour": "hour"}


def _scoped(rows: QuerySet[Any], user: User | AnonymousUser) -> QuerySet[Any]:
    scope = Scope.for_user(user)
    if scope.everything:
        return rows
    if not scope.namespaces:
        return rows.none()
    by_cluster: dict[int, list[str]] = defaultdict(list)
    for cluster_id, namespace in scope.namespaces:
        by_cluster[cluster_id].append(namespace)
    condition = Q(pk__in=[])
    for cluster_id, namespaces in by_cluster.items():
        condition |= Q(cluster_id=cluster_id, namespace__in=namespaces)
    return rows.filter(condition)


def rollups_visible_to(user: User | AnonymousUser, start: dt.datetime, end: dt.datetime) -> QuerySet[UtilizationRollup]:
    return _scoped(UtilizationRollup.objects.filter(hour__gte=start, hour__lt=end), user)


def findings_visible_to(user: User | AnonymousUser) -> QuerySet[TelemetryFinding]:
    """Tenants see the findings about their namespaces (idle units); node-level health is for platform roles."""
    return _scoped(TelemetryFinding.objects.select_related("cluster", "tenant", "offering"), user)


def namespaces_visible_to(user: User | AnonymousUser, cluster_id: int) -> set[str] | None:
    """None: every namespace."""
    scope = Scope.for_user(user)
    if scope.everything:
        return None
    return {ns for cid, ns in scope.namespaces if cid == cluster_id}


def device_history(user: User | AnonymousUser, device: Device, start: dt.datetime, end: dt.datetime) -> list[Any]:
    return list(rollups_visible_to(user, start, end).filter(device=device).order_by("hour", "gpu_uuid",
                                                                                     "gpu_instance"))


def summarize(rows: Any, dimensions: tuple[str, ...]) -> list[dict[str, Any]]:
    """Entity-hours per group: sample-weighted mean activity, the largest p95, energy, idle entity-hours."""
    threshold = settings.PORTAL_IDLE_THRESHOLD
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    columns = [_FIELDS[d] for d in dimensions]
    for values in rows.values_list(*columns, "samples", "coverage", "util_mean", "util_p95", "energy_j",
                                   "xid_codes", "holder_uid").iterator(chunk_size=5000):
        key = tuple("" if v is None else v for v in values[: len(columns)])
        samples, coverage, mean, p95, energy, xid, holder = values[len(columns):]
        group = groups.get(key)
        if group is None:
            group = groups[key] = {**dict(zip(dimensions, key, strict=True)), "entity_hours": 0, "measured_hours": 0.0,
                                   "_weighted": 0.0, "_samples": 0, "util_p95_max": None, "energy_kwh": 0.0,
                                   "idle_allocated_hours": 0, "unallocated_hours": 0, "xid_codes": set()}
        group["entity_hours"] += 1
        group["measured_hours"] += coverage
        if mean is not None and samples:
            group["_weighted"] += mean * samples
            group["_samples"] += samples
            if holder and mean < threshold:
                group["idle_allocated_hours"] += 1
        if not holder:
            group["unallocated_hours"] += 1
        if p95 is not None:
            group["util_p95_max"] = max(p95, group["util_p95_max"] or 0.0)
        group["energy_kwh"] += (energy or 0.0) / 3.6e6
        group["xid_codes"].update(xid or [])
    out = []
    for key in sorted(groups, key=lambda k: tuple(str(v) for v in k)):
        group = groups[key]
        samples = group.pop("_samples")
        weighted = group.pop("_weighted")
        group["util_mean"] = round(weighted / samples, 4) if samples else None
        group["measured_hours"] = round(group["measured_hours"], 3)
        group["energy_kwh"] = round(group["energy_kwh"], 3)
        group["xid_codes"] = sorted(group["xid_codes"])
        out.append(group)
    return out


def sparkline_hours(rows: list[Any]) -> list[float]:
    """Per hour, the sample-weighted mean activity of the rows (for page sparklines)."""
    per_hour: dict[dt.datetime, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        if row.util_mean is not None and row.samples:
            per_hour[row.hour][0] += row.util_mean * row.samples
            per_hour[row.hour][1] += row.samples
    return [w / n for _, (w, n) in sorted(per_hour.items()) if n]
