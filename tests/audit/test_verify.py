"""audit_verify and `manage.py audit_verify`: edited, deleted and reordered rows are detected and located."""

from __future__ import annotations

import pytest
from django.db import transaction

from audit.chain import digest
from audit.models import AuditEvent
from audit.services import audit_record, audit_verify
from tests.audit.conftest import json_verify, record, run_verify, tampering

pytestmark = pytest.mark.django_db


def _ids(n: int) -> list[int]:
    return [e.id for e in record(n)]


def _problems(report) -> list[tuple[int, str]]:
    return [(p.event_id, p.kind) for p in report.problems]


def test_an_intact_chain_verifies() -> None:
    ids = _ids(5)
    report = audit_verify()
    assert report.intact
    assert (report.checked, report.head_id, report.problems) == (5, ids[-1], ())
    code, out = run_verify()
    assert code == 0
    assert "5 rows checked" in out
    assert "INTACT" in out


def test_an_empty_chain_verifies() -> None:
    assert audit_verify().intact
    assert run_verify()[0] == 0


def test_an_edited_row_is_located() -> None:
    ids = _ids(5)
    with tampering() as cursor:
        cursor.execute("UPDATE audit_auditevent SET target_repr = 'innocent' WHERE id = %s", [ids[2]])
    report = audit_verify()
    assert _problems(report) == [(ids[2], "edited")]
    assert report.first_bad_id == ids[2]
    code, out = run_verify()
    assert code == 1
    assert f"row {ids[2]}: edited: content does not match its hash" in out
    assert "BROKEN" in out


@pytest.mark.parametrize(("column", "value"), [
    ("reason", "'rewritten reason'"), ("before", "'{\"x\": 1}'"), ("request_id", "'other'"),
    ("source_address", "'203.0.113.9'"), ("actor_kind", "'token'"), ("hash_version", "7"),
])
def test_edits_of_the_new_columns_are_detected(column: str, value: str) -> None:
    ids = _ids(3)
    with tampering() as cursor:
        cursor.execute(f"UPDATE audit_auditevent SET {column} = {value} WHERE id = %s", [ids[1]])  # noqa: S608
    assert _problems(audit_verify()) == [(ids[1], "edited")]


def test_a_deleted_row_is_located_by_the_gap() -> None:
    ids = _ids(5)
    with tampering() as cursor:
        cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [ids[2]])
    report = audit_verify()
    assert _problems(report) == [(ids[3], "deleted")]
    assert f"ids {ids[2]} are absent, after row {ids[1]}" in report.problems[0].detail
    code, out = json_verify()
    assert code == 1
    assert out["intact"] is False
    assert out["problems"] == [{"id": ids[3], "kind": "deleted", "detail": report.problems[0].detail}]


def test_a_deleted_row_is_found_even_when_the_ids_are_renumbered() -> None:
    ids = _ids(5)
    with tampering() as cursor:
        cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [ids[2]])
        # Through negative ids: one UPDATE shifting them down checks the primary key row by row, in whatever order
        # the rows lie in the heap, and failed when a later id came first.
        cursor.execute("UPDATE audit_auditevent SET id = -id WHERE id > %s", [ids[2]])
        cursor.execute("UPDATE audit_auditevent SET id = -id - 1 WHERE id < 0")
    report = audit_verify()
    assert _problems(report) == [(ids[2], "deleted")]
    assert f"a row between {ids[1]} and {ids[2]} was removed" in report.problems[0].detail


def test_deleting_the_first_rows_is_detected() -> None:
    ids = _ids(3)
    with tampering() as cursor:
        cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [ids[0]])
    assert _problems(audit_verify()) == [(ids[1], "deleted")]


def test_reordered_rows_are_located() -> None:
    ids = _ids(5)
    a, b = ids[1], ids[3]
    with tampering() as cursor:  # swap two rows' positions; each row's own content and hash are untouched
        cursor.execute("UPDATE audit_auditevent SET id = -id WHERE id IN (%s, %s)", [a, b])
        cursor.execute("UPDATE audit_auditevent SET id = %s WHERE id = %s", [a, -b])
        cursor.execute("UPDATE audit_auditevent SET id = %s WHERE id = %s", [b, -a])
    report = audit_verify()
    assert not report.intact
    assert {kind for _, kind in _problems(report)} == {"reordered"}
    assert [event_id for event_id, _ in _problems(report)] == ids[1:]
    assert report.problems[0].detail == f"follows row {ids[2]} in the chain but is stored after row {ids[0]}"
    code, out = run_verify()
    assert code == 1
    assert f"row {a}: reordered" in out


