"""Tenant scoping of namespaced inventory rows (pods, claims) without inventory knowing about tenants.

`settings.PORTAL_NAMESPACE_SCOPE` names a function `f(user) -> list[(cluster_id, namespace)] | None` (the portal's
tenancy provides it): None means the user sees every namespace (platform roles); a list restricts querysets to
those namespaces. Every page and API view that lists pods or claims applies `scope_namespaced`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, TypeVar

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils.module_loading import import_string

_Q = TypeVar("_Q", bound=QuerySet)


def namespace_filter(user: Any, *, cluster_field: str = "cluster_id", namespace_field: str = "namespace") -> Q | None:
    path = getattr(settings, "PORTAL_NAMESPACE_SCOPE", "")
    if not path:
        return None
    pairs = import_string(path)(user)
    if pairs is None:
        return None
    by_cluster: dict[int, list[str]] = defaultdict(list)
    for cluster_id, namespace in pairs:
        by_cluster[cluster_id].append(namespace)
    condition = Q(pk__in=[])
    for cluster_id, namespaces in by_cluster.items():
        condition |= Q(**{cluster_field: cluster_id, f"{namespace_field}__in": namespaces})
    return condition


def scope_namespaced(queryset: _Q, user: Any) -> _Q:
    """Restrict a queryset of namespaced rows (with `cluster` and `namespace`) to what the user may see."""
    condition = namespace_filter(user)
    return queryset if condition is None else queryset.filter(condition)
