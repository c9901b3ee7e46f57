"""System checks for the audit log's protections (`manage.py check --deploy`; docs/audit.md, "Checks")."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

from audit.database import APPEND_ONLY_TABLES
from audit.errors import CheckpointKeyMissingError


@register(Tags.security, deploy=True)
def checkpoint_key_set(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if getattr(settings, "PORTAL_AUDIT_CHECKPOINT_KEY", ""):
        return []
    return [Warning(
        "PORTAL_AUDIT_CHECKPOINT_KEY is not set: no signed checkpoints of the audit chain are taken, so a rewrite of "
        "the whole chain by someone who can disable its triggers goes undetected.",
        hint="Set it to a random value of at least 32 characters, kept out of the database's reach (docs/audit.md).",
        id="audit.W001",
    )]


@register(Tags.security)
def checkpoint_key_usable(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    from audit.checkpoints import verification_keys

    if not getattr(settings, "PORTAL_AUDIT_CHECKPOINT_KEY", ""):
        return []
    try:
        verification_keys()
    except CheckpointKeyMissingError as exc:
        return [Error(str(exc), hint="The hourly checkpoint and audit_verify fail until it is fixed.", id="audit.E001")]
    return []


@register(Tags.security, deploy=True)
def database_is_not_a_test_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    for alias in settings.DATABASES:
        name = str(settings.DATABASES[alias].get("NAME") or "")
        if settings.DATABASES[alias].get("ENGINE", "").endswith("postgresql") and name.startswith("test_"):
            found.append(Warning(
                f"The database {alias!r} is named {name!r}: in a database whose name starts with test_, a session that "
                "sets audit.allow_truncate=on may TRUNCATE the audit log (the escape hatch of the test suite).",
                hint="Rename the database (docs/audit.md, 'Guarantees').",
                id="audit.W003",
            ))
    return found


@register(Tags.security, Tags.database)
def app_role_cannot_disable_the_triggers(app_configs: Any = None, databases: Any = None,
                                         **kwargs: Any) -> list[CheckMessage]:
    """Runs with `check --database default`: is the connected role bound by the append-only triggers?"""
    found: list[CheckMessage] = []
    for alias in databases or []:
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        with connection.cursor() as cursor:
            cursor.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            (superuser,) = cursor.fetchone()
            cursor.execute("SELECT c.relname FROM pg_class c WHERE c.relname = ANY(%s) AND c.relkind = 'r' "
                           "AND pg_has_role(current_user, c.relowner, 'USAGE')", [list(APPEND_ONLY_TABLES)])
            owned = [name for (name,) in cursor.fetchall()]
        if superuser or owned:
            found.append(Warning(
                f"The database role of {alias!r} is a superuser or owns {', '.join(owned) or 'the audit tables'}: it "
                "can disable the append-only triggers and rewrite the audit log.",
                hint="Run the web and workers as a separate application role (PORTAL_DATABASE_APP_ROLE; docs/deploy.md, "
                     "'Database roles').",
                id="audit.W004",
            ))
    return found
