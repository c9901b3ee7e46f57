"""The portal app's models, defined in each domain's models module and imported here so that Django finds them
(app label `portal`: audit rows reference `portal.<model>`)."""

from __future__ import annotations

from typing import Any, Self

from django.conf import settings
from django.db import models
from django.urls import reverse

from inventory.models import Cluster
from portal.notifications.models import Notification
from portal.quota.models import (
    DEFAULT_APPROVALS,
    DEFAULT_APPROVALS_ABOVE,
    DEFAULT_THRESHOLD,
    QuotaDecision,
    QuotaNamespaceState,
    QuotaNamespaceStateQuerySet,
    QuotaOwnership,
    QuotaPolicy,
    QuotaRequest,
    QuotaRequestQuerySet,
)
from portal.tenancy.models import (
    GLOBAL_VIEW_GROUPS,
    NamespaceLabelRule,
    Tenant,
    TenantMembership,
    TenantNamespace,
    TenantNamespaceQuerySet,
    TenantQuerySet,
    sees_all_tenants,
)

# ------------------------------------------------------------------------------------------ access exceptions


class AccessKind(models.TextChoices):
    ADMIN_ACCESS = "admin-access", "DRA adminAccess"
    PRIVILEGED = "privileged", "Privileged exception"


class AccessPolicy(models.Model):
    """Per kind of exception: the longest window, the approvals needed, how long a request waits for reviews, and
    (adminAccess) whether admin claims still present when the grant ends are deleted or only flagged."""

    kind = models.CharField(max_length=16, choices=AccessKind.choices, unique=True)
    max_window = models.DurationField(help_text="Longest window a request may ask for.")
    approvals = models.PositiveSmallIntegerField(default=2, help_text="Distinct security approvers needed.")
    review_timeout = models.DurationField(help_text="A request unanswered this long expires.")
    delete_claims_at_end = models.BooleanField(
        default=False, help_text="adminAccess: delete admin claims that outlive the grant (otherwise flag them).")

    def __str__(self) -> str:
        return f"{self.kind}: ≤{self.max_window}, {self.approvals} approval(s)"


class AccessRequestQuerySet(models.QuerySet["AccessRequest"]):
    def visible_to(self, user: Any) -> Self:
        return self.filter(tenant__in=Tenant.objects.visible_to(user))


class AccessRequest(models.Model):
    """A ticket asking for an exception in one namespace for a bounded window; reviewed by security approvers."""

    class State(models.TextChoices):
        SUBMITTED = "submitted", "Awaiting review"
        APPROVED = "approved", "Approved (grant issued)"
        DENIED = "denied", "Denied"
        WITHDRAWN = "withdrawn", "Withdrawn"
        EXPIRED = "expired", "Expired unanswered"

    kind = models.CharField(max_length=16, choices=AccessKind.choices)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="access_requests")
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    namespace = models.CharField(max_length=63)
    service_account = models.CharField(max_length=253, blank=True, help_text="Privileged: the service account.")
    workload = models.CharField(max_length=63, blank=True,
                                help_text="Privileged: only pods labelled app.kubernetes.io/name=<workload>.")
    reason = models.TextField()
    ticket_ref = models.CharField(max_length=120, help_text="External ticket (change or incident) reference.")
    window = models.DurationField()
    starts_at = models.DateTimeField(null=True, blank=True, help_text="Empty: as soon as approved.")
    extends = models.ForeignKey("Grant", null=True, blank=True, on_delete=models.SET_NULL, related_name="extensions")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    state = models.CharField(max_length=10, choices=State.choices, default=State.SUBMITTED)
    approvals_required = models.PositiveSmallIntegerField()
    break_glass = models.BooleanField(default=False)
    review_due_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = AccessRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "review_due_at"], name="portal_accessreq_due")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} {self.namespace} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("portal:access_request_detail", kwargs={"pk": self.pk})


