"""Who sees which telemetry: one entry point per visible queryset (tenants their namespaces' rows and findings,
platform and finance roles everything, unallocated units included)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from django.db.models import Q, QuerySet

from portal.chargeback.services import Scope
from portal.models import TelemetryFinding, UtilizationRollup


def _scoped(rows: QuerySet[Any], user: Any) -> QuerySet[Any]:
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


def rollups_visible_to(user: Any, start: dt.datetime, end: dt.datetime) -> QuerySet[UtilizationRollup]:
    return _scoped(UtilizationRollup.objects.filter(hour__gte=start, hour__lt=end), user)


def findings_visible_to(user: Any) -> QuerySet[TelemetryFinding]:
    """Tenants see the findings about their namespaces (idle units); node-level health is for platform roles."""
    return _scoped(TelemetryFinding.objects.select_related("cluster", "tenant", "offering"), user)


def namespaces_visible_to(user: Any, cluster_id: int) -> set[str] | None:
    """None: every namespace."""
    scope = Scope.for_user(user)
    if scope.everything:
        return None
    return {ns for cid, ns in scope.namespaces if cid == cluster_id}
