"""Errors of the API token app. It imports no app of ours but `audit`, so these subclass Exception rather than
PortalError. Messages never contain a token or any part of its secret."""

from __future__ import annotations


class ApiTokenError(Exception):
    """Base of the API token app's errors."""


class InvalidTokenError(ApiTokenError):
    """Malformed, unknown, or the secret does not match."""


class TokenExpiredError(ApiTokenError):
    """The token is past its `expires_at`."""


class TokenRevokedError(ApiTokenError):
    """The token was revoked."""


class TokenRequestError(ApiTokenError):
    """A token cannot be created as asked (unknown scope, bad expiry, ...)."""
