"""The in-app inbox (notifications are also sent by e-mail: portal/notifications/services.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Notification(models.Model):
    """An in-app inbox entry (also sent by e-mail)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    subject = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "read_at"], name="portal_notification_unread")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.subject}"
