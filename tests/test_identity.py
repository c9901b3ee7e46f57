"""Role checks read the user's groups once per request (core.identity), and a change of roles applies at once.

A page or an API answer asks several questions of the same user (may they see every tenant, are they a curator,
may they see node names and serials, do they see the audit link): each used to be its own query on auth_user_groups.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from core.identity import group_names, in_any_group
from portal.tenancy.models import sees_all_tenants
from portal.tenancy.roles import Role, user_has_role
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory, NodeFactory
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.django_db

# (persona, URL): pages and answers that ask several role questions of one user.
URLS = [
    ("ada", "/inventory/accelerators/"),
    ("ada", "/inventory/nodes/"),
    ("ada", "/api/v1/nodes/"),
    ("ada", "/catalog/"),
    ("mia", "/inventory/nodes/"),
    ("mia", "/api/v1/nodes/"),
    ("mia", "/catalog/"),
    ("fay", "/chargeback/"),
    ("fay", "/tenants/"),
]


def _group_reads(queries: list[dict[str, str]]) -> int:
    return sum('"auth_user_groups"' in q["sql"] for q in queries)


@pytest.fixture
def world() -> None:
    cluster = ClusterFactory(name="c1")
    NodeFactory(cluster=cluster, name="gpu-1")
    make_user("ada", Role.PLATFORM_ADMIN)
    make_user("fay", Role.FINANCE)
    give_namespaces(make_user("mia", Role.TENANT_MEMBER), cluster, "ml", tenant_slug="ml")


@pytest.mark.parametrize(("persona", "url"), URLS, ids=[f"{p} {u}" for p, u in URLS])
def test_a_request_reads_the_users_groups_at_most_once(world: None, persona: str, url: str) -> None:
    from django.contrib.auth.models import User

    client = Client()
    client.force_login(User.objects.get(username=persona))
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    assert _group_reads(captured.captured_queries) <= 1, [
        q["sql"] for q in captured.captured_queries if '"auth_user_groups"' in q["sql"]]


def test_the_role_checks_share_one_read_and_forget_it_when_the_groups_change() -> None:
    user = make_user("lee", Role.TENANT_MEMBER)
    with CaptureQueriesContext(connection) as captured:
        assert not sees_all_tenants(user)
        assert user_has_role(user, Role.TENANT_MEMBER)
        assert not user_has_role(user, Role.FINANCE)
        assert group_names(user) == {Role.TENANT_MEMBER.value}
    assert _group_reads(captured.captured_queries) == 1

    user.groups.add(Group.objects.get_or_create(name=Role.FINANCE.value)[0])
    assert sees_all_tenants(user)
    assert user_has_role(user, Role.FINANCE)
    user.groups.clear()
    assert not user_has_role(user, Role.TENANT_MEMBER)


def test_inactive_and_anonymous_users_have_no_roles() -> None:
    from django.contrib.auth.models import AnonymousUser

    admin = make_user("old-admin", Role.PLATFORM_ADMIN, superuser=True)
    admin.is_active = False
    assert not in_any_group(admin, [Role.PLATFORM_ADMIN.value])
    assert not sees_all_tenants(admin)
    assert group_names(admin) == frozenset()
    assert not in_any_group(AnonymousUser(), [Role.PLATFORM_ADMIN.value])
