"""Filters of the accelerator inventory, shared by the pages and the REST API.

Semantics (devices):
- ``cluster``: cluster id. ``node``: exact node name. ``model``/``pool``: exact value among those present
  (``pool`` is the node-pool label of the device's node). ``mode``/``path``/``health``: the model's choices.
- ``memory_min``: memory of ONE unit, at least this many **MiB** (the unit the GPU labels report: an H100 80GB is
  81559 MiB, so "80 GiB" would wrongly exclude it). Devices of unknown memory never match.
- ``free``: true = at least one free unit (free > 0); false = none free. ``held``: in_use > 0 / = 0.
- ``unit``: exact unit (extended resource name, or '<driver> <type> [profile]' for DRA).
"""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import QuerySet

from inventory.models import Cluster, Device, Finding, Health, Mode, Path, Pod
from inventory.podstatus import Stage

_BOOL_ANY = [("", "Any")]


def _distinct(field: str) -> list[tuple[str, str]]:
    values = Device.objects.exclude(**{field: ""}).order_by(field).values_list(field, flat=True).distinct()
    return [(value, value) for value in values]


def _model_choices() -> list[tuple[str, str]]:
    return _distinct("model")


def _pool_choices() -> list[tuple[str, str]]:
    return _distinct("node_pool")


class DeviceFilterSet(django_filters.FilterSet):
    cluster = django_filters.ModelChoiceFilter(queryset=Cluster.objects.only("pk", "name"), empty_label="All clusters")
    model = django_filters.ChoiceFilter(choices=_model_choices, empty_label="Any model")
    memory_min = django_filters.NumberFilter(
        field_name="memory_mib", lookup_expr="gte", label="Memory ≥ (MiB per unit)", min_value=0
    )
    mode = django_filters.ChoiceFilter(choices=Mode.choices, empty_label="Any mode")
    pool = django_filters.ChoiceFilter(
        field_name="node_pool", choices=_pool_choices, empty_label="Any pool", label="Node pool"
    )
    path = django_filters.ChoiceFilter(choices=Path.choices, empty_label="Both paths")
    free = django_filters.BooleanFilter(
        method="filter_free",
        label="Free units",
        widget=forms.Select(choices=[*_BOOL_ANY, ("true", "Only with free units"), ("false", "None free")]),
    )
    held = django_filters.BooleanFilter(
        method="filter_held",
        label="In use",
        widget=forms.Select(choices=[*_BOOL_ANY, ("true", "Some in use"), ("false", "None in use")]),
    )
    health = django_filters.ChoiceFilter(choices=Health.choices, empty_label="Any health")
    node = django_filters.CharFilter(field_name="node_name", label="Node")
    unit = django_filters.CharFilter(field_name="unit", label="Unit")

    class Meta:
        model = Device
        fields = ["cluster", "model", "memory_min", "mode", "pool", "path", "free", "held", "health", "node", "unit"]

    def filter_free(self, queryset: QuerySet[Device], name: str, value: bool | None) -> QuerySet[Device]:
        if value is None:
            return queryset
        return queryset.filter(free__gt=0) if value else queryset.filter(free__lte=0)

    def filter_held(self, queryset: QuerySet[Device], name: str, value: bool | None) -> QuerySet[Device]:
        if value is None:
            return queryset
        return queryset.filter(in_use__gt=0) if value else queryset.filter(in_use__lte=0)


class DeviceApiFilterSet(DeviceFilterSet):
    """The API's device filters: same semantics, but model and pool are free text (exact match), so a request does
    not scan the devices table for the select choices a browser form needs."""

    model = django_filters.CharFilter(field_name="model")
    pool = django_filters.CharFilter(field_name="node_pool", label="Node pool")
    cluster = django_filters.NumberFilter(field_name="cluster_id", label="Cluster id")

    class Meta(DeviceFilterSet.Meta):
        pass


PENDING_STAGES: list[tuple[str, str]] = [
    (Stage.PENDING_UNSCHEDULED.value, "Pending, not scheduled"),
    (Stage.BOUND_NOT_STARTED.value, "Bound, not started"),
    (Stage.FAILED_AFTER_START.value, "Failed after start"),
]


class PodFilterSet(django_filters.FilterSet):
    """Accelerator pods. ``stage`` is one of podstatus.Stage; ``namespace`` exact."""

    cluster = django_filters.ModelChoiceFilter(queryset=Cluster.objects.only("pk", "name"), empty_label="All clusters")
    namespace = django_filters.CharFilter(label="Namespace")
    stage = django_filters.ChoiceFilter(choices=[(s.value, s.value) for s in Stage], empty_label="Any stage")

    class Meta:
        model = Pod
        fields = ["cluster", "namespace", "stage"]


class FindingFilterSet(django_filters.FilterSet):
    cluster = django_filters.ModelChoiceFilter(queryset=Cluster.objects.only("pk", "name"), empty_label="All clusters")
    kind = django_filters.ChoiceFilter(choices=Finding.Kind.choices, empty_label="Any kind")
    severity = django_filters.ChoiceFilter(choices=Finding.Severity.choices, empty_label="Any severity")
    node = django_filters.CharFilter(field_name="node_name", label="Node")

    class Meta:
        model = Finding
        fields = ["cluster", "kind", "severity", "node"]
