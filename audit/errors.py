"""Errors of the audit app. It imports no app of ours, so these subclass Exception rather than PortalError."""

from __future__ import annotations


class AuditError(Exception):
    """Base of the audit app's errors."""


class CheckpointKeyMissingError(AuditError):
    """PORTAL_AUDIT_CHECKPOINT_KEY is not set (or too short): checkpoints can be neither written nor verified."""


class DatabaseRoleError(AuditError):
    """The database roles would leave the append-only triggers in the application's reach (audit.database)."""
