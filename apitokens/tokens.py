"""The token format and its check. `ap_<prefix>_<secret>`: `ap_` makes leaked tokens greppable by secret scanners,
the 8-character prefix is public (it finds the row and is shown in lists), the secret is `secrets.token_urlsafe(32)`
(256 random bits) and only its SHA-256 is stored.

Nothing here logs, and no error message contains the token or a part of it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from apitokens.errors import InvalidTokenError, TokenExpiredError, TokenRevokedError
from apitokens.models import ApiToken

MARKER = "ap_"  # what secret scanners grep for
PREFIX_LENGTH = 8
_PREFIX_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
# token_urlsafe(32) is 43 characters of [A-Za-z0-9_-]; the prefix is lowercase letters and digits.
_TOKEN = re.compile(r"ap_(?P<prefix>[a-z0-9]{8})_(?P<secret>[A-Za-z0-9_-]{43})")


@dataclass(frozen=True, slots=True)
class NewToken:
    prefix: str
    secret: str

    @property
    def key_hash(self) -> str:
        return hash_secret(self.secret)

    def __str__(self) -> str:
        return f"{MARKER}{self.prefix}_{self.secret}"

    def __repr__(self) -> str:  # never put the secret in a traceback or a debugger's variable dump
        return f"NewToken(prefix={self.prefix!r}, secret=<hidden>)"


def token_generate() -> NewToken:
    return NewToken(prefix="".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(PREFIX_LENGTH)),
                    secret=secrets.token_urlsafe(32))


def hash_secret(secret: str) -> str:
    """SHA-256 hex of the secret: a fast hash suffices for 256 random bits (nothing to brute-force)."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def looks_like_token(text: str) -> bool:
    return _TOKEN.fullmatch(text) is not None


def token_verify(*, raw: str, now: datetime) -> ApiToken:
    """The token `raw` names, with its user, if the secret matches and it is neither revoked nor expired.

    Raises InvalidTokenError for malformed, unknown or wrong tokens (one message for all three), and only after the
    secret matched TokenRevokedError / TokenExpiredError, so a token's state is told only to its holder.
    """
    match = _TOKEN.fullmatch(raw)
    if match is None:
        raise InvalidTokenError("Invalid API token.")
    token = ApiToken.objects.select_related("user").filter(prefix=match["prefix"]).first()
    if token is None or not hmac.compare_digest(token.key_hash, hash_secret(match["secret"])):
        raise InvalidTokenError("Invalid API token.")
    if token.revoked_at is not None:
        raise TokenRevokedError(f"API token {token.prefix} was revoked.")
    if token.expires_at <= now:
        raise TokenExpiredError(f"API token {token.prefix} expired.")
    return token
