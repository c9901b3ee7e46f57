"""The append-only, hash-chained audit log.

Every state change that matters writes one `AuditEvent` in the same transaction as the change (services call
`audit.services.audit_record`). Rows are never updated or deleted: on PostgreSQL a trigger refuses UPDATE, DELETE
and TRUNCATE, and each row carries the SHA-256 of its content chained to the previous row's hash, so editing or
removing a row behind the database's back is detectable with `audit_verify`.

This app sits at the bottom of the dependency graph (below inventory) so that every app can record events.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEvent(models.Model):
    """One recorded action: who did what to which object, with the details needed to reconstruct it."""

    id = models.BigAutoField(primary_key=True)
    occurred_at = models.DateTimeField(db_index=True)
    # No FK constraint: deleting a user must never touch (or be blocked by) the immutable log.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
        related_name="+",
    )
    actor_name = models.CharField(max_length=150, blank=True, help_text="Username at the time, or 'system'.")
    verb = models.CharField(max_length=100, db_index=True, help_text="e.g. offering.created, price.changed")
    target_type = models.CharField(max_length=100, help_text="app_label.model of the target")
    target_id = models.CharField(max_length=64)
    target_repr = models.CharField(max_length=300, blank=True)
    data = models.JSONField(default=dict, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_event_target")]

    def __str__(self) -> str:
        return f"{self.occurred_at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.verb} {self.target_repr}"
