"""`Authorization: Bearer ap_<prefix>_<secret>`. On success `request.user` is the token's user (carrying
`api_token_scopes`, a frozenset, so lower layers such as inventory.redaction can check a scope without importing
this app) and `request.auth` is the ApiToken (audit.services records the actor as `user (token <label>)`).

Failures answer 401 with a message that never contains the token.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied

from apitokens.errors import ApiTokenError
from apitokens.models import ApiToken
from apitokens.permissions import enforces_token_scopes
from apitokens.services import api_token_touch
from apitokens.tokens import token_verify

KEYWORD = b"bearer"
SCOPES_ATTR = "api_token_scopes"


class TokenAuthentication(BaseAuthentication):
    """API tokens (apitokens.models.ApiToken) sent as a Bearer token."""

    def authenticate(self, request: Any) -> tuple[Any, ApiToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != KEYWORD:
            return None  # not ours: session authentication may apply
        if len(parts) != 2:
            raise AuthenticationFailed("Invalid Authorization header: send 'Bearer <API token>'.")
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid API token.") from None
        now = timezone.now()
        try:
            token = token_verify(raw=raw, now=now)
        except ApiTokenError as exc:
            raise AuthenticationFailed(str(exc)) from None
        user = token.user
        if not user.is_active:
            raise AuthenticationFailed(f"The user of API token {token.prefix} is inactive.")
        view = (getattr(request, "parser_context", None) or {}).get("view")
        if view is not None and not enforces_token_scopes(view):
            raise PermissionDenied("This endpoint does not accept API tokens (it does not check token scopes).")
        api_token_touch(token=token, now=now)
        setattr(user, SCOPES_ATTR, frozenset(token.scopes))
        return user, token

    def authenticate_header(self, request: Any) -> str:
        return 'Bearer realm="api"'
