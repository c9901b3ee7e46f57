"""API tokens: a user's (or service account's) credential for the REST API, limited to scopes, expiring, revocable.

Only a SHA-256 of the secret is stored (docs/tokens.md explains why a fast hash is right for random secrets); the
token itself is shown once when it is created. A "service account" is an ordinary Django user that is active and
has no usable password, so it can only ever authenticate with its tokens.
"""

from __future__ import annotations

from datetime import datetime
from typing import Self

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.types import RequestUser


def default_rate_limit() -> int:
    return int(getattr(settings, "PORTAL_API_TOKEN_RATE_LIMIT_PER_MINUTE", 600))


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def usable(self, *, now: datetime) -> Self:
        """Neither revoked nor expired at `now`."""
        return self.filter(revoked_at__isnull=True, expires_at__gt=now)

    def for_user(self, user: RequestUser) -> Self:
        return self.filter(user_id=getattr(user, "pk", None))


class ApiToken(models.Model):
    """One token `ap_<prefix>_<secret>`: `prefix` finds the row, `key_hash` (SHA-256 of the secret) proves it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="A label: what the token is for (shown in the audit log).")
    prefix = models.CharField(max_length=8, editable=False, help_text="Public part of the token, shown in lists.")
    key_hash = models.CharField(max_length=64, editable=False, help_text="SHA-256 (hex) of the secret part.")
    scopes = models.JSONField(default=list, help_text="e.g. ['inventory:read', 'chargeback:read'].")
    rate_limit_per_minute = models.PositiveIntegerField(default=default_rate_limit)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True, help_text="Updated at most once a minute.")

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = "API token"
        constraints = [
            models.UniqueConstraint(fields=["prefix"], name="apitokens_apitoken_unique_prefix"),
            models.CheckConstraint(condition=Q(expires_at__gt=models.F("created_at")),
                                   name="apitokens_apitoken_expires_after_created"),
            models.CheckConstraint(condition=Q(rate_limit_per_minute__gt=0),
                                   name="apitokens_apitoken_rate_limit_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix})"

    @property
    def audit_label(self) -> str:
        """How the audit log names the token (audit.services._actor): its label and public prefix, never the key."""
        return f"{self.name} #{self.prefix}"

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at <= (now or timezone.now())

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def state(self) -> str:
        if self.is_revoked:
            return "revoked"
        return "expired" if self.is_expired() else "active"
