"""Tenancy: teams, their members and roles, and the namespaces they own per cluster.

A namespace belongs to at most one tenant per cluster. It is assigned explicitly by a platform admin, or through
the namespace label that the platform admin chose (`NamespaceLabelRule`): a namespace labelled
`<label key>: <tenant slug>` belongs to that tenant. Explicit assignments win and are never overwritten by the
label rule. Every change is audited (portal/tenancy.py).
"""

from __future__ import annotations

from typing import Any, Self

from django.conf import settings
from django.db import models
from django.urls import reverse

from inventory.models import Cluster

# Roles that see every tenant (they review, administer or bill across tenants).
GLOBAL_VIEW_GROUPS = ("platform-admin", "approver", "security-approver", "finance")


def sees_all_tenants(user: Any) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if user.is_superuser:
        return True
    return user.groups.filter(name__in=GLOBAL_VIEW_GROUPS).exists()


class TenantQuerySet(models.QuerySet["Tenant"]):
    def visible_to(self, user: Any) -> Self:
        """Tenants a user may see: their own, or all for platform roles. Anonymous users see none."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if sees_all_tenants(user):
            return self
        return self.filter(memberships__user=user).distinct()


class Tenant(models.Model):
    """A team that owns namespaces and requests quota; billed to its cost center."""

    slug = models.SlugField(max_length=63, help_text="Also the value of the namespace label that maps namespaces.")
    name = models.CharField(max_length=120)
    cost_center = models.CharField(max_length=64, blank=True)
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
    def visible_to(self, user: Any) -> Self:
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
        return f"{self.label_key} ({self.cluster.name if self.cluster_id else 'all clusters'})"


class QuotaPolicy(models.Model):
    """How many distinct approvers a quota request for an offering needs (more above a threshold)."""

    offering = models.OneToOneField("catalog.Offering", on_delete=models.CASCADE, related_name="+")
    approvals = models.PositiveSmallIntegerField(default=1)
    threshold_units = models.PositiveIntegerField(null=True, blank=True, help_text="Above this, approvals_above.")
    approvals_above = models.PositiveSmallIntegerField(default=2)

    def __str__(self) -> str:
        return f"{self.offering_id}: {self.approvals} (>{self.threshold_units}: {self.approvals_above})"


DEFAULT_APPROVALS, DEFAULT_THRESHOLD, DEFAULT_APPROVALS_ABOVE = 1, 16, 2


class QuotaRequestQuerySet(models.QuerySet["QuotaRequest"]):
    def visible_to(self, user: Any) -> Self:
        return self.filter(tenant__in=Tenant.objects.visible_to(user))


class QuotaRequest(models.Model):
    """A tenant lead's request for units of an offering in one namespace, through approval to the cluster."""

    class State(models.TextChoices):
        DRAFT = "draft", "Draft"
        SUBMITTED = "submitted", "Submitted"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Denied"
        WITHDRAWN = "withdrawn", "Withdrawn"
        APPLYING = "applying", "Applying to the cluster"
        ACTIVE = "active", "Active"
        EXPIRED = "expired", "Expired"
        FAILED = "failed", "Apply failed (retryable)"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="quota_requests")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    namespace = models.CharField(max_length=63)
    offering = models.ForeignKey("catalog.Offering", on_delete=models.PROTECT, related_name="+")
    units = models.PositiveIntegerField()
    ends_at = models.DateTimeField(null=True, blank=True, help_text="Empty: open-ended.")
    justification = models.TextField()
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=12, choices=State.choices, default=State.DRAFT)
    approvals_required = models.PositiveSmallIntegerField(default=1)
    apply_error = models.TextField(blank=True)
    apply_attempts = models.PositiveIntegerField(default=0)
    apply_attempted_at = models.DateTimeField(null=True, blank=True)
    applied_hard = models.JSONField(default=dict, blank=True, help_text="What the portal applied last.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = QuotaRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["cluster", "namespace", "state"], name="portal_quotareq_ns_state")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.units} x {self.offering_id} in {self.namespace} ({self.state})"


class QuotaDecision(models.Model):
    class Decision(models.TextChoices):
        APPROVE = "approve", "Approve"
        DENY = "deny", "Deny"

    request = models.ForeignKey(QuotaRequest, on_delete=models.CASCADE, related_name="decisions")
    approver = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    comment = models.TextField(blank=True)
    decided_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["decided_at"]
        constraints = [models.UniqueConstraint(fields=["request", "approver"], name="portal_decision_once")]

    def __str__(self) -> str:
        return f"{self.approver} {self.decision} #{self.request_id}"


class Notification(models.Model):
    """An in-app inbox entry (also sent by e-mail)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "read_at"], name="portal_notification_unread")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.subject}"
