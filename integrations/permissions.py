"""Who manages webhooks: superusers and members of PORTAL_WEBHOOK_ADMIN_GROUPS (group names, so that this app needs
no import of portal.roles)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.permissions import BasePermission

from core.types import RequestUser


def is_webhook_admin(user: RequestUser) -> bool:
    if not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return False
    if getattr(user, "is_superuser", False):
        return True
    return bool(user.groups.filter(name__in=settings.PORTAL_WEBHOOK_ADMIN_GROUPS).exists())


class IsWebhookAdmin(BasePermission):
    message = "Only platform admins manage webhooks."

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_webhook_admin(request.user)
