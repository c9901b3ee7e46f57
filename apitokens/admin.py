"""Read-only admin: platform admins see every token (never a secret). Tokens are created by the page or
`create_api_token` (the only places that can show the value once) and revoked there or by `revoke_api_token`."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apitokens.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "user", "scopes", "created_at", "expires_at", "revoked_at", "last_used_at"]
    list_filter = ["revoked_at"]
    search_fields = ["prefix", "name", "user__username"]
    exclude = ["key_hash"]
    readonly_fields = ["user", "name", "prefix", "scopes", "rate_limit_per_minute", "created_at", "expires_at",
                       "revoked_at", "revoked_by", "last_used_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
