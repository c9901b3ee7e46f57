"""Model fields with bulk-insert behaviour tuned for large JSON payloads."""

from __future__ import annotations

from typing import Any

from django.db import models


class _RowPlaceholderMixin:
    """Opt the model out of Django's PostgreSQL UNNEST bulk insert (Django 5.2).

    UNNEST passes each column as one array parameter, and psycopg escapes text arrays element by element in Python
    (a regex pass over every JSON document): for mirrored objects and API documents that cost far more than the
    insert itself. Any field defining `get_placeholder` makes Django use plain per-row VALUES placeholders, whose
    string quoting happens in C.
    """

    def get_placeholder(self, value: Any, compiler: Any, connection: Any) -> str:
        return "%s"


class BulkJSONField(_RowPlaceholderMixin, models.JSONField):
    pass


class BulkTextField(_RowPlaceholderMixin, models.TextField):
    pass


ENCRYPTED_PREFIX = "enc:v1:"


def _fernet() -> Any:
    """MultiFernet over PORTAL_FIELD_ENCRYPTION_KEYS (the first encrypts, all decrypt: rotate by prepending a new
    key and re-saving); without keys, one derived from SECRET_KEY (documented: set real keys in production)."""
    import base64
    import hashlib

    from cryptography.fernet import Fernet, MultiFernet
    from django.conf import settings

    keys = [k for k in getattr(settings, "PORTAL_FIELD_ENCRYPTION_KEYS", []) if k]
    if not keys:
        keys = [base64.urlsafe_b64encode(hashlib.sha256(f"field-encryption:{settings.SECRET_KEY}".encode())
                                         .digest()).decode()]
    return MultiFernet([Fernet(k.encode() if isinstance(k, str) else k) for k in keys])


class EncryptedTextField(models.TextField):
    """Text encrypted at rest (Fernet: AES-128-CBC + HMAC-SHA256). The database holds `enc:v1:<token>`; Python code
    sees plaintext. Values written before encryption (no prefix) are read as they are and encrypted on the next
    save (migration inventory 0009 re-saves them). Not searchable or sortable in SQL, by design."""

    audit_secret = True  # audit.admin records a change of it, never its value

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if not isinstance(value, str) or not value.startswith(ENCRYPTED_PREFIX):
            return value
        return _fernet().decrypt(value[len(ENCRYPTED_PREFIX):].encode()).decode()

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if not value or (isinstance(value, str) and value.startswith(ENCRYPTED_PREFIX)):
            return value
        return ENCRYPTED_PREFIX + _fernet().encrypt(str(value).encode()).decode()
