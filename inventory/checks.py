"""System checks for the encryption of stored secrets (`manage.py check --deploy`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register


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
