"""REST API for quota: requests (create, list, approve/deny/withdraw/retry) with the approver's context, and the
namespaces' quotas (hard, used, headroom). Querysets are scoped to the user's tenants; approvers see every tenant."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from django.db.models import Q, QuerySet
from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from catalog.models import Offering, OfferingCapacity
from core.api.exceptions import PortalExceptionHandlerMixin
from core.api.fields import SlugRelatedField
from inventory.k8s.semantics import effective_limits, parse_quantity, quota_scope_text
from inventory.models import Cluster, ResourceQuota
from portal.models import QuotaDecision, QuotaNamespaceState, QuotaRequest, TenantNamespace
from portal.notifications import notifications_read
from portal.quota import (
    quota_keys,
    quota_request_create,
    quota_request_decide,
    quota_request_reduce,
    quota_request_retry,
    quota_request_submit,
    quota_request_withdraw,
    recent_increases,
)

# The pod the quota pages speak for: requests cpu (NotBestEffort), no priority class, no activeDeadlineSeconds. A
# quota scoped to other pods is listed with its scope but does not set the namespace's effective limit.
ORDINARY_POD: dict[str, Any] = {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]}


def _int(value: Any) -> int:
    try:
        return int(parse_quantity(value))
    except ValueError:
        return 0


def quota_rows(user: Any) -> list[dict[str, Any]]:
    """Per namespace the user may see and per accelerator quota key: hard, used, headroom, pending units."""
    owned = list(TenantNamespace.objects.visible_to(user).select_related("tenant", "cluster"))
    keys_to_offerings: dict[str, list[str]] = defaultdict(list)
    for offering in Offering.objects.browsable():
        for key in quota_keys(offering):
            keys_to_offerings[key].append(offering.slug)
    pending: dict[tuple[int, str, str], int] = defaultdict(int)
    for r in QuotaRequest.objects.filter(state__in=["submitted", "approved", "applying"]).select_related("offering"):
        pending[(r.cluster_id, r.namespace, quota_keys(r.offering)[0])] += r.units
    rows = []
    if not owned:
        return rows
    condition = Q(pk__in=[])
    for tn in owned:
        condition |= Q(cluster_id=tn.cluster_id, namespace=tn.namespace)
    quotas: dict[tuple[int, str], list[ResourceQuota]] = defaultdict(list)
    for quota in ResourceQuota.objects.live().filter(condition).order_by("name"):  # one query for every namespace
        quotas[(quota.cluster_id, quota.namespace)].append(quota)
    for tn in owned:
        here = quotas[(tn.cluster_id, tn.namespace)]
        limits, _ = effective_limits(_entries(here), ORDINARY_POD)
        for quota in here:
            scope = quota_scope_text((quota.raw or {}).get("spec"))
            for key, hard in sorted((quota.hard or {}).items()):
                if key not in keys_to_offerings:
                    continue
                used = _int((quota.used or {}).get(key, 0))
                effective = limits.get(key)
                binds = effective is not None and effective.binding.quota == quota.name and len(effective.quotas) > 1
                rows.append({"cluster": tn.cluster.name, "namespace": tn.namespace, "tenant": tn.tenant.slug,
                             "quota": quota.name, "key": key, "offerings": keys_to_offerings[key], "hard": _int(hard),
                             "used": used, "headroom": max(_int(hard) - used, 0), "scope": scope,
                             "effective_limit": int(effective.limit) if effective else None,
                             "effective_headroom": int(effective.headroom) if effective else None,
                             "binding_quota": effective.binding.quota if effective else "", "binds": binds,
                             "pending_units": pending.get((tn.cluster_id, tn.namespace, key), 0)})
    return rows


def _entries(quotas: Any) -> list[dict[str, Any]]:
    """Mirrored ResourceQuota rows (or `.values()` dicts) as the semantics module reads them."""
    out = []
    for q in quotas:
        row = q if isinstance(q, dict) else {"name": q.name, "hard": q.hard, "used": q.used, "raw": q.raw}
        out.append({"name": row["name"], "hard": row["hard"] or {}, "used": row["used"] or {},
                    "spec": (row.get("raw") or {}).get("spec")})
    return out


def request_context(request: QuotaRequest) -> dict[str, Any]:
    """What an approver needs to decide (see `request_contexts`)."""
    return request_contexts([request])[request.pk]


def request_contexts(requests: Sequence[QuotaRequest]) -> dict[int, dict[str, Any]]:
    """What an approver needs to decide, per request: the namespace's effective limit (every quota of the namespace
    applies; the tightest binds) and use, free capacity, and granted quota against physical capacity. Granted quota
    in the cluster is the sum over namespaces of each one's effective limit (two quotas on one key are not two
    grants). A fixed number of queries however many requests (the approvers' queue and the API list many)."""
    if not requests:
        return {}
    clusters = {r.cluster_id for r in requests}
    quotas: dict[int, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for row in ResourceQuota.objects.live().filter(cluster_id__in=clusters).values(
            "cluster_id", "namespace", "name", "hard", "used", "raw"):
        quotas[row["cluster_id"]][row["namespace"]].append(row)
    # Physical capacity is the capacity recomputation's quota_capacity (catalog.services.capacity
    # quota_key_capacity), the number the offering pages and the oversubscription page show: read, never recomputed
    # here, so every page agrees until the next recomputation.
    figures = {(row["offering_id"], row["cluster_id"]): row for row in OfferingCapacity.objects.filter(
        cluster_id__in=clusters, offering_id__in={r.offering_id for r in requests}).values(
        "offering_id", "cluster_id", "quota_capacity", "free", "computed_at")}
    recent = recent_increases(requests)
    limits_cache: dict[tuple[int, str], dict[str, Any]] = {}
    out: dict[int, dict[str, Any]] = {}
    for request in requests:
        key = quota_keys(request.offering)[0]
        if (request.cluster_id, key) not in limits_cache:
            limits_cache[(request.cluster_id, key)] = {
                namespace: effective_limits(_entries(rows), ORDINARY_POD)[0].get(key)
                for namespace, rows in quotas[request.cluster_id].items()}
        limits = limits_cache[(request.cluster_id, key)]
        granted_now = sum(int(limit.limit) for limit in limits.values() if limit is not None)
        here = limits.get(request.namespace)
        hard_here, used_here = (int(here.limit), int(here.used)) if here else (0, 0)
        capacity = figures.get((request.offering_id, request.cluster_id)) or {
            "quota_capacity": None, "free": 0, "computed_at": None}
        physical, free = capacity["quota_capacity"], capacity["free"]
        # Until the sync shows it active, the request's units are not in the mirrored quotas yet.
        pending = request.state in {QuotaRequest.State.DRAFT, QuotaRequest.State.SUBMITTED,
                                    QuotaRequest.State.APPROVED, QuotaRequest.State.APPLYING,
                                    QuotaRequest.State.FAILED}
        granted_after = granted_now + (request.units if pending else 0)
        out[request.pk] = {
            "quota_key": key, "namespace_hard": hard_here, "namespace_used": used_here,
            "binding_quota": here.binding.quota if here else "",
            "namespace_quotas": [{"quota": q.quota, "hard": int(q.hard), "used": int(q.used), "scope": q.scope}
                                 for q in here.quotas] if here else [],
            "namespace_recent_increase": recent[request.pk] + request.units,
            "offering_free_units": free or 0, "granted_in_cluster": granted_now, "granted_after": granted_after,
            "physical_capacity": physical, "capacity_computed_at": capacity["computed_at"],
            "oversubscription": round(granted_after / physical, 3) if physical else None}
    return out


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
        fields = ["id", "tenant", "cluster", "namespace", "offering", "units", "ends_at", "justification",
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
            justification=values["justification"], submit=values["submit"])
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
