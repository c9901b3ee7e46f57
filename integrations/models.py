"""Webhook subscriptions, their delivery log, and the dispatcher's read positions."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from inventory.fields import EncryptedTextField


class WebhookSubscription(models.Model):
    """An endpoint that receives signed POSTs for the event types it subscribes to.

    The secret is the HMAC key of the signature header. It is encrypted at rest like kubeconfigs (Fernet under
    PORTAL_FIELD_ENCRYPTION_KEYS; the portal decrypts it to sign), written once through the API, and never
    returned, rendered or logged afterwards."""

    name = models.CharField(max_length=100)
    url = models.URLField(max_length=2000)
    # 16 to 200 characters (integrations.services.SECRET_MIN/MAX); the column holds `enc:v1:<Fernet token>`.
    secret = EncryptedTextField(help_text="HMAC-SHA512 key. Write-only: never displayed or logged; encrypted at rest.")
    event_types = models.JSONField(
        default=list, help_text="e.g. ['node.created', 'device.', 'grant.']; an entry ending in '.' is a prefix.",
    )
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["name"], name="integrations_webhooksubscription_unique_name")]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:  # never the secret
        return f"<WebhookSubscription {self.pk} {self.name}>"


class WebhookDelivery(models.Model):
    """One event for one subscription: created once by the dispatcher, attempted by the `webhooks` queue until it
    is delivered or has failed for good. The log of what was sent and what the endpoint answered."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    class Source(models.TextChoices):
        CHANGES = "changes", "Inventory change feed"
        AUDIT = "audit", "Audit log"
        PING = "ping", "Ping"

    subscription = models.ForeignKey(WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries")
    source = models.CharField(max_length=10, choices=Source.choices)
    event_id = models.BigIntegerField(null=True, blank=True, help_text="ChangeEvent or AuditEvent id; null: ping.")
    event_type = models.CharField(max_length=100)
    payload = models.JSONField(help_text="The event as sent (the body adds the delivery id and the timestamp).")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.IntegerField(default=0)
    last_response_code = models.IntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True, help_text="When a pending delivery is due.")
    claimed_until = models.DateTimeField(null=True, blank=True, help_text="An attempt is in flight until then.")
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            # Exactly once per (subscription, event), whatever the dispatcher does.
            models.UniqueConstraint(fields=["subscription", "source", "event_id"],
                                    name="integrations_webhookdelivery_unique_event"),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(status="pending"), name="int_delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} → {self.subscription_id} ({self.status})"


class DispatchCursor(models.Model):
    """How far the dispatcher has read one event source. Moved in the transaction that creates the deliveries for
    what it read, under a row lock, so every (subscription, event) delivery is created exactly once."""

    source = models.CharField(max_length=10, choices=WebhookDelivery.Source.choices)
    position = models.CharField(max_length=100, blank=True, help_text="Change-feed cursor, or the last audit id.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["source"]
        constraints = [models.UniqueConstraint(fields=["source"], name="integrations_dispatchcursor_unique_source")]

    def __str__(self) -> str:
        return f"{self.source} at {self.position or 'start'}"