def test_moving_the_first_row_is_a_reorder() -> None:
    ids = _ids(3)
    with tampering() as cursor:
        cursor.execute("UPDATE audit_auditevent SET id = %s WHERE id = %s", [ids[-1] + 10, ids[0]])
    problems = audit_verify().problems
    assert (problems[0].event_id, problems[0].kind) == (ids[1], "reordered")
    assert problems[0].detail == f"follows row {ids[-1] + 10} in the chain but is stored first"
    assert (problems[-1].event_id, problems[-1].kind) == (ids[-1] + 10, "reordered")
    assert "claims to be the first row" in problems[-1].detail


def test_a_rewritten_hash_breaks_the_next_link() -> None:
    ids = _ids(4)
    event = AuditEvent.objects.get(pk=ids[1])
    event.target_repr = "rewritten"
    from audit.chain import content

    forged = digest(event.prev_hash, content(event))
    with tampering() as cursor:
        cursor.execute("UPDATE audit_auditevent SET target_repr = 'rewritten', hash = %s WHERE id = %s",
                       [forged, ids[1]])
    assert _problems(audit_verify()) == [(ids[2], "deleted")]


def _record_then_fail(target) -> None:
    with transaction.atomic():
        audit_record(actor=None, verb="rolled.back", target=target)
        raise ZeroDivisionError


def test_rolled_back_ids_are_not_findings(target) -> None:
    record(2)
    with pytest.raises(ZeroDivisionError):
        _record_then_fail(target)
    record(2)
    assert audit_verify().intact


def test_version_one_rows_cannot_carry_unhashed_values() -> None:
    ids = _ids(3)
    with tampering() as cursor:  # pretend the first row predates v2 but carries a reason v1 does not hash
        cursor.execute("UPDATE audit_auditevent SET hash_version = 1, reason = 'added later' WHERE id = %s",
                       [ids[0]])
    problems = audit_verify().problems
    assert (problems[0].event_id, problems[0].kind) == (ids[0], "edited")
    assert "reason" in problems[0].detail


def test_problem_reports_are_capped() -> None:
    ids = _ids(6)
    with tampering() as cursor:
        cursor.execute("UPDATE audit_auditevent SET reason = 'x'")
    report = audit_verify(max_problems=2)
    assert report.truncated
    assert [p.event_id for p in report.problems] == ids[:2]


def test_json_output_of_an_intact_chain() -> None:
    ids = _ids(2)
    code, out = json_verify()
    assert code == 0
    assert out["intact"] is True
    assert out["checked"] == 2
    assert out["head"]["id"] == ids[-1]
    assert out["problems"] == []
    assert out["checkpoints_checked"] is False


def test_a_version_one_row_appended_after_version_two_rows_is_flagged() -> None:
    events = record(2)
    head = events[-1]
    fields = {"occurred_at": head.occurred_at.isoformat(), "actor_id": None, "actor_name": "system",
              "verb": "forged", "target_type": "auth.group", "target_id": "1", "target_repr": "x", "data": {}}
    with tampering() as cursor:  # a forger who knows the format but chose v1 to leave the context unhashed
        cursor.execute(
            "INSERT INTO audit_auditevent (occurred_at, actor_name, actor_kind, verb, target_type, target_id, "
            "target_repr, data, before, after, reason, request_id, source_address, hash_version, prev_hash, hash) "
            "VALUES (%s, 'system', '', 'forged', 'auth.group', '1', 'x', '{}', NULL, NULL, '', '', '', 1, %s, %s) "
            "RETURNING id",
            [head.occurred_at, head.hash, digest(head.hash, fields)],
        )
        forged_id = cursor.fetchone()[0]
    problems = audit_verify().problems
    assert [(p.event_id, p.kind) for p in problems] == [(forged_id, "edited")]
    assert "version-1 row after version-2 rows" in problems[0].detail
