"""Tenancy reads registered with the inventory (portal/apps.py): which namespaces a user sees and may target."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User

from inventory.models import Cluster
from inventory.scoping import EVERYTHING, NOTHING, NamespaceScope
from portal.tenancy.models import TenantNamespace, sees_all_tenants


def user_namespaces(user: User | AnonymousUser, cluster: Cluster) -> list[str]:
    """Namespaces of `cluster` the user may target: their tenants' (all tenants' for platform roles). Registered as
    the inventory's `targets_for` (portal/apps.py)."""
    return list(TenantNamespace.objects.visible_to(user).filter(cluster=cluster).order_by("namespace")
                .values_list("namespace", flat=True))


def namespace_scope(user: User | AnonymousUser) -> NamespaceScope:
    """What the user sees of namespaced inventory rows: every namespace for the roles that see every tenant,
    otherwise exactly their tenants' namespaces. Registered as the inventory's `scope_for` (portal/apps.py)."""
    if not getattr(user, "is_authenticated", False):
        return NOTHING
    if sees_all_tenants(user):
        return EVERYTHING
    return NamespaceScope(pairs=frozenset(TenantNamespace.objects.visible_to(user).values_list("cluster_id",
                                                                                                 "namespace")))
