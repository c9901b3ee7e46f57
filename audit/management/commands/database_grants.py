"""manage.py database_grants: give the application's database role its privileges (audit.database)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

from audit.database import app_role_grant, current_roles, grant_statements
from audit.errors import DatabaseRoleError


class Command(BaseCommand):
    help = ("Run as the owner of the tables (the role migrations run as): grant the application role SELECT, INSERT, "
            "UPDATE, DELETE on the ordinary tables and only SELECT, INSERT on the audit tables, with default "
            "privileges for tables created later, then check what it really holds. `migrate` does this itself when "
            "PORTAL_DATABASE_APP_ROLE is set. --sql prints the statements instead of running them.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--app-role", default="", help="The application's role (default: PORTAL_DATABASE_APP_ROLE).")
        parser.add_argument("--sql", action="store_true", help="Print the SQL for the connected owner; run nothing.")
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)

    def handle(self, *args: Any, **options: Any) -> None:
        app_role = options["app_role"] or settings.PORTAL_DATABASE_APP_ROLE
        if not app_role:
            raise CommandError("Name the application role: --app-role or PORTAL_DATABASE_APP_ROLE.")
        if options["sql"]:
            with connections[options["database"]].cursor() as cursor:
                roles = current_roles(cursor, app_role)
            self.stdout.write(";\n".join(grant_statements(roles)) + ";")
            return
        try:
            statements = app_role_grant(app_role=app_role, using=options["database"])
        except DatabaseRoleError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{len(statements)} statements run; {app_role!r} holds exactly the intended privileges.")
