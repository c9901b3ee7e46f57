"""Enforcement reads shared by the violations page and the API."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet

from portal.enforcement.models import Violation
from portal.tenancy.models import TenantNamespace, sees_all_tenants


def visible_violations(user: User | AnonymousUser) -> QuerySet[Violation]:
    """Platform roles see every violation; tenants those in their own namespaces."""
    violations = Violation.objects.select_related("cluster")
    if sees_all_tenants(user):
        return violations
    owned = Q(pk__in=[])
    for cluster_id, namespace in TenantNamespace.objects.visible_to(user).values_list("cluster_id", "namespace"):
        owned |= Q(cluster_id=cluster_id, namespace=namespace)
    return violations.filter(owned)
