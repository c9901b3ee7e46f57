"""REST API for quota: requests (create, list, approve/deny/withdraw/retry) with the approver's context, and the
namespaces' quotas (hard, used, headroom). Querysets are scoped to the user's tenants; approvers see every tenant."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from catalog.models import Offering
from core.api.exceptions import PortalExceptionHandlerMixin
from core.api.fields import SlugRelatedField
from inventory.models import Cluster, ResourceQuota
from portal.notifications.services import notifications_read
from portal.quota.models import QuotaDecision, QuotaNamespaceState, QuotaRequest
from portal.quota.selectors import quota_rows, request_context, request_contexts
from portal.quota.services import (
    quota_request_create,
    quota_request_decide,
    quota_request_reduce,
    quota_request_retry,
    quota_request_submit,
    quota_request_withdraw,
)


class DecisionSerializer(serializers.ModelSerializer):
    approver = serializers.CharField(source="approver.username", read_only=True)

    class Meta:
        model = QuotaDecision
        fields = ["approver", "decision", "comment", "decided_at"]
        read_only_fields = fields


class QuotaRequestSerializer(serializers.ModelSerializer):
    tenant = serializers.CharField(source="tenant.slug", read_only=True)
    cluster = serializers.CharField(source="cluster.name", read_only=True)
    offering = serializers.CharField(source="offering.slug", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    decisions = DecisionSerializer(many=True, read_only=True)
    context = serializers.SerializerMethodField()

    class Meta:
        model = QuotaRequest
        fields = ["id", "tenant", "cluster", "namespace", "offering", "units", "target", "cluster_queue", "flavor",
                  "resource", "ends_at", "justification",
                  "requested_by", "state", "approvals_required", "decisions", "apply_error", "apply_attempts",
                  "applied_hard", "context", "created_at", "updated_at"]
        read_only_fields = fields

    def get_context(self, obj: QuotaRequest) -> dict[str, Any]:
        contexts = self.context.get("request_contexts")  # the list view computes them for the whole page at once
        if contexts is not None and obj.pk in contexts:
            return dict(contexts[obj.pk])
        return request_context(obj)


class QuotaRequestInputSerializer(serializers.Serializer):
    cluster = SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    namespace = serializers.CharField(max_length=63)
    offering = SlugRelatedField(slug_field="slug", queryset=Offering.objects.all())
    units = serializers.IntegerField(min_value=1, max_value=10_000)
    cluster_queue = serializers.CharField(max_length=253, required=False, allow_blank=True, default="",
                                          help_text="Tenants whose quota lives in Kueue: the ClusterQueue to raise "
                                                    "(needed only when several can take the offering).")
    flavor = serializers.CharField(max_length=253, required=False, allow_blank=True, default="",
                                   help_text="With cluster_queue: the ResourceFlavor whose nominal quota rises.")
    ends_at = serializers.DateTimeField(required=False, allow_null=True)
    justification = serializers.CharField(max_length=4000)
    submit = serializers.BooleanField(default=True)


class DecisionInputSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=4000, required=False, allow_blank=True, default="")


class ReduceInputSerializer(serializers.Serializer):
    units = serializers.IntegerField(min_value=1)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class QuotaRequestViewSet(PortalExceptionHandlerMixin, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    token_write_scope = "requests:write"  # noqa: S105
    serializer_class = QuotaRequestSerializer

    def get_queryset(self) -> QuerySet[QuotaRequest]:
        return QuotaRequest.objects.visible_to(self.request.user).select_related(
            "tenant", "cluster", "offering", "requested_by").prefetch_related("decisions__approver")

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A page of requests with their approver context computed for the page at once (no query per request)."""
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        rows = list(page) if page is not None else list(queryset)
        context = {**self.get_serializer_context(), "request_contexts": request_contexts(rows)}
        data = self.get_serializer(rows, many=True, context=context).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    @extend_schema(request=QuotaRequestInputSerializer, responses={201: QuotaRequestSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = QuotaRequestInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        created = quota_request_create(
            actor=request.user, cluster_id=values["cluster"].pk, namespace=values["namespace"],
            offering_id=values["offering"].pk, units=values["units"], ends_at=values.get("ends_at"),
            justification=values["justification"], submit=values["submit"], cluster_queue=values["cluster_queue"],
            flavor=values["flavor"])
        return Response(self.get_serializer(self.get_queryset().get(pk=created.pk)).data,
                        status=status.HTTP_201_CREATED)

    def _act(self, request: Request, service: Any, **kwargs: Any) -> Response:
        target = self.get_object()
        service(actor=request.user, request_id=target.pk, **kwargs)
        notifications_read(request.user, reverse("portal:quota_request_detail", kwargs={"pk": target.pk}))
        return Response(self.get_serializer(self.get_queryset().get(pk=target.pk)).data)

    @extend_schema(request=DecisionInputSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str) -> Response:
        comment = DecisionInputSerializer(data=request.data)
        comment.is_valid(raise_exception=True)
        return self._act(request, quota_request_decide, approve=True, comment=comment.validated_data["comment"])

    @extend_schema(request=DecisionInputSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def deny(self, request: Request, pk: str) -> Response:
        comment = DecisionInputSerializer(data=request.data)
        comment.is_valid(raise_exception=True)
        return self._act(request, quota_request_decide, approve=False, comment=comment.validated_data["comment"])

    @extend_schema(request=None, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def submit(self, request: Request, pk: str) -> Response:
        """A draft (created with `submit: false`) goes to the approvers."""
        return self._act(request, quota_request_submit)

    @extend_schema(request=None, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def withdraw(self, request: Request, pk: str) -> Response:
        return self._act(request, quota_request_withdraw)

    @extend_schema(request=ReduceInputSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def reduce(self, request: Request, pk: str) -> Response:
        data = ReduceInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return self._act(request, quota_request_reduce, **data.validated_data)

    @extend_schema(request=None, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str) -> Response:
        return self._act(request, quota_request_retry)


class QuotaSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    namespace = serializers.CharField()
    tenant = serializers.CharField()
    key = serializers.CharField()
    offerings = serializers.ListField(child=serializers.CharField())
    hard = serializers.IntegerField()
    used = serializers.IntegerField()
    headroom = serializers.IntegerField()
    quota = serializers.CharField()
    scope = serializers.CharField(help_text="The quota's scopes (empty: every pod).")
    effective_limit = serializers.IntegerField(allow_null=True, help_text="The smallest hard of every quota of the "
                                               "namespace on this key (what an ordinary pod meets).")
    effective_headroom = serializers.IntegerField(allow_null=True)
    binding_quota = serializers.CharField(help_text="The quota that refuses first (least headroom).")
    binds = serializers.BooleanField()
    pending_units = serializers.IntegerField()


class QuotaViewSet(PortalExceptionHandlerMixin, viewsets.GenericViewSet):
    """Per namespace and quota key (with the offerings it counts): hard, used, headroom and pending requests."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = QuotaSerializer
    pagination_class = None
    queryset = ResourceQuota.objects.none()  # rows are computed; see list()

    @extend_schema(responses=QuotaSerializer(many=True))
    def list(self, request: Request) -> Response:
        return Response(QuotaSerializer(quota_rows(request.user), many=True).data)


class QuotaNamespaceStateSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = QuotaNamespaceState
        fields = ["cluster", "namespace", "status", "desired", "observed", "last_error", "failures", "attempted_at",
                  "drift_since", "checked_at"]
        read_only_fields = fields


class QuotaNamespaceStateViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    """Per namespace: the quota the portal granted against what the cluster carries (in sync, applying, drift,
    failed), kept by the confirm beat."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = QuotaNamespaceStateSerializer

    def get_queryset(self) -> QuerySet[QuotaNamespaceState]:
        return QuotaNamespaceState.objects.visible_to(self.request.user).select_related("cluster").order_by("pk")
