"""Audit event filters shared by the /audit/ page and the REST API.

- ``verb``: exact verb, or a prefix when it ends in ``.`` or ``*`` (``offering.`` / ``offering.*``); a word without
  a dot matches anywhere in the verb, case-insensitively (``denied``: every ``….denied``).
- ``actor``: case-insensitive substring of the actor name; ``actor_kind``: user, token or system.
- ``target_type`` (``app_label.model``, case-insensitive) and ``target_id``: exact.
- ``occurred_from`` / ``occurred_to``: inclusive time bounds (ISO 8601; naive times are UTC).
- ``q``: case-insensitive substring of the target's representation.
- ``request_id``: exact.  ``since_id``: events with a larger id (for incremental export).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import django_filters
from django import forms
from django.db.models import Q, QuerySet
from django_filters.fields import IsoDateTimeField

from audit.models import ActorKind, AuditEvent


class UTCDateTimeField(IsoDateTimeField):
    """ISO 8601, converted to UTC: PostgreSQL refuses offsets beyond ±15:59 that Python accepts (up to ±23:59)."""

    def to_python(self, value: Any) -> dt.datetime | None:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(dt.UTC)
        except OverflowError:
            raise forms.ValidationError("The date is out of range.", code="invalid") from None


class UTCDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCDateTimeField


class AuditEventFilterSet(django_filters.FilterSet):
    verb = django_filters.CharFilter(method="filter_verb", label="Verb",
                                     help_text="Exact, a prefix ending in . or *, or a word found anywhere",
                                     widget=forms.TextInput(attrs={"list": "audit-verbs", "autocomplete": "off"}))
    actor = django_filters.CharFilter(field_name="actor_name", lookup_expr="icontains", label="Actor")
    actor_kind = django_filters.ChoiceFilter(choices=ActorKind.choices, method="filter_actor_kind",
                                             label="Actor kind", empty_label="Any")
    target_type = django_filters.CharFilter(field_name="target_type", lookup_expr="iexact", label="Target type")
    target_id = django_filters.CharFilter(field_name="target_id", label="Target id")
    occurred_from = UTCDateTimeFilter(
        field_name="occurred_at", lookup_expr="gte", label="From",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    occurred_to = UTCDateTimeFilter(
        field_name="occurred_at", lookup_expr="lte", label="To",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    q = django_filters.CharFilter(field_name="target_repr", lookup_expr="icontains", label="Target contains")
    request_id = django_filters.CharFilter(field_name="request_id", label="Request id")
    since_id = django_filters.NumberFilter(field_name="id", lookup_expr="gt", label="After id")

    class Meta:
        model = AuditEvent
        fields: list[str] = []

    def filter_verb(self, queryset: QuerySet[AuditEvent], name: str, value: str) -> QuerySet[AuditEvent]:
        if value.endswith("*"):
            return queryset.filter(verb__startswith=value[:-1])
        if value.endswith("."):
            return queryset.filter(verb__startswith=value)
        if "." not in value:
            return queryset.filter(verb__icontains=value)
        return queryset.filter(verb=value)

    def filter_actor_kind(self, queryset: QuerySet[AuditEvent], name: str, value: str) -> QuerySet[AuditEvent]:
        # Rows written before actor_kind existed have '' there; their kind follows from actor_id.
        legacy = Q(actor_kind="")
        if value == ActorKind.USER:
            return queryset.filter(Q(actor_kind=value) | (legacy & Q(actor_id__isnull=False)))
        if value == ActorKind.SYSTEM:
            return queryset.filter(Q(actor_kind=value) | (legacy & Q(actor_id__isnull=True)))
        return queryset.filter(actor_kind=value)
