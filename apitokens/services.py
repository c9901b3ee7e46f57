"""Writes of the API token app. Entry points are durable transactions that write their audit event (Zulip's rule);
the plaintext token exists only in the value `api_token_create` returns."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from apitokens.errors import TokenRequestError
from apitokens.models import ApiToken, default_rate_limit
from apitokens.scopes import scopes_parse
from apitokens.tokens import token_generate
from audit.services import audit_record
from core.types import RequestUser

LAST_USED_RESOLUTION = timedelta(minutes=1)  # last_used_at is written at most this often per token
_DURATION = re.compile(r"(?P<n>\d{1,4})(?P<unit>[dh])")


def max_lifetime() -> timedelta:
    return timedelta(days=int(getattr(settings, "PORTAL_API_TOKEN_MAX_DAYS", 365)))


@dataclass(frozen=True)
class CreatedToken:
    """The new row and the token string, which is never stored and cannot be shown again."""

    token: ApiToken
    plaintext: str

    def __repr__(self) -> str:
        return f"CreatedToken(token={self.token.prefix!r}, plaintext=<hidden>)"


def expiry_parse(text: str, *, now: datetime) -> datetime:
    """`90d` / `12h` from now, a date (valid through that day, UTC) or an ISO 8601 datetime (UTC if naive)."""
    text = text.strip()
    duration = _DURATION.fullmatch(text)
    if duration:
        n = int(duration["n"])
        return now + (timedelta(days=n) if duration["unit"] == "d" else timedelta(hours=n))
    try:
        if len(text) == 10:
            day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC).date()
            return datetime.combine(day + timedelta(days=1), time.min, tzinfo=UTC)
        value = datetime.fromisoformat(text)
    except ValueError:
        raise TokenRequestError(f"Cannot read the expiry {text[:40]!r}: give e.g. 90d, 12h or 2027-01-31.") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _check_request(*, name: str, expires_at: datetime, now: datetime, rate_limit: int) -> None:
    if not name:
        raise TokenRequestError("Give the token a name (what it is for).")
    if len(name) > (ApiToken._meta.get_field("name").max_length or 100):
        raise TokenRequestError("A token name is at most 100 characters.")
    if expires_at <= now:
        raise TokenRequestError("The expiry must be in the future.")
    if expires_at > now + max_lifetime():
        raise TokenRequestError(f"A token expires within {max_lifetime().days} days.")
    if rate_limit < 1:
        raise TokenRequestError("The rate limit is at least 1 request per minute.")


@transaction.atomic(durable=True)
def api_token_create(
    *,
    actor: RequestUser | None,
    user: User,
    name: str,
    scopes: list[str] | str,
    expires_at: datetime,
    rate_limit_per_minute: int | None = None,
) -> CreatedToken:
    """Create a token for `user`. People create their own; `actor=None` (a command) or a superuser may create one
    for anybody. Audited as `api_token.created` (prefix, name, scopes, expiry; never the secret or its hash)."""
    if actor is not None and getattr(actor, "pk", None) != user.pk and not getattr(actor, "is_superuser", False):
        raise TokenRequestError("You may create tokens only for yourself.")
    if not user.is_active:
        raise TokenRequestError(f"User {user.get_username()} is inactive.")
    try:
        scope_list = scopes_parse(scopes)
    except ValueError as exc:
        raise TokenRequestError(str(exc)) from None
    now = timezone.now()
    name = (name or "").strip()
    rate_limit = default_rate_limit() if rate_limit_per_minute is None else rate_limit_per_minute
    _check_request(name=name, expires_at=expires_at, now=now, rate_limit=rate_limit)

    for _attempt in range(5):  # 36^8 prefixes: a collision is rare, and then we simply draw again
        new = token_generate()
        try:
            with transaction.atomic():
                token = ApiToken.objects.create(
                    user=user, name=name, prefix=new.prefix, key_hash=new.key_hash, scopes=scope_list,
                    rate_limit_per_minute=rate_limit, created_at=now, expires_at=expires_at,
                )
            break
        except IntegrityError:
            if not ApiToken.objects.filter(prefix=new.prefix).exists():
                raise
    else:  # pragma: no cover - five collisions in a row
        raise TokenRequestError("Could not draw a unique token prefix; try again.")
    audit_record(actor=actor, verb="api_token.created", target=token, after=_state(token))
    return CreatedToken(token=token, plaintext=str(new))


@transaction.atomic(durable=True)
def api_token_revoke(*, actor: RequestUser | None, token_id: int, reason: str = "") -> ApiToken:
    """Revoke a token at once (its next request answers 401). Owners revoke their own; `actor=None` (a command) or
    a superuser any. Revoking a revoked token is a no-op."""
    token = ApiToken.objects.select_for_update().select_related("user").get(pk=token_id)
    if actor is not None and getattr(actor, "pk", None) != token.user_id and not getattr(actor, "is_superuser", False):
        raise TokenRequestError("You may revoke only your own tokens.")
    if token.revoked_at is not None:
        return token
    before = {"revoked_at": None}
    token.revoked_at = timezone.now()
    token.revoked_by = actor if isinstance(actor, User) and actor.is_authenticated else None
    token.save(update_fields=["revoked_at", "revoked_by"])
    audit_record(actor=actor, verb="api_token.revoked", target=token, before=before,
                 after={"revoked_at": token.revoked_at}, data={"prefix": token.prefix, "user": token.user.get_username()},
                 reason=reason)
    return token


def api_token_touch(*, token: ApiToken, now: datetime) -> None:
    """Record use, at most once per LAST_USED_RESOLUTION per token: one conditional UPDATE (no transaction, not
    audited), skipped entirely while the loaded row is recent enough."""
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)
    token.last_used_at = now


@transaction.atomic(durable=True)
def service_account_create(*, actor: RequestUser | None, username: str) -> User:
    """A user that is active and has no usable password: it can only authenticate with API tokens."""
    user_model = get_user_model()
    if user_model.objects.filter(username=username).exists():
        raise TokenRequestError(f"User {username} already exists.")
    user = user_model(username=username, is_active=True)
    user.set_unusable_password()
    try:
        user.full_clean(exclude=["password"])
    except ValidationError as exc:
        raise TokenRequestError("; ".join(exc.messages)) from None
    user.save()
    audit_record(actor=actor, verb="user.service_account_created", target=user, after={"username": username})
    return user


def is_service_account(user: RequestUser) -> bool:
    return bool(user.is_active and not user.has_usable_password())


def _state(token: ApiToken) -> dict[str, Any]:
    return {"user": token.user.get_username(), "name": token.name, "prefix": token.prefix, "scopes": token.scopes,
            "expires_at": token.expires_at, "rate_limit_per_minute": token.rate_limit_per_minute}
