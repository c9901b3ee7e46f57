"""REST API of the catalog: offerings with capacity and prices, capacity history, compatibility and the live
selector check. Reads are open to every signed-in user; writes need `catalog.curate_offering`."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from catalog.api.serializers import (
    CapacitySampleSerializer,
    CompatibilityResultSerializer,
    LifecycleInputSerializer,
    OfferingInputSerializer,
    OfferingSavedSerializer,
    OfferingSerializer,
    PriceInputSerializer,
    PriceSerializer,
    SelectorCheckInputSerializer,
    SelectorCheckSerializer,
)
from catalog.errors import OfferingValidationError
from catalog.models import Offering
from catalog.selectors import capacity_history, offerings_for
from catalog.services.compatibility import RequirementError, offerings_check
from catalog.services.matching import offering_selector_check, offering_warnings
from catalog.services.offerings import offering_create, offering_lifecycle_change, offering_update, price_set
from core.api.exceptions import PortalExceptionHandlerMixin


class CuratorOrReadOnly(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return bool(request.user and request.user.is_authenticated)
        return bool(request.user and request.user.has_perm("catalog.curate_offering"))


def _invalid(exc: OfferingValidationError) -> Response:
    return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)


class OfferingViewSet(PortalExceptionHandlerMixin, viewsets.ModelViewSet):
    """Offerings: one sellable unit each, with live capacity per cluster and prices over time.

    Tenants see active and deprecated offerings; curators add `?all=1` to include proposals, retired and dismissed.
    """

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    token_write_scope = "requests:write"  # noqa: S105
    serializer_class = OfferingSerializer
    permission_classes = [*api_settings.DEFAULT_PERMISSION_CLASSES, CuratorOrReadOnly]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def _saved(self, pk: int) -> Offering:
        """The offering just written, whatever the list filters (`?unit_kind=`, retired hidden without `?all=1`): a
        curator who retires an offering gets it back, not a 500."""
        return offerings_for(self.request.user, include_all=True).get(pk=pk)

    def get_queryset(self) -> QuerySet[Offering]:
        include_all = self.request.query_params.get("all") in {"1", "true"}
        queryset = offerings_for(self.request.user, include_all=include_all)
        kind = self.request.query_params.get("unit_kind")
        if kind:
            queryset = queryset.filter(unit_kind=kind)
        return queryset.order_by("name", "pk")

    @extend_schema(request=OfferingInputSerializer, responses={201: OfferingSavedSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = OfferingInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            offering = offering_create(actor=request.user, data=dict(data.validated_data))
        except OfferingValidationError as exc:
            return _invalid(exc)
        body = OfferingSerializer(self._saved(offering.pk)).data
        return Response({**body, "warnings": offering_warnings(offering)}, status=201)

    @extend_schema(request=OfferingInputSerializer, responses=OfferingSavedSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        offering = self.get_object()
        data = OfferingInputSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        try:
            offering = offering_update(actor=request.user, offering_id=offering.pk, data=dict(data.validated_data))
        except OfferingValidationError as exc:
            return _invalid(exc)
        body = OfferingSerializer(self._saved(offering.pk)).data
        return Response({**body, "warnings": offering_warnings(offering)})

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:  # PUT is not offered
        return Response(status=status.HTTP_405_METHOD_NOT_ALLOWED)

    @extend_schema(request=LifecycleInputSerializer, responses=OfferingSerializer)
    @action(detail=True, methods=["post"])
    def lifecycle(self, request: Request, pk: str) -> Response:
        offering = self.get_object()
        data = LifecycleInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            offering_lifecycle_change(actor=request.user, offering_id=offering.pk,
                                      lifecycle=data.validated_data["lifecycle"],
                                      replacement_id=data.validated_data.get("replacement"),
                                      retire_on=data.validated_data.get("retire_on"))
        except OfferingValidationError as exc:
            return _invalid(exc)
        return Response(OfferingSerializer(self._saved(offering.pk)).data)

    @extend_schema(request=PriceInputSerializer, responses={201: PriceSerializer})
    @action(detail=True, methods=["post"])
    def prices(self, request: Request, pk: str) -> Response:
        offering = self.get_object()
        data = PriceInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            price = price_set(actor=request.user, offering_id=offering.pk, **data.validated_data)
        except OfferingValidationError as exc:
            return _invalid(exc)
        return Response(PriceSerializer(price).data, status=201)

    @extend_schema(
        parameters=[OpenApiParameter("cluster", OpenApiTypes.INT), OpenApiParameter("hours", OpenApiTypes.INT)],
        responses=CapacitySampleSerializer(many=True),
    )
    @action(detail=True, methods=["get"], url_path="capacity-history", pagination_class=None)  # a plain list
    def capacity_history(self, request: Request, pk: str) -> Response:
        """Hourly capacity samples (default: the last 14 days)."""
        offering = self.get_object()
        try:
            cluster = int(request.query_params["cluster"]) if request.query_params.get("cluster") else None
            hours = min(max(int(request.query_params.get("hours", 24 * 14)), 1), 24 * 400)
        except ValueError:
            return Response({"detail": "cluster and hours must be integers."}, status=400)
        samples = capacity_history(offering, cluster_id=cluster, hours=hours)
        return Response(CapacitySampleSerializer(samples, many=True).data)


class CompatibilityView(PortalExceptionHandlerMixin, APIView):
    """Which offerings qualify for a workload's requirement (e.g. `cuda 12.4, sm_80+`), and why the others do not."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret

    @extend_schema(parameters=[OpenApiParameter("requirement", OpenApiTypes.STR, required=True)],
                   responses=CompatibilityResultSerializer)
    def get(self, request: Request) -> Response:
        text = request.query_params.get("requirement", "")
        if not text.strip():
            return Response({"requirement": ["Give a requirement, e.g. 'cuda 12.4, sm_80+'."]}, status=400)
        try:
            req, verdicts = offerings_check(offerings_for(request.user), text)
        except RequirementError as exc:
            return Response({"requirement": [str(exc)]}, status=400)
        return Response(CompatibilityResultSerializer(
            {"requirement": text, "understood_as": req.describe(), "offerings": verdicts}).data)


class SelectorCheckView(PortalExceptionHandlerMixin, APIView):
    """Compile a selector and count the devices and nodes it matches now (a warning, not an error, if none)."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    token_write_scope = "inventory:read"  # noqa: S105 - POST, but it only computes
    permission_classes = [*api_settings.DEFAULT_PERMISSION_CLASSES, CuratorOrReadOnly]

    @extend_schema(request=SelectorCheckInputSerializer, responses=SelectorCheckSerializer)
    def post(self, request: Request) -> Response:
        data = SelectorCheckInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        result = offering_selector_check(**data.validated_data)
        return Response(SelectorCheckSerializer(result).data, status=200 if result["valid"] else 400)
