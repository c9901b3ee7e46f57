"""Django admin for the approval policy per offering (platform admins only; every change audited)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from audit.services import audit_record
from portal.models import QuotaPolicy


@admin.register(QuotaPolicy)
class QuotaPolicyAdmin(admin.ModelAdmin):
    list_display = ("offering", "approvals", "threshold_units", "approvals_above")

    def save_model(self, request: HttpRequest, obj: QuotaPolicy, form: Any, change: bool) -> None:
        before = None
        if change:
            old = QuotaPolicy.objects.get(pk=obj.pk)
            before = {"approvals": old.approvals, "threshold_units": old.threshold_units,
                      "approvals_above": old.approvals_above}
        super().save_model(request, obj, form, change)  # the admin's change view runs in a transaction
        audit_record(actor=request.user, verb="quota_policy.saved", target=obj, before=before,
                     after={"approvals": obj.approvals, "threshold_units": obj.threshold_units,
                            "approvals_above": obj.approvals_above})

    def delete_model(self, request: HttpRequest, obj: QuotaPolicy) -> None:
        audit_record(actor=request.user, verb="quota_policy.deleted", target=obj,
                     before={"approvals": obj.approvals, "threshold_units": obj.threshold_units})
        super().delete_model(request, obj)
