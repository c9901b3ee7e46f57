"""Quota: approval policy per offering, who owns the accelerator keys of a namespace's quotas, the requests with
their decisions, and per namespace the quota the cluster carries against the granted one (portal/quota/services.py)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Self

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import models

from inventory.models import Cluster
from portal.tenancy.models import QuotaTarget, Tenant, TenantNamespace, sees_all_tenants


class QuotaPolicy(models.Model):
    """How many distinct approvers a quota request for an offering needs (more above a threshold)."""

    offering = models.OneToOneField("catalog.Offering", on_delete=models.CASCADE, related_name="+")
    approvals = models.PositiveSmallIntegerField(default=1)
    threshold_units = models.PositiveIntegerField(null=True, blank=True, help_text="Above this, approvals_above.")
    approvals_above = models.PositiveSmallIntegerField(default=2)

    def __str__(self) -> str:
        return f"{self.offering.name}: {self.approvals} (>{self.threshold_units}: {self.approvals_above})"


DEFAULT_APPROVALS, DEFAULT_THRESHOLD, DEFAULT_APPROVALS_ABOVE = 1, 16, 2


class QuotaOwnership(models.Model):
    """Whether the portal owns the accelerator keys of the ResourceQuotas in a namespace (or in every namespace of a
    tenant): where it does, an approved increase takes the key over from another field manager (server-side apply
    with force); where it does not (the default), such a conflict is refused with the reason and a suggested fix.
    A namespace's own row wins over its tenant's."""

    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63, blank=True)
    portal_owns_accelerator_keys = models.BooleanField(
        default=False, help_text="Take accelerator keys (extended resources, *.deviceclass.resource.k8s.io/*) over "
                                 "from other field managers on this namespace's quota objects (forced apply).")
    note = models.CharField(max_length=500, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "quota ownership policy"
        verbose_name_plural = "quota ownership policies"
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(tenant__isnull=False, cluster__isnull=True, namespace="")
                           | models.Q(tenant__isnull=True, cluster__isnull=False) & ~models.Q(namespace="")),
                name="portal_quotaownership_one_scope"),
            models.UniqueConstraint(fields=["tenant"], condition=models.Q(tenant__isnull=False),
                                    name="portal_quotaownership_unique_tenant"),
            models.UniqueConstraint(fields=["cluster", "namespace"], condition=models.Q(cluster__isnull=False),
                                    name="portal_quotaownership_unique_namespace"),
        ]

    def __str__(self) -> str:
        scope = f"tenant {self.tenant}" if self.tenant_id else f"{self.namespace}"
        return f"{scope}: portal {'owns' if self.portal_owns_accelerator_keys else 'does not force'} accelerator keys"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        if bool(self.tenant_id) == bool(self.cluster_id or self.namespace):
            raise ValidationError("Set either a tenant, or a cluster and a namespace.")
        if self.cluster_id and not self.namespace:
            raise ValidationError("A cluster needs a namespace.")


class QuotaRequestQuerySet(models.QuerySet["QuotaRequest"]):
    def visible_to(self, user: User | AnonymousUser) -> Self:
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
    target = models.CharField(max_length=16, choices=QuotaTarget.choices, default=QuotaTarget.RESOURCE_QUOTA,
                              help_text="What the grant raises: the namespace's ResourceQuotas, or a ClusterQueue's "
                                        "nominal quota for one flavor and resource (fixed when the request is made).")
    cluster_queue = models.CharField(max_length=253, blank=True)
    flavor = models.CharField(max_length=253, blank=True)
    resource = models.CharField(max_length=253, blank=True)
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
        constraints = [models.CheckConstraint(
            condition=models.Q(target=QuotaTarget.RESOURCE_QUOTA, cluster_queue="", flavor="", resource="")
            | models.Q(target=QuotaTarget.CLUSTER_QUEUE) & ~models.Q(cluster_queue="") & ~models.Q(flavor="")
            & ~models.Q(resource=""),
            name="portal_quotareq_target_fields")]

    def __str__(self) -> str:
        # what the audit log shows for the object (target_repr): names, not database ids
        where = (f"{self.namespace} via ClusterQueue {self.cluster_queue}" if self.target == QuotaTarget.CLUSTER_QUEUE
                 else self.namespace)
        return f"Quota request #{self.pk}: {self.units} \u00d7 {self.offering.name} in {where} ({self.state})"

    @property
    def on_cluster_queue(self) -> bool:
        return self.target == QuotaTarget.CLUSTER_QUEUE


# Groups of request states, each defined once (services, selectors, views and the API use these, never strings).
GRANTED = (QuotaRequest.State.APPLYING, QuotaRequest.State.ACTIVE, QuotaRequest.State.FAILED)  # in the desired quota
ENDED = (QuotaRequest.State.EXPIRED, QuotaRequest.State.DENIED, QuotaRequest.State.WITHDRAWN)
# Pending: neither active nor ended, so the request's units are not in the mirrored quotas yet.
PENDING = (QuotaRequest.State.DRAFT, QuotaRequest.State.SUBMITTED, QuotaRequest.State.APPROVED,
           QuotaRequest.State.APPLYING, QuotaRequest.State.FAILED)
# On the way to the cluster: submitted and not yet applied or failed (the quota pages' "Pending" column counts these;
# unlike PENDING it leaves out drafts and failed applies).
ON_THE_WAY = (QuotaRequest.State.SUBMITTED, QuotaRequest.State.APPROVED, QuotaRequest.State.APPLYING)
WITHDRAWABLE = (QuotaRequest.State.DRAFT, QuotaRequest.State.SUBMITTED)


def unexpired(now: datetime) -> models.Q:
    """Requests whose period has not ended (open-ended ones never end)."""
    return models.Q(ends_at__isnull=True) | models.Q(ends_at__gt=now)


class QuotaNamespaceStateQuerySet(models.QuerySet["QuotaNamespaceState"]):
    def visible_to(self, user: User | AnonymousUser) -> Self:
        """The namespaces of the user's tenants (every namespace for platform roles; none for anonymous users)."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if sees_all_tenants(user):
            return self
        owned = TenantNamespace.objects.visible_to(user).filter(cluster_id=models.OuterRef("cluster_id"),
                                                                 namespace=models.OuterRef("namespace"))
        return self.filter(models.Exists(owned))


