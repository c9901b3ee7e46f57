"""GET /api/v1/audit-events/ (cursor pages by id) and /api/v1/audit-events/export/ (JSON lines): readers only."""

from __future__ import annotations

import orjson
import pytest
from django.contrib.auth.models import Group
from django.db import transaction
from rest_framework.test import APIClient

from audit.services import audit_record
from tests.audit.conftest import record

pytestmark = pytest.mark.django_db

LIST = "/api/v1/audit-events/"
EXPORT = "/api/v1/audit-events/export/"


def _lines(response) -> list[dict]:
    body = b"".join(response.streaming_content)
    assert body == b"" or body.endswith(b"\n")
    return [orjson.loads(line) for line in body.splitlines()]


def test_anonymous_callers_are_refused(api: APIClient) -> None:
    event = record(1)[0]
    for url in (LIST, f"{LIST}{event.id}/", EXPORT):
        assert api.get(url).status_code in {401, 403}, url


@pytest.mark.parametrize("fixture", ["member", "lead", "approver", "security_approver"])
def test_other_roles_are_refused(api: APIClient, request: pytest.FixtureRequest, fixture: str) -> None:
    event = record(1)[0]
    api.force_authenticate(request.getfixturevalue(fixture))
    for url in (LIST, f"{LIST}{event.id}/", EXPORT):
        assert api.get(url).status_code == 403, url


@pytest.mark.parametrize("fixture", ["finance", "platform_admin", "plain_platform_admin"])
def test_audit_readers_may_read(api: APIClient, request: pytest.FixtureRequest, fixture: str) -> None:
    event = record(1)[0]
    api.force_authenticate(request.getfixturevalue(fixture))
    for url in (LIST, f"{LIST}{event.id}/", EXPORT):
        assert api.get(url).status_code == 200, url


def test_a_siem_account_reads_with_a_token_not_a_password(api: APIClient, finance) -> None:
    from tests.apitokens.conftest import make_token

    record(1)
    api.credentials(HTTP_AUTHORIZATION="Basic ZmluYW5jZTpwdw==")  # finance:pw: the API takes no passwords
    assert api.get(EXPORT).status_code == 401
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(finance, 'audit:read').plaintext}")
    assert api.get(EXPORT).status_code == 200


def test_the_list_is_cursor_paginated_oldest_first(api: APIClient, finance) -> None:
    events = record(5)
    api.force_authenticate(finance)
    page = api.get(LIST, {"limit": 2}).json()
    assert [e["id"] for e in page["results"]] == [e.id for e in events[:2]]
    assert "count" not in page
    seen = [e["id"] for e in page["results"]]
    while page["next"]:
        page = api.get(page["next"]).json()
        seen += [e["id"] for e in page["results"]]
    assert seen == [e.id for e in events]


def test_the_representation_has_every_field(api: APIClient, finance) -> None:
    group = Group.objects.create(name="g")
    with transaction.atomic():
        event = audit_record(actor=finance, verb="g.changed", target=group, before={"a": 1}, after={"a": 2},
                             reason="why")
    api.force_authenticate(finance)
    body = api.get(f"{LIST}{event.id}/").json()
    assert body == {
        "id": event.id, "occurred_at": body["occurred_at"], "actor_id": finance.pk, "actor_name": "finance",
        "actor_kind": "user", "verb": "g.changed", "target_type": "auth.group", "target_id": str(group.pk),
        "target_repr": "g", "data": {}, "before": {"a": 1}, "after": {"a": 2}, "reason": "why", "request_id": "",
        "source_address": "", "hash_version": 2, "prev_hash": event.prev_hash, "hash": event.hash,
    }


def test_filters(api: APIClient, finance) -> None:
    one, two = Group.objects.create(name="alpha"), Group.objects.create(name="beta")
    with transaction.atomic():
        audit_record(actor=finance, verb="offering.created", target=one)
        audit_record(actor=None, verb="price.set", target=two)
    api.force_authenticate(finance)

    def verbs(**params: str) -> list[str]:
        response = api.get(LIST, params)
        assert response.status_code == 200, response.content
        return [e["verb"] for e in response.json()["results"]]

    assert verbs(verb="price.set") == ["price.set"]
    assert verbs(verb="offering.") == ["offering.created"]
    assert verbs(actor="FINANCE") == ["offering.created"]
    assert verbs(actor_kind="system") == ["price.set"]
    assert verbs(target_type="auth.group", target_id=str(one.pk)) == ["offering.created"]
    assert verbs(q="bet") == ["price.set"]
    assert verbs(occurred_from="2000-01-01T00:00:00Z", occurred_to="2999-01-01T00:00:00Z") == [
        "offering.created", "price.set"]
    assert verbs(occurred_to="2000-01-01T00:00:00Z") == []
    assert api.get(LIST, {"occurred_from": "yesterday"}).status_code == 400
    assert api.get(LIST, {"actor_kind": "robot"}).status_code == 400


def test_export_streams_json_lines_since_an_id(api: APIClient, finance, monkeypatch) -> None:
    monkeypatch.setattr("audit.api.views.EXPORT_BATCH", 3)
    events = record(10)  # several keyset batches
    api.force_authenticate(finance)
    response = api.get(EXPORT)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert response.streaming
    lines = _lines(response)
    assert [line["id"] for line in lines] == [e.id for e in events]
    assert lines[0]["hash"] == events[0].hash
    since = _lines(api.get(EXPORT, {"since_id": events[-3].id}))
    assert [line["id"] for line in since] == [e.id for e in events[-2:]]
    assert _lines(api.get(EXPORT, {"since_id": events[-1].id})) == []
    assert [line["verb"] for line in _lines(api.get(EXPORT, {"verb": "test.7"}))] == ["test.7"]


def test_export_honours_a_json_lines_accept_header(api: APIClient, finance, member) -> None:
    record(2)
    api.force_authenticate(finance)
    assert len(_lines(api.get(EXPORT, HTTP_ACCEPT="application/x-ndjson"))) == 2
    api.force_authenticate(member)
    refused = api.get(EXPORT, HTTP_ACCEPT="application/x-ndjson")
    assert refused.status_code == 403
    assert orjson.loads(refused.content)["detail"]
