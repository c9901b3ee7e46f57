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
