"""The quota request form, with the figures its live total needs (granted and physical units)."""

from __future__ import annotations

import json
from typing import Any, cast

from django import forms
from django.contrib.auth.models import User
from django.db.models import Q
from django.utils import timezone

from catalog.models import Offering, OfferingCapacity
from inventory.k8s.semantics import is_extended_resource
from inventory.k8s.semantics.kueue import quotas_from_json
from inventory.models import ClusterQueue, LocalQueue
from portal.quota.models import GRANTED, QuotaRequest, unexpired
from portal.quota.services import MAX_UNITS, desired_hards, granted_units
from portal.tenancy.models import QuotaTarget, TenantMembership, TenantNamespace


class QuotaRequestForm(forms.Form):
    target = forms.ChoiceField(label="Namespace")
    offering = forms.ModelChoiceField(queryset=Offering.objects.browsable().order_by("name"), to_field_name="slug")
    queue = forms.ChoiceField(required=False, label="Kueue ClusterQueue / flavor",
                              help_text="Teams whose quota lives in Kueue: the nominal quota that rises. Automatic "
                                        "when only one ClusterQueue and flavor can take the offering.")
    units = forms.IntegerField(min_value=1, max_value=MAX_UNITS, label="Increase by (units)",
                               help_text="Added to what the namespace is granted now.")
    ends_at = forms.DateTimeField(required=False, label="Until (empty: open-ended)",
                                  widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    justification = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=4000)
    over_capacity = forms.BooleanField(required=False, label="Beyond physical capacity on purpose",
                                       help_text="Required when the total exceeds the cards the cluster has; say why "
                                                 "in the justification.")

    def __init__(self, user: User, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        led = list(TenantNamespace.objects.filter(
            tenant__memberships__user=user, tenant__memberships__role=TenantMembership.Role.LEAD
        ).select_related("cluster", "tenant").order_by("cluster__name", "namespace"))
        cast(forms.ChoiceField, self.fields["target"]).choices = [(f"{tn.cluster_id}/{tn.namespace}", f"{tn.cluster.name} / {tn.namespace}")
                                         for tn in led]
        cells = _queue_cells([tn for tn in led if tn.tenant.quota_target == QuotaTarget.CLUSTER_QUEUE])
        if cells:
            cast(forms.ChoiceField, self.fields["queue"]).choices = [("", "automatic"), *cells]
        else:
            del self.fields["queue"]
        offerings = cast("forms.ModelChoiceField[Offering]", self.fields["offering"]).queryset
        self.figures = _figures(led, list(offerings) if offerings is not None else [])
        self.figures_json = json.dumps(self.figures)  # read by portal.js (a data attribute: no inline script)

    def clean(self) -> dict[str, Any]:
        """The resulting total against physical capacity: beyond it only when the lead says so on purpose."""
        values = super().clean() or {}
        target, offering, units = values.get("target"), values.get("offering"), values.get("units")
        if target is None or offering is None or units is None:
            return values
        total = self.figures["granted"].get(f"{target}|{offering.slug}", 0) + units
        physical = self.figures["physical"].get(f"{target.split('/', 1)[0]}|{offering.slug}")
        if physical and total > physical and not values.get("over_capacity"):
            self.add_error("over_capacity", f"{total:,} units in total exceed the {physical:,} physical units of "
                                            f"{offering.name} in this cluster: tick this and say why in the "
                                            "justification, or ask for fewer.")
        return values


def _queue_cells(led: list[TenantNamespace]) -> list[tuple[str, str]]:
    """(value "clusterqueue|flavor", label) for every accelerator cell of the ClusterQueues the namespaces feed."""
    if not led:
        return []
    condition = Q(pk__in=[])
    for tn in led:
        condition |= Q(cluster_id=tn.cluster_id, namespace=tn.namespace)
    names = {(c, q) for c, q in LocalQueue.objects.live().filter(condition).values_list("cluster_id", "cluster_queue")}
    cells: dict[str, str] = {}
    for queue in ClusterQueue.objects.live().filter(cluster_id__in={c for c, _ in names}).order_by("name"):
        if (queue.cluster_id, queue.name) not in names:
            continue
        for cell in quotas_from_json(queue.quotas):
            if is_extended_resource(cell.resource):
                cells[f"{queue.name}|{cell.flavor}"] = f"{queue.name} / {cell.flavor}"
    return sorted(cells.items())


def _figures(led: list[TenantNamespace], offerings: list[Offering]) -> dict[str, dict[str, int]]:
    """For the form's live total: units granted per (namespace, offering) and physical units per (cluster,
    offering) from the last capacity recomputation."""
    granted: dict[str, int] = {}
    hards = desired_hards((tn.cluster_id, tn.namespace) for tn in led)
    for tn in led:
        hard = hards[(tn.cluster_id, tn.namespace)]
        for offering in offerings:
            granted[f"{tn.cluster_id}/{tn.namespace}|{offering.slug}"] = granted_units(tn.cluster_id, offering, hard)
    # Namespaces whose grants went to Kueue ClusterQueues: the units of their granted, unexpired queue requests.
    if led:
        queue_grants = Q(pk__in=[])
        for tn in led:
            queue_grants |= Q(cluster_id=tn.cluster_id, namespace=tn.namespace)
        for cluster_id, namespace, slug, units in QuotaRequest.objects.filter(
                queue_grants, unexpired(timezone.now()), target=QuotaTarget.CLUSTER_QUEUE, state__in=GRANTED,
        ).values_list("cluster_id", "namespace", "offering__slug", "units"):
            key = f"{cluster_id}/{namespace}|{slug}"
            granted[key] = granted.get(key, 0) + units
    physical = {f"{row.cluster_id}|{row.offering.slug}": row.quota_capacity for row in OfferingCapacity.objects.filter(
        cluster_id__in={tn.cluster_id for tn in led}).select_related("offering") if row.quota_capacity}
    return {"granted": granted, "physical": physical}
