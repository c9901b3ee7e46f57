"""REST API for exceptions: /access-requests/ (create, list, approve/deny/withdraw, break-glass), /grants/ (list,
revoke) and /violations/ (list). Querysets are scoped to the user's tenants; security approvers, platform admins and
auditors see every tenant. Grants are read-only: their end never moves (an extension is a new request)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import django_filters
from django.db.models import Q, QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.exceptions import PortalExceptionHandlerMixin
from core.api.fields import SlugRelatedField
from inventory.models import Cluster
from portal.access import (
    access_request_create,
    access_request_review,
    access_request_withdraw,
    break_glass_grant,
    grant_revoke,
)
from portal.models import (
    AccessKind,
    AccessRequest,
    AccessReview,
    Grant,
    GrantUse,
    TenantNamespace,
    Violation,
    sees_all_tenants,
)
from portal.notifications import notifications_read

MAX_WINDOW = dt.timedelta(days=366)


class ReviewSerializer(serializers.ModelSerializer):
    reviewer = serializers.CharField(source="reviewer.username", read_only=True)

    class Meta:
        model = AccessReview
        fields = ["reviewer", "decision", "comment", "after_the_fact", "created_at"]
        read_only_fields = fields


class GrantUseSerializer(serializers.ModelSerializer):
    class Meta:
        model = GrantUse
        fields = ["object_kind", "namespace", "name", "object_uid", "first_seen_at", "outlived_grant",
                  "deleted_by_portal_at"]
        read_only_fields = fields


class GrantSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    request = serializers.IntegerField(source="request_id", read_only=True)
    ended_by = serializers.CharField(source="ended_by.username", read_only=True, allow_null=True, default=None)
    exception_key = serializers.CharField(read_only=True)
    uses = GrantUseSerializer(many=True, read_only=True)

    class Meta:
        model = Grant
        fields = ["id", "request", "kind", "cluster", "namespace", "service_account", "workload", "exception_key",
                  "state", "starts_at", "ends_at", "activated_at", "ended_at", "ended_by", "end_reason",
                  "break_glass_review", "apply_attempted_at", "apply_error", "cleanup_confirmed_at", "uses",
                  "created_at"]
        read_only_fields = fields


class AccessRequestSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    window_seconds = serializers.SerializerMethodField()
    reviews = ReviewSerializer(many=True, read_only=True)
    grant = serializers.SerializerMethodField()

    class Meta:
        model = AccessRequest
        fields = ["id", "kind", "tenant", "cluster", "namespace", "service_account", "workload", "reason",
                  "ticket_ref", "window_seconds", "starts_at", "extends", "requested_by", "state",
                  "approvals_required", "break_glass", "review_due_at", "reviews", "grant", "created_at"]
        read_only_fields = fields

    def get_window_seconds(self, obj: AccessRequest) -> int:
        return int(obj.window.total_seconds())

    def get_grant(self, obj: AccessRequest) -> int | None:
        grant = getattr(obj, "grant", None)
        return grant.pk if grant is not None else None


class AccessRequestInputSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=AccessKind.choices)
    cluster = SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    namespace = serializers.CharField(max_length=63)
    service_account = serializers.CharField(max_length=253, required=False, allow_blank=True, default="")
    workload = serializers.CharField(max_length=63, required=False, allow_blank=True, default="")
    reason = serializers.CharField(max_length=4000)
    ticket_ref = serializers.CharField(max_length=120)
    window_seconds = serializers.IntegerField(min_value=60, max_value=int(MAX_WINDOW.total_seconds()))
    starts_at = serializers.DateTimeField(required=False, allow_null=True, default=None)
    extends = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=1,
                                       help_text="Grant id this request extends (it starts when that grant ends).")


class BreakGlassInputSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=AccessKind.choices)
    cluster = SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    namespace = serializers.CharField(max_length=63)
    service_account = serializers.CharField(max_length=253, required=False, allow_blank=True, default="")
    workload = serializers.CharField(max_length=63, required=False, allow_blank=True, default="")
    reason = serializers.CharField(max_length=4000)
    ticket_ref = serializers.CharField(max_length=120)
    window_seconds = serializers.IntegerField(min_value=60, max_value=int(MAX_WINDOW.total_seconds()))


class ReviewInputSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=4000, required=False, allow_blank=True, default="")


class RevokeInputSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class AccessRequestFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=AccessRequest.State.choices)
    kind = django_filters.ChoiceFilter(choices=AccessKind.choices)
    namespace = django_filters.CharFilter()
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = AccessRequest
        fields: list[str] = []


class AccessRequestViewSet(PortalExceptionHandlerMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    token_write_scope = "requests:write"  # noqa: S105
    serializer_class = AccessRequestSerializer
    filterset_class = AccessRequestFilter

    def get_queryset(self) -> QuerySet[AccessRequest]:
        return AccessRequest.objects.visible_to(self.request.user).select_related(
            "tenant", "cluster", "requested_by", "grant").prefetch_related("reviews__reviewer")

    def _respond(self, pk: int, code: int = status.HTTP_200_OK) -> Response:
        return Response(self.get_serializer(self.get_queryset().get(pk=pk)).data, status=code)

    @extend_schema(request=AccessRequestInputSerializer, responses={201: AccessRequestSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = AccessRequestInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        created = access_request_create(
            actor=request.user, kind=values["kind"], cluster_id=values["cluster"].pk, namespace=values["namespace"],
            service_account=values["service_account"], workload=values["workload"], reason=values["reason"],
            ticket_ref=values["ticket_ref"], window=dt.timedelta(seconds=values["window_seconds"]),
            starts_at=values["starts_at"], extends_grant_id=values["extends"])
        return self._respond(created.pk, status.HTTP_201_CREATED)

    def _review(self, request: Request, approve: bool) -> Response:
        target = self.get_object()
        data = ReviewInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        access_request_review(actor=request.user, request_id=target.pk, approve=approve,
                              comment=data.validated_data["comment"])
        notifications_read(request.user, target.get_absolute_url())  # acted on: no longer news in the inbox
        return self._respond(target.pk)

    @extend_schema(request=ReviewInputSerializer, responses=AccessRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        return self._review(request, approve=True)

    @extend_schema(request=ReviewInputSerializer, responses=AccessRequestSerializer)
    @action(detail=True, methods=["post"])
    def deny(self, request: Request, pk: str) -> Response:
        return self._review(request, approve=False)

    @extend_schema(request=None, responses=AccessRequestSerializer)
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str) -> Response:
        target = self.get_object()
        access_request_withdraw(actor=request.user, request_id=target.pk)
        return self._respond(target.pk)

    @extend_schema(request=BreakGlassInputSerializer, responses={201: GrantSerializer})
    # Platform admins only: a `requests:write` token may not break the glass (docs/tokens.md).
    @action(detail=False, methods=["post"], url_path="break-glass",
            token_write_scope="admin:write")  # noqa: S106 - a scope name, not a secret
    def break_glass(self, request: Request) -> Response:
        """A platform admin grants at once (mandatory reason); security approvers review it afterwards."""
        data = BreakGlassInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        grant = break_glass_grant(
            actor=request.user, kind=values["kind"], cluster_id=values["cluster"].pk, namespace=values["namespace"],
            service_account=values["service_account"], workload=values["workload"], reason=values["reason"],
            ticket_ref=values["ticket_ref"], window=dt.timedelta(seconds=values["window_seconds"]))
        return Response(GrantSerializer(Grant.objects.select_related("cluster", "ended_by").get(pk=grant.pk)).data,
                        status=status.HTTP_201_CREATED)


class GrantFilter(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(choices=Grant.State.choices)
    kind = django_filters.ChoiceFilter(choices=AccessKind.choices)
    namespace = django_filters.CharFilter()
    cluster = django_filters.CharFilter(field_name="cluster__name")

    class Meta:
        model = Grant
        fields: list[str] = []


class GrantViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    token_write_scope = "requests:write"  # noqa: S105
    serializer_class = GrantSerializer
    filterset_class = GrantFilter

    def get_queryset(self) -> QuerySet[Grant]:
        return Grant.objects.visible_to(self.request.user).select_related("cluster", "ended_by").prefetch_related(
            "uses")

    @extend_schema(request=RevokeInputSerializer, responses=GrantSerializer)
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        target = self.get_object()
        data = RevokeInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        grant_revoke(actor=request.user, grant_id=target.pk, reason=data.validated_data["reason"])
        return Response(self.get_serializer(self.get_queryset().get(pk=target.pk)).data)


def visible_violations(user: Any) -> QuerySet[Violation]:
    """Platform roles see every violation; tenants those in their own namespaces."""
    violations = Violation.objects.select_related("cluster")
    if sees_all_tenants(user):
        return violations
    owned = Q(pk__in=[])
    for cluster_id, namespace in TenantNamespace.objects.visible_to(user).values_list("cluster_id", "namespace"):
        owned |= Q(cluster_id=cluster_id, namespace=namespace)
    return violations.filter(owned)


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
