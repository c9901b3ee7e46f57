"""Scope enforcement per endpoint: every API view declares the scope a token needs; tokens without it get 403,
views without a declaration refuse tokens, and session users keep their role-based access (Basic is refused)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework import permissions
from rest_framework.test import APIClient
from rest_framework.views import APIView

from apitokens.authentication import TokenAuthentication
from apitokens.permissions import enforces_token_scopes
from apitokens.scopes import ANY_SCOPE, SCOPES
from apitokens.throttling import TokenRateThrottle
from tests.apitokens.conftest import bearer, make_token
from tests.audit.conftest import record

pytestmark = pytest.mark.django_db


def _api_views(prefix: str = "api/") -> list[tuple[str, type]]:
    """(route, view class) of every DRF view whose route starts with `prefix`."""
    found: list[tuple[str, type]] = []

    def walk(patterns: list[Any], route: str) -> None:
        for pattern in patterns:
            here = route + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, here)
            elif isinstance(pattern, URLPattern):
                cls = getattr(pattern.callback, "cls", None)
                if here.lstrip("^").startswith(prefix) and isinstance(cls, type) and issubclass(cls, APIView):
                    found.append((here, cls))

    walk(get_resolver().url_patterns, "")
    return found


def test_every_api_view_declares_a_token_scope_and_checks_it() -> None:
    """New endpoints cannot forget: a scope from the table (or "*" for the schema and the endpoint list), the
    scope check among the permission classes, and the per-token rate limit."""
    views = _api_views()
    assert len({cls for _, cls in views}) > 20, "the URL walk found too few API views"
    routes = {route for route, _ in views}
    assert any("audit-events" in r for r in routes)
    assert any("devices" in r for r in routes)
    for route, cls in views:
        scope = getattr(cls, "token_scope", None)
        assert scope in SCOPES or scope == ANY_SCOPE, f"{route} ({cls.__name__}) declares no token_scope"
        write = getattr(cls, "token_write_scope", None)
        assert write is None or write in SCOPES, f"{route} ({cls.__name__}) has an unknown token_write_scope"
        assert enforces_token_scopes(cls), f"{route} ({cls.__name__}) drops TokenScopePermission"
        if route.lstrip("^").startswith("api/v1/"):
            assert scope != ANY_SCOPE or cls.__name__ == "APIRootView", f"{route} lets any token in"
            assert TokenRateThrottle in cls.throttle_classes, f"{route} ({cls.__name__}) is not rate limited"
            assert TokenAuthentication in cls.authentication_classes, route


@pytest.fixture
def world(member, finance, platform_admin) -> dict[str, Any]:
    record(2)
    return {"member": member, "finance": finance, "admin": platform_admin}


def _status(client: APIClient, method: str, url: str, data: Any = None) -> int:
    return getattr(client, method)(url, data or {}, format="json").status_code


@pytest.mark.parametrize(("url", "scope"), [
    ("/api/v1/devices/", "inventory:read"),
    ("/api/v1/nodes/", "inventory:read"),
    ("/api/v1/catalog/offerings/", "inventory:read"),
    ("/api/v1/catalog/compatibility/?requirement=cuda%2012", "inventory:read"),
    ("/api/v1/tenants/", "inventory:read"),
    ("/api/v1/quota-requests/", "inventory:read"),
    ("/api/v1/quotas/", "inventory:read"),
    ("/api/v1/access-requests/", "inventory:read"),
    ("/api/v1/violations/", "inventory:read"),
    ("/api/v1/audit-events/", "audit:read"),
    ("/api/v1/audit-events/export/", "audit:read"),
])
def test_reads_need_their_scope(world, url: str, scope: str) -> None:
    user = world["finance"]  # an audit reader
    others = [s for s in SCOPES if s != scope]
    without = bearer(make_token(user, *others, name="without").plaintext).get(url)
    assert without.status_code == 403, url
    assert f"lacks the scope '{scope}'" in orjson.loads(without.content)["detail"]  # JSON, or one JSON line
    assert bearer(make_token(user, scope, name="with").plaintext).get(url).status_code == 200, url


def test_an_inventory_token_cannot_read_the_audit_log_but_its_user_still_can(world) -> None:
    finance = world["finance"]
    token = bearer(make_token(finance, "inventory:read").plaintext)
    assert token.get("/api/v1/audit-events/").status_code == 403
    assert token.get("/api/v1/devices/").status_code == 200
    session = APIClient()
    session.force_login(finance)
    assert session.get("/api/v1/audit-events/").status_code == 200  # role-based access, no scopes


def test_scopes_never_widen_the_users_rights(world) -> None:
    member = world["member"]  # not an audit reader
    token = bearer(make_token(member, *SCOPES).plaintext)
    assert token.get("/api/v1/audit-events/").status_code == 403
    assert _status(token, "post", "/api/v1/tenants/", {"slug": "x", "name": "X"}) == 403  # platform admins only


def test_writes_need_requests_write(world) -> None:
    member = world["member"]
    reader = bearer(make_token(member, "inventory:read", name="reader").plaintext)
    response = reader.post("/api/v1/quota-requests/", {}, format="json")
    assert response.status_code == 403
    assert "lacks the scope 'requests:write'" in response.json()["detail"]
    writer = bearer(make_token(member, "requests:write", name="writer").plaintext)
    assert _status(writer, "post", "/api/v1/quota-requests/") == 400  # past the scope check: input validation
    assert _status(writer, "get", "/api/v1/quota-requests/") == 403  # writing is not reading
    assert _status(writer, "post", "/api/v1/access-requests/") == 400


@pytest.mark.parametrize(("url", "body"), [
    ("/api/v1/tenants/", {"slug": "newco", "name": "NewCo"}),
    ("/api/v1/webhooks/", {"name": "cmdb", "url": "https://93.184.215.14/hook", "secret": "s" * 32,
                           "event_types": ["node."]}),
])
def test_admin_only_writes_need_admin_write_not_requests_write(world, url: str, body: dict[str, Any]) -> None:
    admin = world["admin"]
    writer = bearer(make_token(admin, *[s for s in SCOPES if s != "admin:write"], name="writer").plaintext)
    refused = writer.post(url, body, format="json")
    assert refused.status_code == 403, refused.content
    assert "lacks the scope 'admin:write'" in refused.json()["detail"]
    adminish = bearer(make_token(admin, "admin:write", name="admin").plaintext)
    created = adminish.post(url, body, format="json")
    assert created.status_code == 201, created.content
    assert _status(adminish, "get", url) == 403  # writing is not reading


def test_admin_only_actions_need_admin_write(world) -> None:
    admin = world["admin"]
    writer = bearer(make_token(admin, "inventory:read", "requests:write", name="writer").plaintext)
    for url in ("/api/v1/access-requests/break-glass/", "/api/v1/tenants/newco/members/"):
        response = writer.post(url, {}, format="json")
        assert response.status_code == 403, (url, response.content)
        assert "lacks the scope 'admin:write'" in response.json()["detail"]
    assert _status(writer, "post", "/api/v1/access-requests/") == 400  # an ordinary request: requests:write
    adminish = bearer(make_token(admin, "admin:write", name="admin").plaintext)
    assert _status(adminish, "post", "/api/v1/access-requests/break-glass/") == 400  # past the scope: input
    assert _status(adminish, "post", "/api/v1/access-requests/") == 403  # admin:write is not requests:write


def test_read_only_computations_by_post_need_inventory_read(world) -> None:
    member = world["member"]
    reader = bearer(make_token(member, "inventory:read", name="reader").plaintext)
    validated = reader.post("/api/v1/manifests/validate/", {"manifest": "apiVersion: v1\nkind: Pod\n"},
                            format="json")
    assert validated.status_code == 200, validated.content
    assert _status(reader, "post", "/api/v1/feasibility/") == 400  # past the scope check
    other = bearer(make_token(member, "chargeback:read", name="other").plaintext)
    assert _status(other, "post", "/api/v1/manifests/validate/") == 403
    assert _status(other, "post", "/api/v1/manifests/generate/") == 403


def test_curator_writes_need_requests_write_and_the_permission(world) -> None:
    admin = world["admin"]
    reader = bearer(make_token(admin, "inventory:read", name="reader").plaintext)
    assert _status(reader, "post", "/api/v1/catalog/offerings/") == 403
    writer = bearer(make_token(admin, "inventory:read", "requests:write", name="writer").plaintext)
    assert _status(writer, "post", "/api/v1/catalog/offerings/") == 400  # scope and curator permission passed


def test_the_schema_and_endpoint_list_take_any_valid_token(world) -> None:
    token = bearer(make_token(world["member"], "chargeback:read").plaintext)
    assert token.get("/api/schema/").status_code == 200
    assert token.get("/api/v1/").status_code == 200
    assert APIClient().get("/api/schema/").status_code == 200  # the schema stays public
    assert bearer("ap_abcdefgh_" + "x" * 43).get("/api/schema/").status_code == 401  # but a bad token is bad


def test_views_that_declare_no_scope_refuse_tokens(world, rf) -> None:
    from rest_framework.request import Request

    class Undeclared(APIView):
        def get(self, request: Request) -> Any:
            return None

    class Dropped(APIView):
        token_scope = "inventory:read"
        permission_classes = [permissions.IsAuthenticated]  # forgot the defaults

        def get(self, request: Request) -> Any:
            return None

    plaintext = make_token(world["member"], *SCOPES).plaintext
    for view in (Undeclared, Dropped):
        response = view.as_view()(rf.get("/", HTTP_AUTHORIZATION=f"Bearer {plaintext}"))
        response.render()
        assert response.status_code == 403, view.__name__
        assert "does not accept API tokens" in response.data["detail"]


def test_session_requests_are_unaffected_and_basic_is_refused(world) -> None:
    session = APIClient()
    session.force_login(world["member"])
    assert session.get("/api/v1/devices/").status_code == 200
    basic = APIClient()
    basic.credentials(HTTP_AUTHORIZATION="Basic ZmluYW5jZTpwdw==")  # finance:pw
    refused = basic.get("/api/v1/audit-events/")
    assert refused.status_code == 401  # no passwords on the API: tokens or sessions (docs/tokens.md)
    assert refused["WWW-Authenticate"] == 'Bearer realm="api"'


def test_anonymous_api_calls_answer_401_with_a_bearer_challenge(db) -> None:
    response = APIClient().get("/api/v1/devices/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'