class ReconciledMixin:
    """The confirm beat's reading of a quota target (a namespace's quotas, a ClusterQueue's nominal quota) against
    the sync: in sync, or drift (applying while a request is on its way; failed stays failed until an apply works)."""

    status: str
    drift_since: datetime | None
    failures: int
    last_error: str
    attempted_at: datetime | None

    def observe(self, *, shows: bool, applying: bool, now: datetime, backoff: timedelta) -> bool:
        """Record what the sync shows; True when the drift is due for a re-apply (last attempt older than
        `backoff`)."""
        status = QuotaNamespaceState.Status
        if shows:
            self.status, self.drift_since, self.failures, self.last_error = status.IN_SYNC, None, 0, ""
            return False
        self.drift_since = self.drift_since or now
        if self.status != status.FAILED:
            self.status = status.APPLYING if applying else status.DRIFT
        return self.attempted_at is None or now - self.attempted_at > backoff


class QuotaNamespaceState(ReconciledMixin, models.Model):
    """The portal's quota in one namespace as the cluster carries it: desired (granted, unexpired units) against what
    the sync shows, kept by the confirm beat (portal/quota/services.py `quota_namespaces_reconcile`). Drift is re-applied with
    backoff, and a failed apply — raising or lowering — stays visible here until the cluster matches."""

    class Status(models.TextChoices):
        IN_SYNC = "in_sync", "In sync"
        APPLYING = "applying", "Applying"
        DRIFT = "drift", "Differs from the granted quota (re-applying)"
        FAILED = "failed", "Apply failed (retrying)"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=63)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.APPLYING)
    desired = models.JSONField(default=dict, blank=True, help_text="Granted, unexpired units per quota key.")
    observed = models.JSONField(default=dict, blank=True,
                                help_text="Per key, the increase the cluster carries: the least, over the quota "
                                          "objects the portal writes, of their value minus the baseline.")
    targets = models.JSONField(default=dict, blank=True,
                               help_text="Per quota object, the accelerator keys the portal applies and their values.")
    baselines = models.JSONField(default=dict, blank=True,
                                 help_text="Per quota object written by someone else, each key's value before the "
                                           "portal managed it (the grant is added to it).")
    last_error = models.TextField(blank=True)
    failures = models.PositiveIntegerField(default=0, help_text="Consecutive failed applies (backoff).")
    attempted_at = models.DateTimeField(null=True, blank=True)
    drift_since = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)

    objects = QuotaNamespaceStateQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "namespace"]
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace"], name="portal_quotans_unique")]

    def __str__(self) -> str:
        return f"{self.namespace} quota ({self.status})"


class ClusterQueueQuotaState(ReconciledMixin, models.Model):
    """A Kueue ClusterQueue's nominal quota as the cluster carries it against what the portal granted: per
    "flavor/resource" cell the nominal quota before the portal managed it (`baselines`, recorded once), the granted
    units of unexpired requests (`desired`) and the increase the sync shows (`observed`). Kept by the confirm beat
    like the namespaces' state (portal/quota/kueue.py)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    cluster_queue = models.CharField(max_length=253)
    status = models.CharField(max_length=10, choices=QuotaNamespaceState.Status.choices,
                              default=QuotaNamespaceState.Status.APPLYING)
    desired = models.JSONField(default=dict, blank=True, help_text="Granted, unexpired units per flavor/resource.")
    observed = models.JSONField(default=dict, blank=True,
                                help_text="Per flavor/resource, the nominal quota the sync shows minus the baseline.")
    baselines = models.JSONField(default=dict, blank=True,
                                 help_text="Per flavor/resource, the nominal quota before the portal managed it.")
    last_error = models.TextField(blank=True)
    failures = models.PositiveIntegerField(default=0, help_text="Consecutive failed applies (backoff).")
    attempted_at = models.DateTimeField(null=True, blank=True)
    drift_since = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "cluster_queue"]
        constraints = [models.UniqueConstraint(fields=["cluster", "cluster_queue"], name="portal_cqquota_unique")]

    def __str__(self) -> str:
        return f"ClusterQueue {self.cluster_queue} quota ({self.status})"


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
