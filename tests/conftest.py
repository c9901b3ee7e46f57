"""Shared fixtures: users per role. Each test creates the rows it asserts on."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from portal.roles import Role


def make_user(username: str, *roles: Role, superuser: bool = False) -> User:
    user = User.objects.create_user(username=username, password="pw", is_superuser=superuser, is_staff=superuser)
    for role in roles:
        user.groups.add(Group.objects.get_or_create(name=role.value)[0])
    return user


@pytest.fixture
def member(db: None) -> User:
    return make_user("member", Role.TENANT_MEMBER)


@pytest.fixture
def lead(db: None) -> User:
    return make_user("lead", Role.TENANT_LEAD, Role.TENANT_MEMBER)


@pytest.fixture
def approver(db: None) -> User:
    return make_user("approver", Role.APPROVER)


@pytest.fixture
def security_approver(db: None) -> User:
    return make_user("security", Role.SECURITY_APPROVER)


@pytest.fixture
def platform_admin(db: None) -> User:
    return make_user("admin", Role.PLATFORM_ADMIN, superuser=True)


@pytest.fixture
def finance(db: None) -> User:
    return make_user("finance", Role.FINANCE)
