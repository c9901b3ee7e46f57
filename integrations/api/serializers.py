"""API representations. The secret is write-only: accepted on create and update, never returned."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from rest_framework import serializers

from integrations.errors import WebhookValidationError
from integrations.event_types import event_types_validate
from integrations.models import WebhookDelivery, WebhookSubscription
from integrations.services import SECRET_MAX, SECRET_MIN


class WebhookSubscriptionSerializer(serializers.ModelSerializer[WebhookSubscription]):
    secret = serializers.CharField(write_only=True, min_length=SECRET_MIN, max_length=SECRET_MAX, trim_whitespace=False,
                                   style={"input_type": "password"},
                                   help_text="HMAC-SHA512 key of the signature header. Write-only.")
    event_types = serializers.ListField(
        child=serializers.CharField(max_length=100), allow_empty=False,
        help_text="Inventory changes (`node.created`, `device.deleted`, prefix `device.`) and audit verbs or "
                  "prefixes (`grant.`, `violation.`, `quota_request.approved`).",
    )
    created_by: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = WebhookSubscription
        fields = ["id", "name", "url", "secret", "event_types", "active", "created_by", "created_at", "updated_at"]
        read_only_fields = ["id", "created_by", "created_at", "updated_at"]

    def validate_url(self, value: str) -> str:
        if not value.lower().startswith(("http://", "https://")):
            raise serializers.ValidationError("The URL must be http:// or https://.")
        return value

    def validate_event_types(self, value: list[str]) -> list[str]:
        try:
            return event_types_validate(value)
        except WebhookValidationError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is None and "secret" not in attrs:
            raise serializers.ValidationError({"secret": "This field is required."})
        return attrs


class WebhookDeliverySerializer(serializers.ModelSerializer[WebhookDelivery]):
    class Meta:
        model = WebhookDelivery
        fields = ["id", "event_type", "source", "event_id", "status", "attempts", "last_response_code", "last_error",
                  "next_attempt_at", "created_at", "delivered_at", "payload"]
        read_only_fields = fields
