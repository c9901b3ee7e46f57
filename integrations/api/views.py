"""`/api/v1/webhooks/`: platform admins manage subscriptions, read their delivery log and ping them."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.settings import api_settings

from core.api.exceptions import PortalExceptionHandlerMixin
from integrations.api.serializers import WebhookDeliverySerializer, WebhookSubscriptionSerializer
from integrations.models import WebhookDelivery, WebhookSubscription
from integrations.permissions import IsWebhookAdmin
from integrations.services import (
    webhook_ping,
    webhook_subscription_create,
    webhook_subscription_delete,
    webhook_subscription_update,
)


class WebhookSubscriptionViewSet(PortalExceptionHandlerMixin, viewsets.ModelViewSet[Any]):  # subscriptions, and their deliveries
    """Webhook subscriptions (platform admins only). Writes are audited; the secret is write-only."""

    serializer_class = WebhookSubscriptionSerializer
    # api_settings imports the dotted paths of the setting; the stubs type it as the strings.
    permission_classes = [*api_settings.DEFAULT_PERMISSION_CLASSES, IsWebhookAdmin]  # type: ignore[list-item]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    token_scope = "inventory:read"  # noqa: S105 - scope names, not secrets
    token_write_scope = "admin:write"  # noqa: S105 - platform-admin-only writes (docs/tokens.md)

    def get_queryset(self) -> QuerySet[WebhookSubscription]:
        return WebhookSubscription.objects.select_related("created_by").order_by("name")

    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        serializer.instance = webhook_subscription_create(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer: BaseSerializer[Any]) -> None:
        serializer.instance = webhook_subscription_update(
            actor=self.request.user, subscription_id=self.get_object().pk, **serializer.validated_data
        )

    def perform_destroy(self, instance: WebhookSubscription) -> None:
        webhook_subscription_delete(actor=self.request.user, subscription_id=instance.pk)

    @extend_schema(
        responses=WebhookDeliverySerializer(many=True),
        parameters=[OpenApiParameter("status", OpenApiTypes.STR, enum=WebhookDelivery.Status.values,
                                     description="Only deliveries in this state.")],
    )
    @action(detail=True, methods=["get"], serializer_class=WebhookDeliverySerializer)
    def deliveries(self, request: Request, pk: str) -> Response:
        """The delivery log of this subscription, newest first."""
        deliveries = WebhookDelivery.objects.filter(subscription=self.get_object()).order_by("-id")
        wanted = request.query_params.get("status")
        if wanted and wanted not in WebhookDelivery.Status.values:
            raise ValidationError({"status": f"One of {', '.join(WebhookDelivery.Status.values)}."})
        if wanted:
            deliveries = deliveries.filter(status=wanted)
        page = self.paginate_queryset(deliveries)
        if page is not None:
            return self.get_paginated_response(WebhookDeliverySerializer(page, many=True).data)
        return Response(WebhookDeliverySerializer(deliveries, many=True).data)

    @extend_schema(request=None, responses={202: WebhookDeliverySerializer})
    @action(detail=True, methods=["post"], serializer_class=WebhookDeliverySerializer)
    def ping(self, request: Request, pk: str) -> Response:
        """Queue a signed `ping` delivery to test the endpoint; follow it in the delivery log."""
        delivery = webhook_ping(actor=request.user, subscription_id=self.get_object().pk)
        return Response(WebhookDeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)
