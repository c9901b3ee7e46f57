"""Scope enforcement per endpoint for token-authenticated requests. Session requests are unaffected (their users
keep their role-based access); a token acts as its user *and* is limited to its scopes.

Views declare what they need with plain class attributes, so no app imports this one:
`token_scope` for safe methods, `token_write_scope` for the others (default `requests:write`). A view without
`token_scope` refuses tokens (fail closed).
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

from apitokens.models import ApiToken
from apitokens.scopes import ANY_SCOPE, DEFAULT_WRITE_SCOPE


def required_scope(view: Any, method: str) -> str | None:
    """The scope a token needs for `method` on `view`; None: the view accepts no token."""
    read_scope = getattr(view, "token_scope", None)
    if not read_scope:
        return None
    if method in SAFE_METHODS:
        return str(read_scope)
    return str(getattr(view, "token_write_scope", None) or DEFAULT_WRITE_SCOPE)


def enforces_token_scopes(view: Any) -> bool:
    """Whether the view's permission classes include the scope check (TokenAuthentication refuses tokens on views
    that override `permission_classes` without it, so a forgotten default cannot widen a token)."""
    return any(isinstance(cls, type) and issubclass(cls, TokenScopePermission)
               for cls in getattr(view, "permission_classes", ()))


class TokenScopePermission(BasePermission):
    message = "This API token may not call this endpoint."

    def has_permission(self, request: Any, view: Any) -> bool:
        token = getattr(request, "auth", None)
        if not isinstance(token, ApiToken):
            return True  # session / anonymous: other permission classes decide
        needed = required_scope(view, request.method)
        if needed is None:
            self.message = "This endpoint does not accept API tokens (it declares no token scope)."
            return False
        if needed == ANY_SCOPE or needed in token.scopes:
            return True
        self.message = f"This API token lacks the scope '{needed}' required for {request.method} here."
        return False
