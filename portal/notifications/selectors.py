"""Who is told: the active users holding a role (roles are groups)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User

from portal.tenancy.roles import Role


def users_with_role(role: Role) -> list[User]:
    return list(get_user_model().objects.filter(groups__name=role.value, is_active=True).distinct())


def approvers() -> list[User]:
    return users_with_role(Role.APPROVER)