class AccessReview(models.Model):
    """One security approver's review of a request (or, after break-glass, of the grant already issued)."""

    class Decision(models.TextChoices):
        APPROVE = "approve", "Approve"
        DENY = "deny", "Deny"

    request = models.ForeignKey(AccessRequest, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    comment = models.TextField(blank=True)
    after_the_fact = models.BooleanField(default=False, help_text="Review of a break-glass grant.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [models.UniqueConstraint(fields=["request", "reviewer"], name="portal_accessreview_once")]

    def __str__(self) -> str:
        return f"{self.reviewer} {self.decision} access #{self.request_id}"


class GrantQuerySet(models.QuerySet["Grant"]):
    def visible_to(self, user: Any) -> Self:
        return self.filter(request__tenant__in=Tenant.objects.visible_to(user))


EXCEPTION_KEY_SEPARATOR = "_"
EXCEPTION_KEY_MAX = 253  # a ConfigMap data key


def exception_key(namespace: str, service_account: str, workload: str = "") -> str:
    """The exception object's key for a scope: `<namespace>_<service account>[_<workload>]` (an empty service account
    is "default"). Unambiguous: a namespace (DNS label) and a service account (DNS subdomain) never contain `_`, so the
    first `_` ends the namespace and the second the service account; the rest, which may contain `_` and `.`, is the
    workload. Every character is one a ConfigMap key allows (`[-._a-zA-Z0-9]`)."""
    key = f"{namespace}{EXCEPTION_KEY_SEPARATOR}{service_account or 'default'}"
    return f"{key}{EXCEPTION_KEY_SEPARATOR}{workload}" if workload else key


class Grant(models.Model):
    """What an approved request allows, kept apart from the request: pending → active → expired / revoked.

    It becomes active only when the sync shows the namespace label / exception entry in the cluster; it ends at
    `ends_at` (beat) or when revoked, and the cluster side is undone after commit.
    """

    class State(models.TextChoices):
        PENDING = "pending", "Pending (being applied)"
        ACTIVE = "active", "Active"
        EXPIRED = "expired", "Expired"
        REVOKED = "revoked", "Revoked"

    class Review(models.TextChoices):
        NONE = "", "Reviewed before the grant"
        PENDING = "pending", "Break-glass: review pending"
        CONFIRMED = "confirmed", "Break-glass: confirmed"
        REJECTED = "rejected", "Break-glass: rejected"

    request = models.OneToOneField(AccessRequest, on_delete=models.PROTECT, related_name="grant")
    kind = models.CharField(max_length=16, choices=AccessKind.choices)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    namespace = models.CharField(max_length=63)
    service_account = models.CharField(max_length=253, blank=True)
    workload = models.CharField(max_length=63, blank=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    activated_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="+")
    end_reason = models.TextField(blank=True)
    break_glass_review = models.CharField(max_length=10, choices=Review.choices, default=Review.NONE, blank=True)
    apply_attempted_at = models.DateTimeField(null=True, blank=True)
    apply_error = models.TextField(blank=True)
    cleanup_confirmed_at = models.DateTimeField(null=True, blank=True, help_text="The sync shows it undone.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = GrantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["cluster", "namespace", "state"], name="portal_grant_ns_state")]

    def __str__(self) -> str:
        return f"grant {self.pk} {self.kind} {self.namespace} ({self.state})"

    @property
    def exception_key(self) -> str:
        """The privileged-exception entry (see `exception_key`)."""
        return exception_key(self.namespace, self.service_account, self.workload)

    @property
    def legacy_exception_key(self) -> str:
        """The entry as portals before the `_` encoding wrote it (`<namespace>.<service account>[.<workload>]`),
        ambiguous: only to tell that an old-format entry of this grant is still in a cluster."""
        key = f"{self.namespace}.{self.service_account or 'default'}"
        return f"{key}.{self.workload}" if self.workload else key


class GrantUse(models.Model):
    """A claim or pod that a grant allowed (linked so one grant leads to everything it allowed)."""

    grant = models.ForeignKey(Grant, on_delete=models.CASCADE, related_name="uses")
    object_kind = models.CharField(max_length=20)
    object_uid = models.CharField(max_length=128)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    outlived_grant = models.BooleanField(default=False, help_text="Still present when the grant ended.")
    deleted_by_portal_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["first_seen_at"]
        constraints = [models.UniqueConstraint(fields=["grant", "object_uid"], name="portal_grantuse_once")]

    def __str__(self) -> str:
        return f"{self.object_kind} {self.namespace}/{self.name} under grant {self.grant_id}"


class Violation(models.Model):
    """A security finding from synced data; open while the condition holds, kept (resolved) afterwards."""

    class Kind(models.TextChoices):
        ADMIN_CLAIM_WITHOUT_GRANT = "admin-claim-without-grant", "adminAccess claim without a grant"
        ADMIN_CLAIM_OUTLIVED = "admin-claim-outlived-grant", "adminAccess claim outlived its grant"
        PRIVILEGED_WITHOUT_EXCEPTION = "privileged-without-exception", "Privileged pod without an exception"
        LABEL_DRIFT = "admin-label-drift", "admin-access label not set by the portal"
        GRANT_DRIFT = "grant-drift", "Grant and cluster disagree"
        ENFORCEMENT_MISSING = "enforcement-missing", "Admission policy missing or changed"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    namespace = models.CharField(max_length=253, blank=True)
    subject = models.CharField(max_length=600, help_text="What it is about, e.g. pod/<ns>/<name> or grant/<id>.")
    message = models.TextField()
    evidence = models.JSONField(default=dict)
    grant = models.ForeignKey(Grant, null=True, blank=True, on_delete=models.SET_NULL, related_name="violations")
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-first_seen_at"]
        constraints = [models.UniqueConstraint(fields=["cluster", "kind", "subject"],
                                               condition=models.Q(resolved_at__isnull=True),
                                               name="portal_violation_open_once")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject}"


class EnforcementSettings(models.Model):
    """Per cluster: whether the portal applies the privileged admission policy itself (otherwise a platform admin
    downloads the manifests and applies them; the portal still manages the exception object)."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="+")
    manage_admission_policy = models.BooleanField(default=True)
    privileged_applied_at = models.DateTimeField(null=True, blank=True, help_text="Last apply of the privileged scope.")

    def __str__(self) -> str:
        return f"{self.cluster_id}: manage policy={self.manage_admission_policy}"


# ------------------------------------------------------------------------------------------------ chargeback


class ChargeMapping(models.Model):
    """Which offering an allocated resource is charged as, resolved once and then frozen, so a later catalog or
    inventory change never rewrites past charges. `resource` is the interval's resource: an extended resource
    (with the node it ran on, whose labels pick the offering) or a DRA device `<driver>/<pool>/<device>`."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    resource = models.CharField(max_length=300)
    node_name = models.CharField(max_length=253, blank=True)
    offering = models.ForeignKey("catalog.Offering", null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="+", help_text="Empty: no offering matched (reported unpriced).")
    resolved_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "resource", "node_name"],
                                               name="portal_chargemapping_unique")]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.resource}@{self.node_name or '-'} → {self.offering_id}"


