"""inventory.W002: PostgreSQL must maintain the mirrored tables by itself (autovacuum)."""

from __future__ import annotations

import pytest
from django.db import connection

from inventory import checks


@pytest.mark.django_db
def test_the_autovacuum_check_follows_the_servers_settings(monkeypatch) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT setting FROM pg_settings WHERE name = 'autovacuum'")
        (autovacuum,) = cursor.fetchone()
    found = [m.id for m in checks.autovacuum_on(databases=["default"])]
    assert found == ([] if autovacuum == "on" else ["inventory.W002"])  # this server, as it runs

    monkeypatch.setattr(checks, "_maintenance_settings", lambda conn: {"autovacuum": "on", "track_counts": "on"})
    assert checks.autovacuum_on(databases=["default"]) == []
    monkeypatch.setattr(checks, "_maintenance_settings", lambda conn: {"autovacuum": "off", "track_counts": "on"})
    [warning] = checks.autovacuum_on(databases=["default"])
    assert (warning.id, "autovacuum off" in warning.msg) == ("inventory.W002", True)
    monkeypatch.setattr(checks, "_maintenance_settings", lambda conn: {"autovacuum": "on", "track_counts": "off"})
    assert "track_counts off" in checks.autovacuum_on(databases=["default"])[0].msg
    assert checks.autovacuum_on(databases=[]) == []  # plain `check`: no database queried
