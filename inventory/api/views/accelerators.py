"""Read-only REST resources of the accelerator inventory; filters in inventory.filtersets."""

from __future__ import annotations

from typing import Any

import orjson
from django.db.models import QuerySet
from django.http import HttpResponse
from rest_framework import viewsets
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.exceptions import PortalExceptionHandlerMixin
from inventory.api.fast import NoCountLimitOffsetPagination, ORJSONRenderer
from inventory.api.serializers import (
    AcceleratorPodSerializer,
    DeviceClassSerializer,
    DeviceSerializer,
    FindingSerializer,
    ResourceClaimSerializer,
    ResourceSliceSerializer,
)
from inventory.filtersets import DeviceApiFilterSet, FindingFilterSet, PodFilterSet
from inventory.models import Device, DeviceClass, Finding, Pod, ResourceClaim, ResourceSlice
from inventory.redaction import can_see_sensitive, holder_rule, redact_holder, redacts_node_names
from inventory.representations import splice_documents


class DeviceViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    """Sellable accelerator units of both paths (device-plugin node resources and DRA devices) with live usage.

    The list is the hottest endpoint of the inventory (tens of thousands of rows): it pages without COUNT(*)
    (`count` is null, follow `next`), reads plain values in one query and renders them with orjson. Its items are
    exactly what the serializer produces for the detail endpoint (tested).
    """

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = DeviceSerializer
    filterset_class = DeviceApiFilterSet
    pagination_class = NoCountLimitOffsetPagination
    renderer_classes = [ORJSONRenderer, BrowsableAPIRenderer]

    def get_queryset(self) -> QuerySet[Device]:
        return Device.objects.select_related("cluster").defer("cluster__kubeconfig").order_by("cluster_id", "key")

    def filter_queryset(self, queryset: QuerySet[Device]) -> QuerySet[Device]:
        # Without any filter parameter the filterset is the identity; skip building its form (~2 ms a request).
        if not any(name in self.request.query_params for name in DeviceApiFilterSet.base_filters):
            return queryset
        return super().filter_queryset(queryset)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response | HttpResponse:
        queryset = self.filter_queryset(self.get_queryset())
        user = request.user._wrapped if hasattr(request.user, "_wrapped") else request.user
        sensitive = can_see_sensitive(user)
        column = "api_document" if sensitive else "api_document_redacted"
        rows = queryset.values_list("pk", "cluster_id", "cluster__name", column, "claim_namespace")
        page = self.paginate_queryset(rows)
        selected = page if page is not None else rows
        if not sensitive:  # other tenants' holders: in use, never by whom (the few held rows are rewritten)
            visible = holder_rule(user)
            selected = [(pk, cid, cname, document if visible(cid, ns)
                         else orjson.dumps(redact_holder(orjson.loads(document))).decode(), ns)
                        for pk, cid, cname, document, ns in selected]
        documents = splice_documents(row[:4] for row in selected)
        # The browsable API renders Python data; node pseudonyms are applied to Python data (redaction middleware).
        if request.accepted_renderer.format != "json" or redacts_node_names(user):
            results = [orjson.loads(d) for d in documents]
            return self.get_paginated_response(results) if page is not None else Response(results)
        payload = "[" + ",".join(documents) + "]"
        if page is not None:
            envelope = orjson.dumps({"count": None, "next": self.paginator.get_next_link(),
                                     "previous": self.paginator.get_previous_link(), "results": None}).decode()
            payload = envelope[: -len("null}")] + payload + "}"
        return HttpResponse(payload.encode(), content_type="application/json")


class AcceleratorPodViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    """Live pods that request accelerators (vendor extended resources or resource claims), with their stage.

    Paged without COUNT(*) (`count` is null, follow `next`), like the device list: the largest live table after it."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = AcceleratorPodSerializer
    filterset_class = PodFilterSet
    pagination_class = NoCountLimitOffsetPagination

    def get_queryset(self) -> QuerySet[Pod]:
        return (
            Pod.objects.live().visible_to(self.request.user)
            .filter(accelerator=True)
            .select_related("cluster")
            .defer("raw", "labels", "cluster__kubeconfig")
            .order_by("namespace", "name", "pk")
        )


class ResourceSliceViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = ResourceSliceSerializer
    filterset_fields = ["cluster", "driver", "pool_name", "node_name"]

    def get_queryset(self) -> QuerySet[ResourceSlice]:
        return (
            ResourceSlice.objects.live().select_related("cluster").defer("cluster__kubeconfig").order_by("name", "pk")
        )


class DeviceClassViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = DeviceClassSerializer
    filterset_fields = ["cluster", "name", "extended_resource_name"]

    def get_queryset(self) -> QuerySet[DeviceClass]:
        return DeviceClass.objects.live().select_related("cluster").defer("cluster__kubeconfig").order_by("name", "pk")


class ResourceClaimViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = ResourceClaimSerializer
    filterset_fields = ["cluster", "namespace", "allocated"]

    def get_queryset(self) -> QuerySet[ResourceClaim]:
        return (
            ResourceClaim.objects.live().visible_to(self.request.user)
            .select_related("cluster")
            .defer("cluster__kubeconfig")
            .order_by("namespace", "name", "pk")
        )


class FindingViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    """Health and drift problems, present while the condition holds."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = FindingSerializer
    filterset_class = FindingFilterSet

    def get_queryset(self) -> QuerySet[Finding]:
        return Finding.objects.select_related("cluster").defer("cluster__kubeconfig").order_by("cluster_id", "pk")
