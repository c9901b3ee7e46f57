"""Model fields with bulk-insert behaviour tuned for large JSON payloads."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models.query_utils import DeferredAttribute


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


def decrypt_token(value: Any) -> Any:
    """Plaintext of a stored `enc:v1:` token; anything else (legacy plaintext, None) as it is."""
    if not isinstance(value, str) or not value.startswith(ENCRYPTED_PREFIX):
        return value
    return _fernet().decrypt(value[len(ENCRYPTED_PREFIX):].encode()).decode()


class _DecryptOnAccess(DeferredAttribute):
    """Decrypts when the attribute is read, once per instance: loading a row (a page listing clusters, a
    select_related of a node's cluster) never pays for, or exposes, a decryption nobody asked for."""

    def __get__(self, instance: Any, cls: Any = None) -> Any:
        value = super().__get__(instance, cls)  # loads the column if it was deferred
        if instance is None:
            return value
        plain = decrypt_token(value)
        if plain is not value:
            instance.__dict__[self.field.attname] = plain
        return plain

    def __set__(self, instance: Any, value: Any) -> None:
        """A data descriptor, so that reads come through __get__ even when the row's value is in __dict__."""
        instance.__dict__[self.field.attname] = value


class EncryptedTextField(models.TextField):
    """Text encrypted at rest (Fernet: AES-128-CBC + HMAC-SHA256). The database holds `enc:v1:<token>`; Python code
    reading the model attribute sees plaintext, decrypted on first access (not when the row is loaded).
    `values()`/`values_list()` of the field yield the stored token: use the attribute, or `decrypt_token`. Values
    written before encryption (no prefix) are read as they are and encrypted on the next save (migration inventory
    0009 re-saves them). Not searchable or sortable in SQL, by design."""

    audit_secret = True  # audit.admin records a change of it, never its value
    descriptor_class = _DecryptOnAccess

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        if not value or (isinstance(value, str) and value.startswith(ENCRYPTED_PREFIX)):
            return value
        return ENCRYPTED_PREFIX + _fernet().encrypt(str(value).encode()).decode()
