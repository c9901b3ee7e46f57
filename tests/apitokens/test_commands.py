"""create_api_token prints the token once (stdout: the token only), stores its hash; revoke_api_token."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from apitokens.models import ApiToken
from apitokens.tokens import looks_like_token
from audit.models import AuditEvent
from tests.apitokens.conftest import bearer

pytestmark = pytest.mark.django_db


def _create(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_api_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_prints_the_token_once_and_stores_only_its_hash(member) -> None:
    out, err = _create("member", "--scopes", "inventory:read,chargeback:read", "--expires", "90d", "--name", "cmdb")
    plaintext = out.strip()
    assert out == plaintext + "\n"
    assert looks_like_token(plaintext)
    secret = plaintext.split("_", 2)[2]
    assert secret not in err
    assert (out + err).count(secret) == 1
    token = ApiToken.objects.get()
    assert token.user == member
    assert token.name == "cmdb"
    assert token.scopes == ["chargeback:read", "inventory:read"]
    assert token.prefix in err
    assert "cannot be shown again" in err
    assert secret not in str(ApiToken.objects.values().get())
    assert bearer(plaintext).get("/api/v1/clusters/").status_code == 200
    event = AuditEvent.objects.get(verb="api_token.created")
    assert event.actor_name == "system"
    assert event.after["user"] == "member"


def test_service_accounts_are_created_on_request(db) -> None:
    with pytest.raises(CommandError, match="--service-account"):
        _create("cmdb-bot", "--scopes", "inventory:read", "--expires", "30d")
    assert not User.objects.filter(username="cmdb-bot").exists()
    out, err = _create("cmdb-bot", "--scopes", "inventory:read", "--expires", "30d", "--service-account")
    bot = User.objects.get(username="cmdb-bot")
    assert bot.is_active
    assert not bot.has_usable_password()
    assert "Created service account cmdb-bot" in err
    assert bearer(out.strip()).get("/api/v1/clusters/").status_code == 200
    out, _ = _create("cmdb-bot", "--scopes", "chargeback:read", "--expires", "30d", "--service-account")  # reused
    assert bot.api_tokens.count() == 2


def test_people_are_not_turned_into_service_accounts(member) -> None:
    with pytest.raises(CommandError, match="not a service account"):
        _create("member", "--scopes", "inventory:read", "--expires", "30d", "--service-account")


@pytest.mark.parametrize(("args", "message"), [
    (["--scopes", "inventory:write", "--expires", "30d"], "Unknown scope"),
    (["--scopes", "inventory:read", "--expires", "400d"], "within 365 days"),
    (["--scopes", "inventory:read", "--expires", "tomorrow"], "Cannot read the expiry"),
])
def test_bad_arguments_create_nothing(member, args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        _create("member", *args)
    assert not ApiToken.objects.exists()


def test_revoke_by_prefix(member) -> None:
    out, _ = _create("member", "--scopes", "inventory:read", "--expires", "30d")
    token = ApiToken.objects.get()
    revoked = StringIO()
    call_command("revoke_api_token", f"ap_{token.prefix}", "--reason", "rotated", stdout=revoked)
    assert token.prefix in revoked.getvalue()
    assert bearer(out.strip()).get("/api/v1/clusters/").status_code == 401
    event = AuditEvent.objects.get(verb="api_token.revoked")
    assert event.actor_name == "system"
    assert event.reason == "rotated"
    again = StringIO()
    call_command("revoke_api_token", token.prefix, stdout=again)
    assert "already revoked" in again.getvalue()
    with pytest.raises(CommandError, match="No API token"):
        call_command("revoke_api_token", "zzzzzzzz")
