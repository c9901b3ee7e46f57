"""Who manages webhooks: superusers and members of PORTAL_WEBHOOK_ADMIN_GROUPS (group names, so that this app needs
no import of portal.tenancy.roles)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.permissions import BasePermission

from core.identity import in_any_group
from core.types import RequestUser


def is_webhook_admin(user: RequestUser) -> bool:
    return in_any_group(user, settings.PORTAL_WEBHOOK_ADMIN_GROUPS)


class IsWebhookAdmin(BasePermission):
    message = "Only platform admins manage webhooks."

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_webhook_admin(request.user)
