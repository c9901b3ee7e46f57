"""Token format, hashed storage, verification, expiry, revocation, last use, and the audit trail of writes."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from apitokens.errors import TokenRequestError
from apitokens.models import ApiToken
from apitokens.services import (
    LAST_USED_RESOLUTION,
    api_token_create,
    api_token_revoke,
    expiry_parse,
    service_account_create,
)
from apitokens.tokens import looks_like_token
from audit.models import ActorKind, AuditEvent
from tests.apitokens.conftest import bearer, make_token
from tests.inventory.factories import ClusterFactory

pytestmark = pytest.mark.django_db

DEVICES = "/api/v1/devices/"


def test_the_token_is_greppable_and_only_its_hash_is_stored(member) -> None:
    created = make_token(member, "inventory:read")
    plaintext, token = created.plaintext, created.token
    assert looks_like_token(plaintext)
    assert plaintext.startswith(f"ap_{token.prefix}_")
    secret = plaintext.split("_", 2)[2]
    assert len(secret) >= 43
    assert token.key_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in repr(created)
    assert plaintext not in repr(created)

    with connection.cursor() as cursor:  # every column of the row, as the database holds it
        cursor.execute("SELECT * FROM apitokens_apitoken WHERE id = %s", [token.pk])
        row = " ".join(str(value) for value in cursor.fetchone())
    assert secret not in row
    assert plaintext not in row
    assert token.prefix in row


def test_lookup_is_by_prefix_then_hash_a_wrong_secret_is_refused(member) -> None:
    plaintext = make_token(member, "inventory:read").plaintext
    assert bearer(plaintext).get(DEVICES).status_code == 200
    wrong = plaintext[:-4] + ("AAAA" if not plaintext.endswith("AAAA") else "BBBB")
    response = bearer(wrong).get(DEVICES)
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid API token."}
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


@pytest.mark.parametrize("header", ["Bearer", "Bearer a b", "Bearer not-a-token", "Bearer ap_short_x",
                                    "Bearer ap_abcdefgh_" + "x" * 43])
def test_malformed_or_unknown_tokens_get_401_without_echo(member, header: str) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(DEVICES)
    assert response.status_code == 401
    value = header.split(" ", 1)[1] if " " in header else ""
    assert not value or value not in response.content.decode()


def test_expired_tokens_get_401(member) -> None:
    created = make_token(member, "inventory:read")
    client = bearer(created.plaintext)
    assert client.get(DEVICES).status_code == 200
    ApiToken.objects.filter(pk=created.token.pk).update(created_at=timezone.now() - timedelta(days=2),
                                                        expires_at=timezone.now() - timedelta(seconds=1))
    response = client.get(DEVICES)
    assert response.status_code == 401
    assert response.json()["detail"] == f"API token {created.token.prefix} expired."


def test_revoked_tokens_get_401_at_once_and_revoking_is_audited(member) -> None:
    created = make_token(member, "inventory:read")
    client = bearer(created.plaintext)
    assert client.get(DEVICES).status_code == 200
    api_token_revoke(actor=member, token_id=created.token.pk, reason="leaked in a CI log")
    response = client.get(DEVICES)
    assert response.status_code == 401
    assert response.json()["detail"] == f"API token {created.token.prefix} was revoked."
    token = ApiToken.objects.get(pk=created.token.pk)
    assert token.revoked_by == member
    assert token.revoked_at is not None
    event = AuditEvent.objects.get(verb="api_token.revoked")
    assert event.actor_name == "member"
    assert event.reason == "leaked in a CI log"
    assert event.target_id == str(token.pk)
    assert event.data["prefix"] == token.prefix
    # Idempotent: no second event.
    api_token_revoke(actor=member, token_id=token.pk)
    assert AuditEvent.objects.filter(verb="api_token.revoked").count() == 1


def test_only_the_owner_or_a_superuser_revokes(member, lead, platform_admin) -> None:
    created = make_token(member, "inventory:read")
    with pytest.raises(TokenRequestError):
        api_token_revoke(actor=lead, token_id=created.token.pk)
    api_token_revoke(actor=platform_admin, token_id=created.token.pk)
    assert ApiToken.objects.get(pk=created.token.pk).revoked_by == platform_admin


def test_creation_is_audited_without_the_secret(member) -> None:
    created = make_token(member, "inventory:read", "chargeback:read", name="cmdb-sync")
    event = AuditEvent.objects.get(verb="api_token.created")
    assert event.actor_name == "member"
    assert event.actor_kind == ActorKind.USER
    assert event.target_type == "apitokens.apitoken"
    assert event.target_id == str(created.token.pk)
    assert event.after["scopes"] == ["chargeback:read", "inventory:read"]
    assert event.after["prefix"] == created.token.prefix
    assert event.after["name"] == "cmdb-sync"
    secret = created.plaintext.split("_", 2)[2]
    for value in (event.data, event.before, event.after, event.target_repr, event.actor_name):
        assert secret not in str(value)
        assert created.token.key_hash not in str(value)


def test_inactive_users_tokens_get_401(member) -> None:
    plaintext = make_token(member, "inventory:read").plaintext
    User.objects.filter(pk=member.pk).update(is_active=False)
    assert bearer(plaintext).get(DEVICES).status_code == 401


def test_last_used_is_written_at_most_once_a_minute(member, django_assert_num_queries) -> None:
    created = make_token(member, "inventory:read")
    client = bearer(created.plaintext)
    assert ApiToken.objects.get(pk=created.token.pk).last_used_at is None
    before = timezone.now()
    client.get(DEVICES)
    first = ApiToken.objects.get(pk=created.token.pk).last_used_at
    assert first is not None
    assert first >= before
    client.get(DEVICES)
    assert ApiToken.objects.get(pk=created.token.pk).last_used_at == first  # within the minute: no write
    old = timezone.now() - LAST_USED_RESOLUTION - timedelta(seconds=1)
    ApiToken.objects.filter(pk=created.token.pk).update(last_used_at=old)
    client.get(DEVICES)
    assert ApiToken.objects.get(pk=created.token.pk).last_used_at > old


def test_a_recent_use_costs_no_write(member) -> None:
    from django.test.utils import CaptureQueriesContext

    created = make_token(member, "inventory:read")
    client = bearer(created.plaintext)
    client.get(DEVICES)
    with CaptureQueriesContext(connection) as queries:
        client.get(DEVICES)
    assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]


def test_token_writes_are_audited_as_the_token(platform_admin) -> None:
    created = make_token(platform_admin, "inventory:read", "admin:write", name="provisioner")
    response = bearer(created.plaintext).post("/api/v1/tenants/", {"slug": "ml-team", "name": "ML"}, format="json")
    assert response.status_code == 201, response.content
    event = AuditEvent.objects.get(verb="tenant.created")
    assert event.actor_kind == ActorKind.TOKEN
    assert event.actor_name == f"admin (token provisioner #{created.token.prefix})"


def test_requests_rules(member) -> None:
    now = timezone.now()
    with pytest.raises(TokenRequestError, match="Unknown scope"):
        make_token(member, "inventory:write")
    with pytest.raises(TokenRequestError, match="at least one scope"):
        make_token(member)
    with pytest.raises(TokenRequestError, match="within 365 days"):
        make_token(member, "inventory:read", days=366)
    with pytest.raises(TokenRequestError, match="future"):
        make_token(member, "inventory:read", days=-1)
    other = User.objects.create_user("other")
    with pytest.raises(TokenRequestError, match="only for yourself"):
        api_token_create(actor=member, user=other, name="x", scopes=["inventory:read"],
                         expires_at=now + timedelta(days=1))
    assert expiry_parse("90d", now=now) == now + timedelta(days=90)
    assert expiry_parse("12h", now=now) == now + timedelta(hours=12)
    assert expiry_parse("2027-01-31", now=now).isoformat() == "2027-02-01T00:00:00+00:00"
    assert expiry_parse("2027-01-31T10:00:00", now=now).isoformat() == "2027-01-31T10:00:00+00:00"
    with pytest.raises(TokenRequestError):
        expiry_parse("soon", now=now)


def test_service_accounts_have_no_usable_password(db) -> None:
    account = service_account_create(actor=None, username="cmdb-bot")
    assert account.is_active
    assert not account.has_usable_password()
    assert AuditEvent.objects.get(verb="user.service_account_created").actor_name == "system"
    plaintext = make_token(account, "inventory:read").plaintext
    ClusterFactory(name="lab")
    assert bearer(plaintext).get("/api/v1/clusters/").json()["results"][0]["name"] == "lab"
    with pytest.raises(TokenRequestError, match="already exists"):
        service_account_create(actor=None, username="cmdb-bot")
