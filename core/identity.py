"""Who a user is, for the role checks of every app: the names of their groups, read once per user object.

The authentication middleware (and DRF's authentication) loads the user again for every request, so "once per user
object" is once per request: every role check of a request (tenant scoping, the role of a page, node-name redaction,
webhook and audit permissions) shares one query instead of one each, and a role granted or revoked applies from the
next request on. Changing the groups of this very object (`user.groups.add(...)`, `.remove`, `.clear`, `.set`)
forgets what it read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models.signals import m2m_changed

_ATTR = "_portal_group_names"


def group_names(user: Any) -> frozenset[str]:
    """The user's group names; empty for anonymous and inactive users."""
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return frozenset()
    names = getattr(user, _ATTR, None)
    if names is None:
        names = frozenset(user.groups.values_list("name", flat=True))
        setattr(user, _ATTR, names)
    return names


def in_any_group(user: Any, groups: Iterable[str]) -> bool:
    """Superusers, and members of at least one of `groups`."""
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return False
    return bool(getattr(user, "is_superuser", False)) or not group_names(user).isdisjoint(groups)


def _forget(sender: Any, instance: Any, action: str, **kwargs: Any) -> None:
    if action.startswith("post_") and hasattr(instance, _ATTR):  # only user objects carry it
        delattr(instance, _ATTR)


m2m_changed.connect(_forget, dispatch_uid="core.identity.forget_group_names")
