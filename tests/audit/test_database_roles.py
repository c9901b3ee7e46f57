"""The two database roles of docs/deploy.md against the real PostgreSQL, and the TRUNCATE escape hatch outside test
databases.

A throw-away owner role and application role, and a scratch database owned by the owner whose name does not start
with `test_`: `manage.py migrate` runs in it as the owner with PORTAL_DATABASE_APP_ROLE set, exactly as the migration
Job does. Then, connected as the application role, everything that could alter the audit log fails (UPDATE, DELETE,
TRUNCATE with or without the escape hatch, disabling or dropping the triggers, replacing their function, becoming
the owner) while INSERT and SELECT on it, and writes to the ordinary tables, work. Connected as the owner (and as a
superuser), the escape hatch does nothing in this database.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from psycopg import errors, sql

from audit.database import grant_statements

pytestmark = pytest.mark.slow  # migrates a scratch database in a subprocess (about 10 s)

ROOT = Path(__file__).resolve().parent.parent.parent
INSERT_EVENT = ("INSERT INTO audit_auditevent (occurred_at, actor_name, actor_kind, verb, target_type, target_id, "
                "target_repr, data, reason, request_id, source_address, hash_version, prev_hash, hash) VALUES (now(), "
                "'system', 'system', 'test.inserted', 'auth.group', '1', 'x', '{}', '', '', '', 2, repeat('0', 64), %s)")


def _url(*, user: str, password: str, database: str) -> str:
    config = settings.DATABASES["default"]
    return f"postgres://{user}:{password}@{config['HOST'] or '127.0.0.1'}:{config['PORT'] or 5432}/{database}"


def _superuser(database: str = "postgres") -> psycopg.Connection[Any]:
    config = settings.DATABASES["default"]
    return psycopg.connect(host=config["HOST"] or "127.0.0.1", port=config["PORT"] or 5432, user=config["USER"],
                           password=config["PASSWORD"] or None, dbname=database, autocommit=True)


@pytest.fixture(scope="module")
def scratch() -> Iterator[dict[str, str]]:
    """Owner and application roles, and a database migrated by the owner (name: not test_*)."""
    suffix = secrets.token_hex(4)
    world = {"owner": f"audit_owner_{suffix}", "app": f"audit_app_{suffix}", "database": f"audit_roles_{suffix}",
             "owner_password": secrets.token_urlsafe(16), "app_password": secrets.token_urlsafe(16)}
    with _superuser() as admin:
        for role in ("owner", "app"):
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(world[role]), sql.Literal(world[f"{role}_password"])))
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(world["database"]),
                                                                     sql.Identifier(world["owner"])))
    try:
        result = _manage("migrate", "--noinput", world=world, app_role=world["app"])
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert f"Granted the application role '{world['app']}'" in result.stdout
        yield world
    finally:
        with _superuser() as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(world["database"])))
            for role in ("app", "owner"):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(world[role])))


def _manage(*args: str, world: dict[str, str], app_role: str, role: str = "owner") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.test", "PORTAL_DATABASE_APP_ROLE": app_role,
           "DATABASE_URL": _url(user=world[role], password=world[f"{role}_password"], database=world["database"])}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=env)


def _connect(world: dict[str, str], role: str) -> psycopg.Connection[Any]:
    config = settings.DATABASES["default"]
    return psycopg.connect(host=config["HOST"] or "127.0.0.1", port=config["PORT"] or 5432, user=world[role],
                           password=world[f"{role}_password"], dbname=world["database"], autocommit=True)


@pytest.fixture
def app(scratch: dict[str, str]) -> Iterator[psycopg.Connection[Any]]:
    with _connect(scratch, "app") as connection:
        yield connection


@pytest.fixture
def owner(scratch: dict[str, str]) -> Iterator[psycopg.Connection[Any]]:
    with _connect(scratch, "owner") as connection:
        yield connection


def _refused(connection: psycopg.Connection[Any], statement: str, *params: Any) -> str:
    with pytest.raises(errors.InsufficientPrivilege) as refused, connection.transaction():
        connection.execute(statement, params or None)
    return str(refused.value)


def test_the_application_role_may_append_to_and_read_the_audit_log(app: psycopg.Connection[Any]) -> None:
    app.execute(INSERT_EVENT, [secrets.token_hex(32)])
    assert app.execute("SELECT count(*) FROM audit_auditevent WHERE verb = 'test.inserted'").fetchone()[0] >= 1
    assert app.execute("SELECT count(*) FROM audit_auditcheckpoint").fetchone() is not None


@pytest.mark.parametrize("statement", [
    "UPDATE audit_auditevent SET verb = 'forged'",
    "DELETE FROM audit_auditevent",
    "TRUNCATE audit_auditevent",
    "UPDATE audit_auditcheckpoint SET signature = 'forged'",
    "DELETE FROM audit_auditcheckpoint",
    "TRUNCATE audit_auditcheckpoint",
])
def test_the_application_role_cannot_change_the_audit_log(app: psycopg.Connection[Any], statement: str) -> None:
    assert "permission denied" in _refused(app, statement)


def test_the_escape_hatch_does_not_help_the_application_role(app: psycopg.Connection[Any]) -> None:
    app.execute("SET audit.allow_truncate = on")
    assert "permission denied" in _refused(app, "TRUNCATE audit_auditevent")


@pytest.mark.parametrize("statement", [
    "ALTER TABLE audit_auditevent DISABLE TRIGGER USER",
    "ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_no_update",
    "DROP TRIGGER audit_event_no_update ON audit_auditevent",
    "ALTER TABLE audit_auditcheckpoint DISABLE TRIGGER ALL",
    # Replacing the trigger's function would open it from the inside.
    "CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$ BEGIN RETURN OLD; END; $$ "
    "LANGUAGE plpgsql",
    "ALTER TABLE audit_auditevent OWNER TO CURRENT_USER",
])
def test_the_application_role_cannot_disable_the_triggers(app: psycopg.Connection[Any], statement: str) -> None:
    message = _refused(app, statement)
    assert "must be owner" in message or "permission denied" in message


def test_the_application_role_cannot_become_the_owner(app: psycopg.Connection[Any], scratch: dict[str, str]) -> None:
    with pytest.raises(errors.InsufficientPrivilege), app.transaction():
        app.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(scratch["owner"])))


def test_the_application_role_writes_its_ordinary_tables(app: psycopg.Connection[Any]) -> None:
    with app.transaction():
        app.execute("INSERT INTO auth_group (name) VALUES ('written-by-app')")
        app.execute("UPDATE auth_group SET name = 'renamed-by-app' WHERE name = 'written-by-app'")
        app.execute("DELETE FROM auth_group WHERE name = 'renamed-by-app'")
    assert app.execute("SELECT count(*) FROM django_migrations").fetchone()[0] > 0
    assert "permission denied" in _refused(app, "INSERT INTO django_migrations (app, name, applied) "
                                                "VALUES ('x', 'y', now())")
    assert "permission denied" in _refused(app, "TRUNCATE auth_group CASCADE")


def test_tables_the_owner_creates_later_are_writable_by_the_application(owner: psycopg.Connection[Any],
                                                                        app: psycopg.Connection[Any]) -> None:
    owner.execute("CREATE TABLE later_table (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, note text)")
    try:
        app.execute("INSERT INTO later_table (note) VALUES ('default privileges')")
        assert app.execute("SELECT note FROM later_table").fetchone() == ("default privileges",)
    finally:
        owner.execute("DROP TABLE later_table")


@pytest.mark.parametrize("role", ["owner", "superuser"])
def test_the_escape_hatch_does_nothing_outside_test_databases(scratch: dict[str, str], role: str) -> None:
    """Even the owner and a superuser (who could disable the trigger outright) get no TRUNCATE from the option in a
    database whose name does not start with test_, and DELETE stays refused."""
    connection = _connect(scratch, "owner") if role == "owner" else _superuser(scratch["database"])
    with connection:
        connection.execute(INSERT_EVENT, [secrets.token_hex(32)])
        connection.execute("SET audit.allow_truncate = on")
        for statement in ("TRUNCATE audit_auditevent", "DELETE FROM audit_auditevent", "TRUNCATE audit_auditcheckpoint"):
            with pytest.raises(errors.InsufficientPrivilege, match="append-only"), connection.transaction():
                connection.execute(statement)
        assert connection.execute("SELECT count(*) FROM audit_auditevent").fetchone()[0] >= 1


def test_migrate_refuses_an_application_role_that_could_disable_the_triggers(scratch: dict[str, str]) -> None:
    """A superuser as the application role, or the owner itself: migrate stops with the reason."""
    for app_role, reason in ((settings.DATABASES["default"]["USER"], "is a superuser"),
                             (scratch["owner"], "the application needs its own role")):
        result = _manage("migrate", "--noinput", world=scratch, app_role=app_role)
        assert result.returncode != 0
        assert reason in result.stderr, result.stderr[-2000:]


@pytest.mark.django_db
def test_the_role_check_warns_only_where_the_triggers_are_in_reach(scratch: dict[str, str]) -> None:
    """audit.W004 (`check --database default`): silent for the application role, a warning for a superuser (the
    test database's connection) — and the same for the owner, whose role owns the tables."""
    from audit.checks import app_role_cannot_disable_the_triggers

    result = _manage("check", "--database", "default", world=scratch, app_role=scratch["app"], role="app")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "audit.W004" not in result.stdout + result.stderr
    assert [m.id for m in app_role_cannot_disable_the_triggers(databases=["default"])] == ["audit.W004"]
    result = _manage("check", "--database", "default", world=scratch, app_role=scratch["app"])
    assert "audit.W004" in result.stderr, result.stderr[-2000:]


def test_the_documented_sql_is_what_migrate_runs() -> None:
    """docs/deploy.md shows the statements for the example roles; they must be the ones the code runs."""
    from audit.database import Roles

    docs = (ROOT / "docs" / "deploy.md").read_text()
    for statement in grant_statements(Roles(owner="portal_owner", app="portal_app", schema="public")):
        assert f"{statement};" in docs, statement
