"""Admin: clusters are edited here (the kubeconfig is write-only); everything the sync engine writes is read-only.
Every change made here is audited (audit.admin); the kubeconfig only as set/replaced/empty."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.db import transaction
from django.http import HttpRequest

from audit.admin import AuditedModelAdmin
from inventory import models
from inventory.errors import ClusterConfigError
from inventory.services.changes import change_feed_lock
from inventory.services.clients import cluster_connection_validate, parse_kubeconfig
from inventory.services.clusters import cluster_change_record, cluster_delete_in_transaction

KUBECONFIG_SET = "••• (set)"


class WriteOnlyTextarea(forms.Textarea):
    """Never renders a value: not the stored kubeconfig, nor a submitted one sent back with a validation error."""

    def format_value(self, value: Any) -> None:
        return None


class ClusterAdminForm(forms.ModelForm):
    """The kubeconfig is never sent back to the browser: the field is always empty and an empty submission keeps it."""

    kubeconfig = forms.CharField(
        required=False,
        strip=False,
        widget=WriteOnlyTextarea(attrs={"rows": 8, "autocomplete": "off", "spellcheck": "false"}),
        help_text="Paste kubeconfig YAML to replace the stored one. Leave empty to keep it. Never displayed.",
    )
    clear_kubeconfig = forms.BooleanField(required=False, label="Remove the stored kubeconfig")

    class Meta:
        model = models.Cluster
        fields = [
            "name",
            "description",
            "connection",
            "kubeconfig",
            "clear_kubeconfig",
            "kubeconfig_path",
            "context",
            "sync_enabled",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial["kubeconfig"] = ""  # never render the stored secret
        if self.instance.pk and self.instance.kubeconfig:
            self.fields["kubeconfig"].widget.attrs["placeholder"] = KUBECONFIG_SET
            self.fields["kubeconfig"].help_text = f"{KUBECONFIG_SET}. " + str(self.fields["kubeconfig"].help_text)
        self.fields["kubeconfig"].help_text = str(self.fields["kubeconfig"].help_text) + (
            " Inline credentials only (token, client-certificate-data/client-key-data, certificate-authority-data): "
            "exec plugins, auth-provider and file paths are refused.")
        root = settings.PORTAL_KUBECONFIG_DIR
        path = self.fields["kubeconfig_path"]
        if root:
            path.help_text = (f"Absolute path of a kubeconfig file under {root}, mounted in every portal process "
                              "that talks to the cluster.")
        else:
            # A kind that cannot work is not offered: a stored row of that kind must switch kinds to be saved.
            connection = self.fields["connection"]
            connection.choices = [
                c for c in connection.choices if c[0] != models.Cluster.ConnectionKind.KUBECONFIG_PATH
            ]
            connection.help_text = "Kubeconfig file paths are disabled: PORTAL_KUBECONFIG_DIR is not set."
            path.disabled = True
            path.help_text = "Disabled: PORTAL_KUBECONFIG_DIR is not set."

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        stored = self.instance.kubeconfig if self.instance.pk else ""
        pasted = cleaned.get("kubeconfig") or ""
        if not pasted.strip():
            pasted = ""
        if cleaned.get("clear_kubeconfig"):
            cleaned["kubeconfig"] = ""
        else:
            cleaned["kubeconfig"] = pasted or stored
        connection = cleaned.get("connection")
        if connection == models.Cluster.ConnectionKind.KUBECONFIG and not cleaned["kubeconfig"]:
            self.add_error("kubeconfig", "This connection kind needs a kubeconfig.")
        if connection == models.Cluster.ConnectionKind.KUBECONFIG_PATH and not cleaned.get("kubeconfig_path"):
            self.add_error("kubeconfig_path", "This connection kind needs a kubeconfig path.")
        if connection and not (self.has_error("kubeconfig") or self.has_error("kubeconfig_path")):
            self._validate_connection(cleaned, connection, pasted=pasted)
        return cleaned

    def _validate_connection(self, cleaned: dict[str, Any], connection: str, *, pasted: str) -> None:
        """The checks of cluster_register: the kubeconfig (pasted, kept or read from the path) must be data with
        inline credentials and hold the context. Pasted content is checked even when another kind is chosen."""
        kinds = models.Cluster.ConnectionKind
        if pasted and connection != kinds.KUBECONFIG:
            try:
                parse_kubeconfig(pasted)
            except ClusterConfigError as exc:
                self.add_error("kubeconfig", str(exc))
        try:
            cluster_connection_validate(connection=connection, kubeconfig=cleaned["kubeconfig"],
                                        kubeconfig_path=cleaned.get("kubeconfig_path") or "",
                                        context=cleaned.get("context") or "")
        except ClusterConfigError as exc:
            if connection == kinds.KUBECONFIG_PATH:
                self.add_error("kubeconfig_path", str(exc))
            elif pasted:
                self.add_error("kubeconfig", str(exc))
            else:  # a row stored before kubeconfigs were validated, or with a context it lacks
                self.add_error("kubeconfig", f"The stored kubeconfig is refused; paste a new one. {exc}")


@admin.register(models.Cluster)
class ClusterAdmin(AuditedModelAdmin):
    # The same verbs as inventory.services.clusters; the kubeconfig (an encrypted field) is recorded as a secret.
    audit_verbs = {"add": "registered", "change": "updated", "delete": "deleted"}
    form = ClusterAdminForm
    list_display = ["name", "connection", "sync_enabled", "server_version", "created_at"]
    list_filter = ["connection", "sync_enabled"]
    search_fields = ["name", "description"]
    readonly_fields = ["server_version", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The name is the cluster's identity in the change feed and the CMDB: fixed once registered.
        return [*self.readonly_fields, "name"] if obj is not None else list(self.readonly_fields)

    # Edits here reach the CMDB change feed like the services' writes do.
    def save_model(self, request: HttpRequest, obj: models.Cluster, form: Any, change: bool) -> None:
        with transaction.atomic():
            before = None
            if change and obj.pk:
                change_feed_lock(cluster_id=obj.pk)
                before = models.Cluster.objects.filter(pk=obj.pk).first()
            super().save_model(request, obj, form, change)
            cluster_change_record(cluster=obj, before=before)

    # Deleting goes through the service's steps (change feed, audit). The admin refuses it while the cluster has
    # synced rows, since those are read-only here; it allows it for a cluster registered by mistake.
    def delete_model(self, request: HttpRequest, obj: models.Cluster) -> None:
        cluster_delete_in_transaction(cluster_id=obj.pk, actor=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        with transaction.atomic():
            for pk in queryset.values_list("pk", flat=True):
                cluster_delete_in_transaction(cluster_id=pk, actor=request.user)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by the sync engine: viewable, never editable here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(models.SyncState)
class SyncStateAdmin(ReadOnlyAdmin):
    list_display = [
        "cluster",
        "kind",
        "phase",
        "resource_version",
        "listed_count",
        "list_total",
        "relists",
        "last_success_at",
        "last_error_at",
    ]
    list_filter = ["cluster", "kind", "phase"]
    list_select_related = ["cluster"]


@admin.register(models.SyncIssue)
class SyncIssueAdmin(AuditedModelAdmin):
    audit_entity = "sync_issue"
    list_display = ["created_at", "cluster", "kind", "namespace", "name", "error"]
    list_filter = ["cluster", "kind"]
    search_fields = ["name", "namespace", "error"]
    list_select_related = ["cluster"]
    readonly_fields = ["cluster", "kind", "name", "namespace", "error", "excerpt", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # issues come from the sync engine; admins may only review and delete them


class Tombstoned(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("live", "Live"), ("deleted", "Tombstoned")]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        if self.value() == "live":
            return queryset.filter(deleted_at__isnull=True)
        if self.value() == "deleted":
            return queryset.filter(deleted_at__isnull=False)
        return queryset


class KubeObjectAdmin(ReadOnlyAdmin):
    list_display = ["name", "namespace", "cluster", "resource_version", "deleted_at"]
    list_filter = [Tombstoned, "cluster"]
    search_fields = ["name", "namespace", "uid"]
    list_select_related = ["cluster"]


@admin.register(models.Node)
class NodeAdmin(KubeObjectAdmin):
    list_display = ["name", "cluster", "ready", "unschedulable", "kubelet_version", "deleted_at"]
    list_filter = [Tombstoned, "cluster", "ready", "unschedulable"]


@admin.register(models.Pod)
class PodAdmin(KubeObjectAdmin):
    list_display = ["name", "namespace", "cluster", "node_name", "phase", "deleted_at"]
    list_filter = [Tombstoned, "cluster", "phase"]
    search_fields = ["name", "namespace", "uid", "node_name"]


@admin.register(models.Event)
class EventAdmin(KubeObjectAdmin):
    list_display = ["name", "namespace", "cluster", "type", "reason", "involved_kind", "involved_name", "deleted_at"]
    list_filter = [Tombstoned, "cluster", "type", "reason"]


@admin.register(models.ResourceSlice)
class ResourceSliceAdmin(KubeObjectAdmin):
    list_display = ["name", "cluster", "driver", "pool_name", "node_name", "device_count", "deleted_at"]
    list_filter = [Tombstoned, "cluster", "driver"]


for _model in (
    models.Namespace,
    models.ResourceQuota,
    models.LimitRange,
    models.DeviceClass,
    models.ResourceClaim,
    models.ResourceClaimTemplate,
):
    admin.site.register(_model, KubeObjectAdmin)
