"""Tenancy: teams, their members and roles, and the namespaces they own per cluster.

A namespace belongs to at most one tenant per cluster. It is assigned explicitly by a platform admin, or through
the namespace label that the platform admin chose (`NamespaceLabelRule`): a namespace labelled
`<label key>: <tenant slug>` belongs to that tenant. Explicit assignments win and are never overwritten by the
label rule. Every change is audited (portal/tenancy/services.py).
"""

from __future__ import annotations

from typing import Self

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import models
from django.urls import reverse

from core.identity import in_any_group
from inventory.models import Cluster

GLOBAL_VIEW_GROUPS = ("platform-admin", "approver", "security-approver", "finance")


def sees_all_tenants(user: User | AnonymousUser) -> bool:
    return in_any_group(user, GLOBAL_VIEW_GROUPS)


class TenantQuerySet(models.QuerySet["Tenant"]):
    def visible_to(self, user: User | AnonymousUser) -> Self:
        """Tenants a user may see: their own, or all for platform roles. Anonymous users see none."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if sees_all_tenants(user):
            return self
        return self.filter(memberships__user=user).distinct()


class QuotaTarget(models.TextChoices):
    """What a quota grant raises in the cluster."""

    RESOURCE_QUOTA = "resourcequota", "ResourceQuota of the namespace"
    CLUSTER_QUEUE = "clusterqueue", "Kueue ClusterQueue nominal quota"


class Tenant(models.Model):
    """A team that owns namespaces and requests quota; billed to its cost center."""

    slug = models.SlugField(max_length=63, help_text="Also the value of the namespace label that maps namespaces.")
    name = models.CharField(max_length=120)
    cost_center = models.CharField(max_length=64, blank=True)
    quota_target = models.CharField(
        max_length=16, choices=QuotaTarget.choices, default=QuotaTarget.RESOURCE_QUOTA,
        help_text="Where the tenant's quota grants go: the namespaces' ResourceQuotas, or the nominal quota of the "
                  "Kueue ClusterQueue its LocalQueues feed (whichever the platform uses for this team).")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["slug"], name="portal_tenant_unique_slug")]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("portal:tenant_detail", kwargs={"slug": self.slug})


class TenantMembership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        LEAD = "lead", "Lead"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tenant_memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        ordering = ["tenant", "user__username"]
        constraints = [models.UniqueConstraint(fields=["tenant", "user"], name="portal_membership_unique_user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class TenantNamespaceQuerySet(models.QuerySet["TenantNamespace"]):
    def visible_to(self, user: User | AnonymousUser) -> Self:
        return self.filter(tenant__in=Tenant.objects.visible_to(user))


class TenantNamespace(models.Model):
    """A namespace of one cluster owned by a tenant."""

    class Source(models.TextChoices):
        EXPLICIT = "explicit", "Assigned by a platform admin"
        LABEL = "label", "Namespace label"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="namespaces")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63)
    source = models.CharField(max_length=10, choices=Source.choices)

    objects = TenantNamespaceQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "namespace"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace"], name="portal_tenantnamespace_unique_namespace")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.namespace} → {self.tenant.slug}"


class NamespaceLabelRule(models.Model):
    """The namespace label whose value names the owning tenant; per cluster, or for all clusters (cluster empty)."""

    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    label_key = models.CharField(max_length=317)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # One rule per cluster; the service keeps a single default (cluster empty) under a lock.
        constraints = [models.UniqueConstraint(fields=["cluster"], name="portal_labelrule_unique_cluster")]

    def __str__(self) -> str:
        return f"{self.label_key} ({self.cluster.name if self.cluster is not None else 'all clusters'})"
