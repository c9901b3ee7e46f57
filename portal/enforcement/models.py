"""Enforcement: security violations found in synced data, and per cluster whether the portal applies the
privileged admission policy itself (portal/enforcement/services.py, portal/enforcement/violations.py)."""

from __future__ import annotations

from django.db import models

from inventory.models import Cluster
from portal.access.models import Grant


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
