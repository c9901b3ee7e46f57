"""Two database roles: the owner, which runs the migrations and owns every table, and the application's role, which
the web and workers connect as (docs/deploy.md, "Database roles").

The append-only triggers only bind roles that can neither drop nor disable them, and PostgreSQL lets a table's owner
(and a superuser) do both. So the application must not own its tables. `app_role_grant` gives the application role
what it needs and no more: SELECT, INSERT, UPDATE and DELETE on the ordinary tables, SELECT and INSERT on the audit
tables, SELECT on django_migrations, USAGE and SELECT on the sequences, and the same as default privileges for tables
the owner creates later. No TRUNCATE, REFERENCES or TRIGGER anywhere. It refuses an application role that is a
superuser, a member of the owner role or the owner of a table, and after granting it checks the privileges the role
really has (grants made by others, or to PUBLIC, count too) and rolls everything back if they are wider.

`migrate` runs it at the end when PORTAL_DATABASE_APP_ROLE names the application role (the migration Job connects as
the owner); `manage.py database_grants` runs it, or prints its SQL, on demand.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.core.management.base import CommandError
from django.db import connections, transaction

from audit.errors import DatabaseRoleError
from audit.models import AuditCheckpoint, AuditEvent

APPEND_ONLY_TABLES = (AuditEvent._meta.db_table, AuditCheckpoint._meta.db_table)
READ_ONLY_TABLES = ("django_migrations",)
TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER")


@dataclass(frozen=True)
class Roles:
    owner: str
    app: str
    schema: str


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def grant_statements(roles: Roles, *, append_only: Iterable[str] = APPEND_ONLY_TABLES,
                     read_only: Iterable[str] = READ_ONLY_TABLES) -> list[str]:
    """The SQL the owner runs (idempotent: it first takes back what it granted before)."""
    schema, app, owner = _q(roles.schema), _q(roles.app), _q(roles.owner)
    append_only_list = ", ".join(f"{schema}.{_q(t)}" for t in append_only)
    read_only_list = ", ".join(f"{schema}.{_q(t)}" for t in read_only)
    return [
        f"GRANT USAGE ON SCHEMA {schema} TO {app}",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {app}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {app}",
        f"REVOKE UPDATE, DELETE ON {append_only_list} FROM {app}",
        f"REVOKE INSERT, UPDATE, DELETE ON {read_only_list} FROM {app}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {schema} FROM {app}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema} "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {app}",
    ]


def expected_privileges(table: str) -> set[str]:
    if table in APPEND_ONLY_TABLES:
        return {"SELECT", "INSERT"}
    if table in READ_ONLY_TABLES:
        return {"SELECT"}
    return {"SELECT", "INSERT", "UPDATE", "DELETE"}


def current_roles(cursor: Any, app_role: str) -> Roles:
    cursor.execute("SELECT current_user, current_schema()")
    owner, schema = cursor.fetchone()
    return Roles(owner=owner, app=app_role, schema=schema)


def _refusals(cursor: Any, roles: Roles) -> list[str]:
    """Why these roles would leave the triggers in the application's reach (empty: they would not)."""
    cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", [roles.app])
    row = cursor.fetchone()
    if row is None:
        return [f"the application role {roles.app!r} does not exist (CREATE ROLE it first, docs/deploy.md)"]
    problems = []
    if roles.app == roles.owner:
        problems.append(f"{roles.app!r} is the role running this, the owner: the application needs its own role")
    if row[0]:
        problems.append(f"{roles.app!r} is a superuser: no trigger or privilege binds it")
    cursor.execute("SELECT pg_has_role(%s, %s, 'MEMBER')", [roles.app, roles.owner])
    if cursor.fetchone()[0] and roles.app != roles.owner:
        problems.append(f"{roles.app!r} is a member of the owner role {roles.owner!r}: it can act as the owner")
    cursor.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                   "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'S') AND pg_get_userbyid(c.relowner) = %s "
                   "ORDER BY c.relname", [roles.schema, roles.app])
    owned = [name for (name,) in cursor.fetchall()]
    if owned and roles.app != roles.owner:
        problems.append(f"{roles.app!r} owns {', '.join(owned[:5])}{'…' if len(owned) > 5 else ''}: hand them to "
                        f"the owner first (as a superuser: REASSIGN OWNED BY {roles.app} TO {roles.owner})")
    cursor.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                   "WHERE n.nspname = %s AND c.relname = ANY(%s) AND pg_get_userbyid(c.relowner) <> %s",
                   [roles.schema, list(APPEND_ONLY_TABLES), roles.owner])
    foreign = [name for (name,) in cursor.fetchall()]
    if foreign:
        problems.append(f"{roles.owner!r} does not own {', '.join(foreign)}: run this as the role that owns them")
    return problems


def privileges_held(cursor: Any, roles: Roles) -> dict[str, set[str]]:
    """Every table of the schema and the privileges the application role has on it (directly, through PUBLIC or
    through roles it belongs to)."""
    cursor.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                   "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname", [roles.schema])
    tables = [name for (name,) in cursor.fetchall()]
    held: dict[str, set[str]] = {}
    for table in tables:
        qualified = f"{_q(roles.schema)}.{_q(table)}"
        cursor.execute("SELECT " + ", ".join("has_table_privilege(%s, %s, %s)" for _ in TABLE_PRIVILEGES),
                       [value for privilege in TABLE_PRIVILEGES for value in (roles.app, qualified, privilege)])
        held[table] = {privilege for privilege, has in zip(TABLE_PRIVILEGES, cursor.fetchone(), strict=True) if has}
    return held


def app_role_grant(*, app_role: str, using: str = "default") -> list[str]:
    """Grant the application role its privileges, as the connected owner, in one transaction; return the SQL run.
    Raises DatabaseRoleError (and changes nothing) if the roles are unsafe or the result is wider than intended."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        raise DatabaseRoleError("database roles are a PostgreSQL deployment feature")
    with transaction.atomic(using=using), connection.cursor() as cursor:
        roles = current_roles(cursor, app_role)
        problems = _refusals(cursor, roles)
        if problems:
            raise DatabaseRoleError("; ".join(problems))
        statements = grant_statements(roles)
        for statement in statements:
            cursor.execute(statement)
        wrong = {table: sorted(held ^ expected_privileges(table))
                 for table, held in privileges_held(cursor, roles).items() if held != expected_privileges(table)}
        if wrong:
            details = ", ".join(f"{table}: {' '.join(privileges)}" for table, privileges in sorted(wrong.items())[:10])
            raise DatabaseRoleError(f"after granting, {roles.app!r} holds other privileges than intended ({details}); "
                                    "revoke what other roles granted it (or PUBLIC) and run again")
    return statements


def run_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """post_migrate receiver: grant PORTAL_DATABASE_APP_ROLE its privileges, if set."""
    from django.conf import settings

    app_role = getattr(settings, "PORTAL_DATABASE_APP_ROLE", "")
    if not app_role:
        return
    try:
        app_role_grant(app_role=app_role, using=using)
    except DatabaseRoleError as exc:  # migrate stops with the reason rather than a traceback
        raise CommandError(f"PORTAL_DATABASE_APP_ROLE: {exc}") from exc
    if kwargs.get("verbosity", 1):
        (kwargs.get("stdout") or sys.stdout).write(
            f"Granted the application role {app_role!r} its privileges (audit tables: SELECT, INSERT only).\n")
