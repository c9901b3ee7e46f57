"""The append-only, hash-chained audit log.

Every state change that matters writes one `AuditEvent` in the same transaction as the change (services call
`audit.services.audit_record`). Rows are never updated or deleted: on PostgreSQL a trigger refuses UPDATE, DELETE
and TRUNCATE, and each row carries the SHA-256 of its content chained to the previous row's hash, so editing,
removing or reordering rows behind the database's back is detectable with `audit_verify`. `AuditCheckpoint`
rows (same trigger) are HMAC-signed snapshots of the chain head, also exported outside the database, so that even
a rewrite of the whole chain by someone who can disable triggers is detectable.

This app sits at the bottom of the dependency graph (below inventory) so that every app can record events.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

# Hash format versions: 1 hashed the original columns only; 2 (rows written since 0002) also hashes actor_kind,
# before, after, reason, request_id, source_address and the version itself. See audit.chain.
HASH_V1 = 1
HASH_V2 = 2
CURRENT_HASH_VERSION = HASH_V2


class ActorKind(models.TextChoices):
    USER = "user", "User"
    TOKEN = "token", "API token"
    SYSTEM = "system", "System"


class AuditEvent(models.Model):
    """One recorded action: who did what to which object, when, from where and why, with before/after state."""

    id = models.BigAutoField(primary_key=True)
    occurred_at = models.DateTimeField(db_index=True)
    # No FK constraint: deleting a user must never touch (or be blocked by) the immutable log.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
        related_name="+",
    )
    actor_name = models.CharField(max_length=150, blank=True, help_text="Username at the time, or 'system'.")
    # Rows written before hash format 2 have '' here (never rewritten): see `effective_actor_kind`.
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices, blank=True, default="")
    verb = models.CharField(max_length=100, db_index=True, help_text="e.g. offering.created, price.changed")
    target_type = models.CharField(max_length=100, help_text="app_label.model of the target")
    target_id = models.CharField(max_length=64)
    target_repr = models.CharField(max_length=300, blank=True)
    data = models.JSONField(default=dict, blank=True)
    before = models.JSONField(null=True, blank=True, help_text="State before the change (null: not recorded).")
    after = models.JSONField(null=True, blank=True, help_text="State after the change (null: not recorded).")
    reason = models.TextField(blank=True, default="")
    request_id = models.CharField(max_length=64, blank=True, default="", db_index=True)
    source_address = models.CharField(max_length=45, blank=True, default="", help_text="Client IP address.")
    hash_version = models.PositiveSmallIntegerField(default=CURRENT_HASH_VERSION)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_event_target")]

    def __str__(self) -> str:
        return f"{self.occurred_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.verb} {self.target_repr}"

    def get_absolute_url(self) -> str:
        return reverse("audit:event_detail", kwargs={"pk": self.pk})

    @property
    def effective_actor_kind(self) -> str:
        """actor_kind, derived for rows written before it existed (a user id means a user, else the system)."""
        if self.actor_kind:
            return self.actor_kind
        return ActorKind.USER if self.actor_id is not None else ActorKind.SYSTEM


class AuditCheckpoint(models.Model):
    """An HMAC-SHA256-signed snapshot of the chain head (last id, its hash, row count). Append-only like events;
    the same line is exported outside the database by `manage.py audit_checkpoint` / the hourly task."""

    id = models.BigAutoField(primary_key=True)
    created_at = models.DateTimeField()
    last_event_id = models.BigIntegerField(null=True, blank=True, help_text="Null: the chain was empty.")
    last_hash = models.CharField(max_length=64)
    event_count = models.BigIntegerField()
    signature = models.CharField(max_length=64)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"checkpoint {self.pk} at {self.created_at:%Y-%m-%d %H:%M:%S}: head #{self.last_event_id}"
