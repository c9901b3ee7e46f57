"""Migration 0002 keeps the rows written before it verifiable (hash format version 1) and rewrites none of them."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from audit.chain import GENESIS, digest
from audit.models import AuditEvent
from audit.services import audit_verify
from tests.audit.conftest import record

BEFORE = [("audit", "0001_initial")]


def _migrate(targets: list[tuple[str, str]]) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def _latest() -> list[tuple[str, str]]:
    executor = MigrationExecutor(connection)
    return [key for key in executor.loader.graph.leaf_nodes() if key[0] == "audit"]


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_0002_still_verify_after_it() -> None:
    latest = _latest()
    _migrate(BEFORE)
    try:
        prev = GENESIS
        with connection.cursor() as cursor:
            for n in range(3):
                # Exactly what the 0001-era audit_record hashed and stored.
                at = dt.datetime(2030, 1, 1, 12, n, tzinfo=dt.UTC)
                fields = {"occurred_at": at.isoformat(), "actor_id": None, "actor_name": "system",
                          "verb": f"old.{n}", "target_type": "auth.group", "target_id": "1",
                          "target_repr": "old", "data": {"n": n}}
                row_hash = digest(prev, fields)
                cursor.execute(
                    "INSERT INTO audit_auditevent (occurred_at, actor_id, actor_name, verb, target_type, target_id, "
                    "target_repr, data, prev_hash, hash) VALUES (%s, NULL, 'system', %s, 'auth.group', '1', 'old', "
                    "%s::jsonb, %s, %s)",
                    [at, f"old.{n}", f'{{"n": {n}}}', prev, row_hash],
                )
                prev = row_hash
    finally:
        _migrate(latest)  # with the append-only trigger active: the migration must not UPDATE rows
    old = list(AuditEvent.objects.order_by("id"))
    assert [(e.hash_version, e.actor_kind, e.effective_actor_kind, e.before, e.reason) for e in old] == [
        (1, "", "system", None, "")] * 3
    assert audit_verify().intact
    new = record(2)
    assert [e.hash_version for e in new] == [2, 2]
    assert new[0].prev_hash == old[-1].hash
    report = audit_verify()
    assert (report.intact, report.checked) == (True, 5)
