"""Access exceptions: adminAccess and privileged exceptions, requested for a bounded window, reviewed by security
approvers, and the grants they issue (portal/access/services.py; enforced by portal/enforcement/)."""

from __future__ import annotations

from typing import Self

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import models
from django.urls import reverse

from inventory.models import Cluster
from portal.tenancy.models import Tenant


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
    def visible_to(self, user: User | AnonymousUser) -> Self:
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
    def visible_to(self, user: User | AnonymousUser) -> Self:
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
