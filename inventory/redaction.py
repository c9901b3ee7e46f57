"""Who may see hardware identifiers, and how they are hidden from everybody else. The ONE place for this rule.

Sensitive: any attribute/key whose name contains ``uuid``, ``serial``, ``pciBusID`` or ``pcieRoot`` (case-insensitive,
so ``resource.kubernetes.io/pciBusID`` and ``parentUUID`` match), the ``parent`` card of a DRA partition, and any
key named ``parent``. Platform roles (platform-admin, approver, security-approver, superusers) see them; tenant roles
(tenant-member, tenant-lead) and finance see ``REDACTED``; so does an API token without the ``inventory:sensitive``
scope, whoever its user is. Pages and API both call these functions.
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings

REDACTED = "redacted"
_SENSITIVE_NAME = re.compile(r"uuid|serial|pcibusid|pcieroot", re.IGNORECASE)
_CACHE_ATTR = "_portal_can_see_sensitive"
# API token requests: the authentication sets this frozenset of scopes on the user (apitokens, not imported here).
_SCOPES_ATTR = "api_token_scopes"
SENSITIVE_SCOPE = "inventory:sensitive"


def can_see_sensitive(user: Any) -> bool:
    """True for superusers and members of a platform role; cached on the user object (one query per request).

    A request authenticated with an API token also needs the token's `inventory:sensitive` scope, whatever the
    user's roles. That check comes before the cache and costs nothing, so the cached role answer stays valid.
    """
    if not getattr(user, "is_authenticated", False):
        return False
    token_scopes = getattr(user, _SCOPES_ATTR, None)
    if token_scopes is not None and SENSITIVE_SCOPE not in token_scopes:
        return False
    cached = getattr(user, _CACHE_ATTR, None)
    if cached is None:
        groups = settings.PORTAL_SENSITIVE_DATA_GROUPS  # inventory knows group names, not the portal's roles
        cached = bool(user.is_superuser) or user.groups.filter(name__in=groups).exists()
        setattr(user, _CACHE_ATTR, cached)
    return cached


def is_sensitive_name(name: object) -> bool:
    """``uuid``/``serial``/``pciBusID``/``pcieRoot`` anywhere in the name, or a last path segment ``parent``."""
    text = str(name)
    return bool(_SENSITIVE_NAME.search(text)) or text.rsplit("/", 1)[-1].lower() == "parent"


def redact_tree(value: Any, user: Any) -> Any:
    """A copy of a JSON value with the values of sensitive keys (at any depth) replaced by REDACTED."""
    if can_see_sensitive(user):
        return value
    return redact_json(value)


def redact_json(value: Any) -> Any:
    """A copy of a JSON value with the values of sensitive keys (at any depth) replaced by REDACTED."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_sensitive_name(k) else redact_json(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_json(item) for item in value]
    return value



def redact_attributes(attrs: Any, user: Any) -> dict[str, Any]:
    """DRA attributes/capacities (``{"uuid": {"string": "GPU-…"}}``) with sensitive values hidden from non-platform users."""
    if not isinstance(attrs, dict):
        return {}
    return redact_tree(attrs, user)


def redact_value(name: str, value: Any, user: Any) -> Any:
    """One named value (e.g. ``Device.parent``): REDACTED when the name is sensitive and the user may not see it."""
    if value in ("", None) or can_see_sensitive(user) or not is_sensitive_name(name):
        return value
    return REDACTED
