"""AuditContextMiddleware: request ids (sane caller-supplied ones kept, hostile ones replaced, always echoed) and
client addresses (REMOTE_ADDR; X-Forwarded-For only from trusted proxies) reach audit_record."""

from __future__ import annotations

import re

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory

from audit.context import client_address, current_context
from audit.middleware import AuditContextMiddleware
from audit.models import ActorKind, AuditEvent

NEW_ID = re.compile(r"[0-9a-f]{32}")


def _through_middleware(**headers: str) -> tuple[HttpResponse, dict[str, str]]:
    seen: dict[str, str] = {}

    def view(request: HttpRequest) -> HttpResponse:
        context = current_context()
        seen.update(request_id=context.request_id, source_address=context.source_address)
        return HttpResponse("ok")

    request = RequestFactory().get("/", **headers)
    response = AuditContextMiddleware(view)(request)
    return response, seen


def test_a_sane_request_id_is_kept_and_echoed() -> None:
    response, seen = _through_middleware(HTTP_X_REQUEST_ID="abc-123_DEF.4")
    assert seen["request_id"] == "abc-123_DEF.4"
    assert response["X-Request-ID"] == "abc-123_DEF.4"
    assert current_context().request_id == ""  # reset after the request


@pytest.mark.parametrize("hostile", [
    "", "a" * 65, "id with spaces", "<script>alert(1)</script>", "x;rm -rf /", "ünicode", "a/b", "id\tx",
    "' OR 1=1 --",
])
def test_hostile_or_missing_request_ids_are_replaced(hostile: str) -> None:
    response, seen = _through_middleware(HTTP_X_REQUEST_ID=hostile)
    assert NEW_ID.fullmatch(seen["request_id"])
    assert response["X-Request-ID"] == seen["request_id"]


def test_each_request_gets_its_own_id() -> None:
    first, _ = _through_middleware()
    second, _ = _through_middleware()
    assert first["X-Request-ID"] != second["X-Request-ID"]


def test_source_address_is_remote_addr_and_forwarded_for_is_ignored_by_default(settings) -> None:
    settings.PORTAL_TRUSTED_PROXIES = []
    _, seen = _through_middleware(REMOTE_ADDR="198.51.100.4", HTTP_X_FORWARDED_FOR="1.2.3.4")
    assert seen["source_address"] == "198.51.100.4"


def test_forwarded_for_is_believed_only_from_a_trusted_proxy(settings) -> None:
    settings.PORTAL_TRUSTED_PROXIES = ["10.0.0.0/8"]
    _, seen = _through_middleware(REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="203.0.113.50")
    assert seen["source_address"] == "203.0.113.50"
    _, seen = _through_middleware(REMOTE_ADDR="198.51.100.4", HTTP_X_FORWARDED_FOR="203.0.113.50")
    assert seen["source_address"] == "198.51.100.4"


@pytest.mark.parametrize(("remote", "forwarded", "expected"), [
    # The client sent its own X-Forwarded-For; the proxy appended the real address: the rightmost untrusted wins.
    ("10.0.0.1", "6.6.6.6, 203.0.113.50", "203.0.113.50"),
    # Two trusted proxies in a row.
    ("10.0.0.1", "203.0.113.50, 10.0.0.2", "203.0.113.50"),
    # Garbage stops the walk at the last address a trusted proxy vouched for.
    ("10.0.0.1", "203.0.113.50, not-an-ip", "10.0.0.1"),
    ("10.0.0.1", "", "10.0.0.1"),
    # IPv6 and IPv4-mapped IPv6 are normalized.
    ("10.0.0.1", "2001:DB8::0001", "2001:db8::1"),
    ("::ffff:10.0.0.1", "::ffff:203.0.113.50", "203.0.113.50"),
    ("not-an-ip", "203.0.113.50", ""),
])
def test_client_address_walks_trusted_proxies(remote: str, forwarded: str, expected: str) -> None:
    assert client_address(remote, forwarded, ["10.0.0.0/8", "bogus-entry"]) == expected


@pytest.mark.django_db
@pytest.mark.urls("tests.audit.urls")
def test_events_recorded_during_a_request_carry_its_id_and_address(client, finance) -> None:
    client.force_login(finance)
    response = client.get("/record/", HTTP_X_REQUEST_ID="trace-42", REMOTE_ADDR="192.0.2.10")
    assert response["X-Request-ID"] == "trace-42"
    event = AuditEvent.objects.get(pk=response.json()["id"])
    assert (event.request_id, event.source_address) == ("trace-42", "192.0.2.10")
    assert (event.actor_name, event.actor_kind) == ("finance", ActorKind.USER)


@pytest.mark.django_db
def test_every_portal_response_carries_a_request_id(client) -> None:
    response = client.get("/login/")
    assert NEW_ID.fullmatch(response["X-Request-ID"])