# ------------------------------------------------------------------------------------------------ telemetry


class TelemetrySource(models.Model):
    """Where a cluster's dcgm-exporter metrics are read (a Prometheus-compatible HTTP API) and how the last read
    went: a slow or down Prometheus is this visible state, never a stuck worker or a guessed number."""

    class State(models.TextChoices):
        UNCONFIGURED = "unconfigured", "No Prometheus configured"
        OK = "ok", "OK"
        PARTIAL = "partial", "Partial data"
        SLOW = "slow", "Prometheus too slow (timeout)"
        DOWN = "down", "Prometheus unreachable"
        ERROR = "error", "Prometheus answered with an error"

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="telemetry_source")
    prometheus_url = models.URLField(blank=True, help_text="Empty: PORTAL_PROMETHEUS_URL.")
    cluster_label = models.CharField(
        max_length=100, blank=True, default="cluster",
        help_text="Label whose value is the cluster's name in a shared Prometheus; empty: one Prometheus per cluster.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.UNCONFIGURED)
    message = models.TextField(blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    rolled_up_to = models.DateTimeField(null=True, blank=True, help_text="Every hour before this is rolled up.")

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.state}"


class UtilizationRollup(models.Model):
    """One hour of one DCGM entity (card, or MIG instance) for one holder: what it did, joined to who held it.

    Keyed like the exporter's series (UUID, GPU_I_ID, namespace/pod): a pod that moved between devices within the
    hour has one row per device, each with the samples it had there."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    device = models.ForeignKey("inventory.Device", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    device_key = models.CharField(max_length=800, blank=True, help_text="The inventory unit row's key (frozen).")
    unit_kind = models.CharField(max_length=20, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    gpu_uuid = models.CharField(max_length=128)
    gpu_index = models.CharField(max_length=8, blank=True)
    gpu_instance = models.CharField(max_length=8, blank=True, help_text="GPU_I_ID of a MIG instance.")
    gpu_profile = models.CharField(max_length=32, blank=True, help_text="GPU_I_PROFILE of a MIG instance.")
    model = models.CharField(max_length=200, blank=True)
    pod_namespace = models.CharField(max_length=253, blank=True)
    pod_name = models.CharField(max_length=253, blank=True)
    interval = models.ForeignKey("inventory.AllocationInterval", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    holder_kind = models.CharField(max_length=10, blank=True)
    holder_uid = models.CharField(max_length=128, blank=True)
    namespace = models.CharField(max_length=253, blank=True)
    holder_name = models.CharField(max_length=253, blank=True)
    resource = models.CharField(max_length=300, blank=True)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    offering = models.ForeignKey("catalog.Offering", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    samples = models.IntegerField(default=0)
    coverage = models.FloatField(default=0, help_text="Samples / samples expected at the scrape interval (0..1).")
    util_mean = models.FloatField(null=True, blank=True, help_text="Mean graphics-engine activity (0..1).")
    util_p95 = models.FloatField(null=True, blank=True)
    mem_used_mib = models.FloatField(null=True, blank=True, help_text="Largest framebuffer use in the hour.")
    energy_j = models.FloatField(null=True, blank=True)
    temp_max = models.FloatField(null=True, blank=True)
    xid_codes = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-hour", "node_name", "gpu_uuid", "gpu_instance"]
        constraints = [models.UniqueConstraint(
            fields=["cluster", "hour", "gpu_uuid", "gpu_instance", "pod_namespace", "pod_name"],
            name="portal_rollup_unique_series")]
        indexes = [
            models.Index(fields=["cluster", "hour"], name="portal_rollup_hour"),
            models.Index(fields=["holder_kind", "holder_uid", "hour"], name="portal_rollup_holder"),
            models.Index(fields=["device", "hour"], name="portal_rollup_device"),
            models.Index(fields=["offering", "hour"], name="portal_rollup_offering"),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.gpu_uuid}/{self.gpu_instance or '-'} {self.holder_name}"


class TelemetryFinding(models.Model):
    """A telemetry problem, present while the condition holds (deleted when it clears)."""

    class Kind(models.TextChoices):
        IDLE = "allocated-idle", "Allocated but idle"
        XID = "xid", "XID error"
        MISSING = "telemetry-missing", "Telemetry missing for a device that should have it"
        PLUGIN_DCGM = "plugin-healthy-dcgm-failing", "Device plugin says healthy, DCGM says failing"
        THERMAL = "thermal", "Running at its thermal limit"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=40, choices=Kind.choices)
    severity = models.CharField(max_length=10, default="warning")
    subject = models.CharField(max_length=600)
    node_name = models.CharField(max_length=253, blank=True)
    namespace = models.CharField(max_length=253, blank=True)
    tenant = models.ForeignKey(Tenant, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    offering = models.ForeignKey("catalog.Offering", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    message = models.TextField()
    action = models.TextField(blank=True)
    evidence = models.JSONField(default=dict)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "kind", "subject"]
        constraints = [models.UniqueConstraint(fields=["cluster", "kind", "subject"],
                                               name="portal_telemetryfinding_unique")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.subject}"


class IdlePolicy(models.Model):
    """When an allocated unit of an offering counts as idle (defaults: PORTAL_IDLE_THRESHOLD, PORTAL_IDLE_HOURS)."""

    offering = models.OneToOneField("catalog.Offering", on_delete=models.CASCADE, related_name="idle_policy")
    threshold = models.FloatField(help_text="Mean graphics-engine activity below which an hour is idle (0..1).")
    hours = models.PositiveIntegerField(default=1, help_text="Consecutive idle hours before the finding.")

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(threshold__gte=0) & models.Q(threshold__lte=1),
                                              name="portal_idlepolicy_threshold_fraction")]

    def __str__(self) -> str:
        return f"{self.offering_id}: < {self.threshold:.0%} for {self.hours} h"


__all__ = [
    "DEFAULT_APPROVALS",
    "DEFAULT_APPROVALS_ABOVE",
    "DEFAULT_THRESHOLD",
    "GLOBAL_VIEW_GROUPS",
    "NamespaceLabelRule",
    "Notification",
    "QuotaDecision",
    "QuotaNamespaceState",
    "QuotaNamespaceStateQuerySet",
    "QuotaOwnership",
    "QuotaPolicy",
    "QuotaRequest",
    "QuotaRequestQuerySet",
    "Tenant",
    "TenantMembership",
    "TenantNamespace",
    "TenantNamespaceQuerySet",
    "TenantQuerySet",
    "sees_all_tenants",
]
