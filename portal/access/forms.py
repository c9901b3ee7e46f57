"""The access request form (and the break-glass variant), limits said before submit."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, cast

from django import forms
from django.db.models import QuerySet

from portal.access.models import AccessKind
from portal.access.services import access_policy
from portal.formatting import duration_text
from portal.tenancy.models import TenantNamespace


def target_choices(queryset: QuerySet[TenantNamespace]) -> list[tuple[str, str]]:
    return [(f"{tn.cluster_id}/{tn.namespace}", f"{tn.cluster.name} / {tn.namespace}")
            for tn in queryset.select_related("cluster").order_by("cluster__name", "namespace")]


class AccessRequestForm(forms.Form):
    kind = forms.ChoiceField(choices=AccessKind.choices)
    target = forms.ChoiceField(label="Namespace")
    service_account = forms.CharField(required=False, max_length=253, help_text="Privileged only.")
    workload = forms.CharField(required=False, max_length=63, label="Workload (app.kubernetes.io/name, optional)")
    window_hours = forms.DecimalField(label="Window (hours)", min_value=0.1, max_value=8784, decimal_places=2)
    starts_at = forms.DateTimeField(required=False, label="Starts (empty: when approved)",
                                    widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    ticket_ref = forms.CharField(max_length=120, label="Ticket reference")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=4000)

    def __init__(self, targets: list[tuple[str, str]], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["target"]).choices = targets
        # The limits are said before submit: the window's maximum per kind (policy), the service account only for
        # privileged (portal.js disables it for adminAccess and swaps the maximum when the kind changes).
        self.max_hours = {kind: access_policy(kind).max_window.total_seconds() / 3600 for kind in AccessKind.values}
        limits = "; ".join(f"{AccessKind(kind).label}: at most {duration_text(dt.timedelta(hours=hours))}"
                           for kind, hours in self.max_hours.items())
        window = self.fields["window_hours"]
        window.help_text = limits
        window.widget.attrs.update({"data-max-hours": json.dumps(self.max_hours), "step": "any",
                                    "max": f"{max(self.max_hours.values()):g}"})
        self.fields["kind"].widget.attrs["data-controls"] = "access-scope"
        self.fields["service_account"].help_text = "Privileged only: adminAccess covers the whole namespace."
        self.fields["workload"].help_text = "Privileged only."

    def clean(self) -> dict[str, Any]:
        values = super().clean() or {}
        kind, hours = values.get("kind"), values.get("window_hours")
        if kind in self.max_hours and hours is not None and float(hours) > self.max_hours[kind]:
            limit = duration_text(dt.timedelta(hours=self.max_hours[kind]))
            self.add_error("window_hours", f"{AccessKind(kind).label} is granted for at most {limit}.")
        return values

    def service_kwargs(self) -> dict[str, Any]:
        values = self.cleaned_data
        cluster_id, namespace = values["target"].split("/", 1)
        return {"kind": values["kind"], "cluster_id": int(cluster_id), "namespace": namespace,
                "service_account": values["service_account"], "workload": values["workload"],
                "window": dt.timedelta(hours=float(values["window_hours"])), "ticket_ref": values["ticket_ref"],
                "reason": values["reason"]}


class BreakGlassForm(AccessRequestForm):
    starts_at = None  # type: ignore[assignment]  # break-glass starts now
