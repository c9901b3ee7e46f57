"""/account/tokens/: list, create (the value shown once, on the answer only), revoke; audited; own tokens only."""

from __future__ import annotations

import pytest
from django.test import Client

from apitokens.models import ApiToken
from audit.models import AuditEvent
from tests.apitokens.conftest import bearer, make_token

pytestmark = pytest.mark.django_db

PAGE = "/account/tokens/"


@pytest.fixture
def browser(member) -> Client:
    client = Client()
    client.force_login(member)
    return client


def test_anonymous_users_go_to_the_login_page(client) -> None:
    assert client.get(PAGE).status_code == 302


def test_create_shows_the_token_once(browser, member) -> None:
    assert "No API tokens yet" in browser.get(PAGE).content.decode()
    response = browser.post(PAGE, {"name": "laptop", "scopes": ["inventory:read", "chargeback:read"],
                                   "expires_in_days": 30})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    token = ApiToken.objects.get(user=member)
    html = response.content.decode()
    start = html.index(f"ap_{token.prefix}_")
    plaintext = html[start:].split("<", 1)[0]
    assert bearer(plaintext).get("/api/v1/clusters/").status_code == 200
    secret = plaintext.split("_", 2)[2]
    listed = browser.get(PAGE).content.decode()
    assert token.prefix in listed
    assert "laptop" in listed
    assert "chargeback:read" in listed
    assert secret not in listed  # never again
    assert not list(response.wsgi_request._messages)  # not passed through the message store either
    assert AuditEvent.objects.get(verb="api_token.created").actor_name == "member"


def test_invalid_input_creates_nothing(browser) -> None:
    response = browser.post(PAGE, {"name": "x", "expires_in_days": 999})
    assert response.status_code == 200
    html = response.content.decode()
    assert "This field is required" in html
    assert "at most 365" in html.lower()
    assert not ApiToken.objects.exists()


def test_revoke_own_tokens_only(browser, member, lead) -> None:
    mine = make_token(member, "inventory:read")
    theirs = make_token(lead, "inventory:read")
    assert browser.post(f"{PAGE}{theirs.token.pk}/revoke/").status_code == 404
    response = browser.post(f"{PAGE}{mine.token.pk}/revoke/", follow=True)
    assert "revoked" in response.content.decode()
    assert ApiToken.objects.get(pk=mine.token.pk).revoked_at is not None
    assert ApiToken.objects.get(pk=theirs.token.pk).revoked_at is None
    assert AuditEvent.objects.get(verb="api_token.revoked").actor_name == "member"
    assert bearer(mine.plaintext).get("/api/v1/clusters/").status_code == 401


def test_tokens_cannot_manage_tokens(member) -> None:
    plaintext = make_token(member, *["inventory:read", "requests:write"]).plaintext
    client = Client(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert client.get(PAGE).status_code == 302  # pages take sessions only
