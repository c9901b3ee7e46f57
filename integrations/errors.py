"""Errors of the integrations app; PortalError subclasses become 400 answers in the API."""

from core.errors import PortalError


class WebhookValidationError(PortalError):
    """A subscription's settings are unusable (URL scheme, secret length, unknown event types)."""
