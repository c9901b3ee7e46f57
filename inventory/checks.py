"""System checks: the encryption of stored secrets (`manage.py check --deploy`), and PostgreSQL's own maintenance of
the tables (`check --database default`, `migrate`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections


@register(Tags.security, deploy=True)
def field_encryption_keys_set(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if [key for key in getattr(settings, "PORTAL_FIELD_ENCRYPTION_KEYS", []) if key]:
        return []
    return [Warning(
        "PORTAL_FIELD_ENCRYPTION_KEYS is not set: the key encrypting stored kubeconfigs is derived from "
        "DJANGO_SECRET_KEY, so anyone with the secret key and a database copy can decrypt them, and rotating the "
        "secret key makes them unreadable.",
        hint='Set one or more Fernet keys (python -c "from cryptography.fernet import Fernet; '
             'print(Fernet.generate_key().decode())"); docs/observability.md.',
        id="inventory.W001",
    )]


@register(Tags.security)
def field_encryption_keys_valid(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    from cryptography.fernet import Fernet

    found: list[CheckMessage] = []
    for position, key in enumerate(getattr(settings, "PORTAL_FIELD_ENCRYPTION_KEYS", []), 1):
        if not key:
            continue
        try:
            Fernet(key.encode() if isinstance(key, str) else key)
        except (ValueError, TypeError):
            found.append(Error(f"PORTAL_FIELD_ENCRYPTION_KEYS entry {position} is not a Fernet key (32 url-safe "
                               "base64-encoded bytes): stored kubeconfigs cannot be encrypted or decrypted.",
                               id="inventory.E001"))
    return found


def _maintenance_settings(connection: Any) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', 'track_counts')")
        return dict(cursor.fetchall())


@register(Tags.database)
def autovacuum_on(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Runs with `check --database default` (and `migrate`): does PostgreSQL maintain the tables by itself?"""
    found: list[CheckMessage] = []
    for alias in databases or []:
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        off = sorted(name for name, value in _maintenance_settings(connection).items() if value != "on")
        if off:
            found.append(Warning(
                f"PostgreSQL of {alias!r} runs with {' and '.join(off)} off: the mirrored tables change all the time, "
                "and without autovacuum their planner statistics go stale (queries planned for the wrong sizes, as "
                "for an empty table after the first sync) and dead rows are never reclaimed.",
                hint="Turn autovacuum (and track_counts) on in postgresql.conf (docs/deploy.md, 'Install').",
                id="inventory.W002",
            ))
    return found
