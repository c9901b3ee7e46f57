"""Django admin for the approval policies of quota and exceptions, who owns accelerator quota keys, the
per-cluster enforcement settings, and users and groups (roles are groups: portal/tenancy/roles.py). Platform admins only;
every change audited (audit.admin)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.contrib.auth.models import Group, User
from django.db import models, router, transaction
from django.http import HttpRequest, HttpResponse

from audit.admin import SECRET_REPLACED, SECRET_SET, AuditedModelAdmin
from audit.services import audit_record
from portal.models import AccessPolicy, EnforcementSettings, IdlePolicy, QuotaOwnership, QuotaPolicy, TelemetrySource

# The policies' verbs predate audit.admin and are kept, so that searches and SIEM rules on them keep matching.
SAVED_VERBS = {"add": "saved", "change": "saved", "delete": "deleted"}


@admin.register(QuotaPolicy)
class QuotaPolicyAdmin(AuditedModelAdmin):
    audit_entity = "quota_policy"
    audit_verbs = SAVED_VERBS
    list_display = ("offering", "approvals", "threshold_units", "approvals_above")


@admin.register(QuotaOwnership)
class QuotaOwnershipAdmin(AuditedModelAdmin):
    """Per namespace or tenant: may an approved increase take accelerator quota keys over from another field manager
    (forced server-side apply)? Default (no row): no — the apply is refused with the reason."""

    audit_entity = "quota_ownership"
    audit_verbs = SAVED_VERBS
    list_display = ("__str__", "tenant", "cluster", "namespace", "portal_owns_accelerator_keys", "updated_at")
    list_filter = ("portal_owns_accelerator_keys",)


@admin.register(AccessPolicy)
class AccessPolicyAdmin(AuditedModelAdmin):
    audit_entity = "access_policy"
    audit_verbs = SAVED_VERBS
    list_display = ("kind", "max_window", "approvals", "review_timeout", "delete_claims_at_end")


@admin.register(TelemetrySource)
class TelemetrySourceAdmin(AuditedModelAdmin):
    """Where a cluster's DCGM metrics are read (docs/utilization.md); the state fields are the refresh's."""

    audit_entity = "telemetry_source"
    list_display = ("cluster", "prometheus_url", "cluster_label", "state", "checked_at", "rolled_up_to")
    fields = ("cluster", "prometheus_url", "cluster_label", "state", "message", "checked_at", "last_success_at",
              "rolled_up_to")
    readonly_fields = ("state", "message", "checked_at", "last_success_at", "rolled_up_to")
    # Prometheus inside a cluster network is usually plain http; a URL without a scheme means that.
    formfield_overrides = {models.URLField: {"assume_scheme": "http"}}


@admin.register(IdlePolicy)
class IdlePolicyAdmin(AuditedModelAdmin):
    """Per offering: below which engine activity, for how many hours, a held unit is idle."""

    audit_entity = "idle_policy"
    list_display = ("offering", "threshold", "hours")


@admin.register(EnforcementSettings)
class EnforcementSettingsAdmin(AuditedModelAdmin):
    audit_entity = "enforcement_settings"
    audit_verbs = SAVED_VERBS
    list_display = ("cluster", "manage_admission_policy", "privileged_applied_at")
    readonly_fields = ("privileged_applied_at",)


admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class PortalUserAdmin(AuditedModelAdmin, UserAdmin):
    """Django's user admin, audited: creation, deletion, is_active/is_staff/is_superuser, group (role) and
    permission changes, and password changes (`user.password_changed`, never the hash)."""

    audit_secret_fields = ("password",)

    def audit_secret_marker(self, field: Any, value: Any) -> str:
        if field.name == "password" and isinstance(value, str) and value.startswith(UNUSABLE_PASSWORD_PREFIX):
            return "[unusable]"
        return super().audit_secret_marker(field, value)

    def user_change_password(self, request: HttpRequest, id: str, form_url: str = "") -> HttpResponse:
        # Django's view saves the password outside a transaction and outside save_model: wrap it, and record the
        # change if the stored hash differs afterwards.
        with transaction.atomic(using=router.db_for_write(self.model)):
            user = self.get_object(request, unquote(id))
            response = super().user_change_password(request, id, form_url)
            if user is not None:
                stored = self.model._base_manager.filter(pk=user.pk).values_list("password", flat=True).first()
                if stored is not None and stored != user.password:
                    field = self.model._meta.get_field("password")
                    before = self.audit_secret_marker(field, user.password)
                    after = self.audit_secret_marker(field, stored)
                    audit_record(actor=request.user, verb="user.password_changed", target=user,
                                 before={"password": before},
                                 after={"password": SECRET_REPLACED if after == SECRET_SET else after},
                                 data={"via": "admin"})
        return response


@admin.register(Group)
class PortalGroupAdmin(AuditedModelAdmin, GroupAdmin):
    """Groups are roles. Their members are part of the recorded state, so that deleting a group records who lost
    the role."""

    def audit_state(self, obj: models.Model) -> dict[str, Any]:
        state = super().audit_state(obj)
        state["members"] = sorted(obj.user_set.values_list("username", flat=True)) if obj.pk is not None else []
        return state
