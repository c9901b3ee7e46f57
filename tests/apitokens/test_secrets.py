"""The secret never reaches a log line, an error message, an audit event or a response other than the one that
shows it once."""

from __future__ import annotations

import logging
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from apitokens import throttling
from apitokens.models import ApiToken
from apitokens.services import api_token_revoke
from audit.models import AuditEvent
from tests.apitokens.conftest import bearer, make_token

pytestmark = pytest.mark.django_db


def test_no_secret_in_logs_errors_or_audit_events(member, caplog, monkeypatch) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(throttling.time, "time", lambda: 1_800_000_000.0)
    out = StringIO()
    call_command("create_api_token", "member", "--scopes", "inventory:read", "--expires", "7d", stdout=out,
                 stderr=StringIO())
    secrets = [out.getvalue().strip()]
    created = make_token(member, "inventory:read", name="web", rate_limit_per_minute=1)
    secrets.append(created.plaintext)

    bodies = []
    client = bearer(created.plaintext)
    bodies.append(client.get("/api/v1/clusters/"))                        # ok
    bodies.append(client.get("/api/v1/clusters/"))                        # 429
    bodies.append(client.get("/api/v1/audit-events/"))                    # 403 scope
    bodies.append(bearer(created.plaintext[:-1] + "Z").get("/api/v1/clusters/"))  # 401 wrong secret
    bodies.append(bearer(created.plaintext + "x").get("/api/v1/clusters/"))       # 401 malformed
    ApiToken.objects.filter(pk=created.token.pk).update(created_at=timezone.now() - timedelta(days=2),
                                                        expires_at=timezone.now() - timedelta(seconds=1))
    bodies.append(client.get("/api/v1/clusters/"))                        # 401 expired
    other = ApiToken.objects.exclude(pk=created.token.pk).get()
    api_token_revoke(actor=None, token_id=other.pk)
    bodies.append(bearer(secrets[0]).get("/api/v1/clusters/"))            # 401 revoked
    assert [r.status_code for r in bodies] == [200, 429, 403, 401, 401, 401, 401]

    assert caplog.records, "expected some log lines (django.request logs 4xx)"
    events = " ".join(str(e.__dict__) for e in AuditEvent.objects.all())
    for plaintext in secrets:
        secret = plaintext.split("_", 2)[2]
        assert secret not in caplog.text
        assert secret not in events
        for response in bodies:
            assert secret not in response.content.decode()
            assert secret not in str(response.headers)
