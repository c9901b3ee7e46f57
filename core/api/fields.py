"""DRF fields shared by every app's API."""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from django.utils.encoding import smart_str
from rest_framework import serializers


class SlugRelatedField(serializers.SlugRelatedField[Model]):
    """DRF's, refusing text with NUL like its CharField does: PostgreSQL text cannot hold NUL, so the lookup would
    fail with a DataError (a 500) instead of "no such object" (a 400)."""

    def to_internal_value(self, data: Any) -> Model:
        if isinstance(data, str) and "\x00" in data:
            self.fail("does_not_exist", slug_name=self.slug_field, value=smart_str(data))
        value: Model = super().to_internal_value(data)
        return value
