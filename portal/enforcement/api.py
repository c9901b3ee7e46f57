"""REST API for violations: platform roles see every violation, tenants those in their own namespaces."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from rest_framework import serializers, viewsets

from core.api.exceptions import PortalExceptionHandlerMixin
from portal.enforcement.models import Violation
from portal.enforcement.selectors import visible_violations


class ViolationSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    open = serializers.SerializerMethodField()

    class Meta:
        model = Violation
        fields = ["id", "kind", "cluster", "namespace", "subject", "message", "evidence", "grant", "open",
                  "first_seen_at", "last_seen_at", "resolved_at"]
        read_only_fields = fields

    def get_open(self, obj: Violation) -> bool:
        return obj.resolved_at is None


class ViolationFilter(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=Violation.Kind.choices)
    open = django_filters.BooleanFilter(field_name="resolved_at", lookup_expr="isnull")
    namespace = django_filters.CharFilter()
    cluster = django_filters.CharFilter(field_name="cluster__name")
    grant = django_filters.NumberFilter()

    class Meta:
        model = Violation
        fields: list[str] = []


class ViolationViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = ViolationSerializer
    filterset_class = ViolationFilter

    def get_queryset(self) -> QuerySet[Violation]:
        return visible_violations(self.request.user)
