"""Django admin for the approval policies of quota and exceptions, and the per-cluster enforcement settings
(platform admins only; every change audited)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.forms.models import model_to_dict
from django.http import HttpRequest

from audit.services import audit_record
from portal.models import AccessPolicy, EnforcementSettings, QuotaPolicy


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


class AuditedAdmin(admin.ModelAdmin):
    """Saves and deletes recorded in the audit log, with the fields before and after."""

    audit_name = ""

    def _state(self, obj: Any) -> dict[str, Any]:
        return {k: str(v) for k, v in model_to_dict(obj).items() if k != "id"}

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        before = self._state(type(obj).objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        audit_record(actor=request.user, verb=f"{self.audit_name}.saved", target=obj, before=before,
                     after=self._state(obj))

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        audit_record(actor=request.user, verb=f"{self.audit_name}.deleted", target=obj, before=self._state(obj))
        super().delete_model(request, obj)


@admin.register(AccessPolicy)
class AccessPolicyAdmin(AuditedAdmin):
    audit_name = "access_policy"
    list_display = ("kind", "max_window", "approvals", "review_timeout", "delete_claims_at_end")


@admin.register(EnforcementSettings)
class EnforcementSettingsAdmin(AuditedAdmin):
    audit_name = "enforcement_settings"
    list_display = ("cluster", "manage_admission_policy", "privileged_applied_at")
    readonly_fields = ("privileged_applied_at",)
