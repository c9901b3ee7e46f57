"""Filters of the inventory (nodes, devices, pods, findings), shared by the pages and the REST API.

Semantics (nodes):
- ``cluster``: cluster id.  ``name``: case-insensitive substring of the node name.
- ``label``: ``key`` (the label exists, any value) or ``key=value`` (exact value).
- ``extended_resource``: the node's *capacity* has that resource name (e.g. ``nvidia.com/gpu``), whatever the amount.
- ``schedulable``: ``yes`` = not cordoned (``spec.unschedulable``) and no taint with effect NoSchedule or NoExecute;
  ``no`` = the opposite. PreferNoSchedule does not count: the scheduler may still place ordinary pods there.
- ``taint``: a taint with that key exists (any value, any effect).  ``ready``: the Ready condition is True / not True.

Semantics (devices):
- ``cluster``: cluster id. ``node``: exact node name. ``model``/``pool``: exact value among those present
  (``pool`` is the node-pool label of the device's node). ``mode``/``path``/``health``: the model's choices.
- ``memory_min``: memory of ONE unit, at least this many **MiB** (the unit the GPU labels report: an H100 80GB is
  81559 MiB, so "80 GiB" would wrongly exclude it). Devices of unknown memory never match.
- ``free``: true = at least one free unit (free > 0); false = none free. ``held``: in_use > 0 / = 0.
- ``unit``: exact unit (extended resource name, or '<driver> <type> [profile]' for DRA).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import django_filters
from django import forms
from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTextTransform

from inventory.k8s.semantics import BLOCKING_TAINT_EFFECTS
from inventory.models import Cluster, Device, Finding, Health, Mode, Node, Path, Pod
from inventory.podstatus import Stage
from inventory.selectors import node_extended_resource_names


class _ListedChoices(django_filters.fields.ModelChoiceIterator):
    """The choices in one plain query. Django's iterator streams them through a server-side cursor, which outside a
    transaction is DECLARE ... WITH HOLD, FETCH and CLOSE: three round trips on every page view for a few rows."""

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        if self.field.empty_label is not None:
            yield ("", self.field.empty_label)
        if self.field.null_label is not None:
            yield (self.field.null_value, self.field.null_label)
        for obj in list(self.queryset):
            yield self.choice(obj)


class _ListedChoiceField(django_filters.fields.ModelChoiceField):
    iterator = _ListedChoices


class ClusterFilter(django_filters.ModelChoiceFilter):
    """The cluster filter of every inventory list: clusters by name, id and name only (the kubeconfig is never
    loaded to render a page), read in one query."""

    field_class = _ListedChoiceField

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("queryset", Cluster.objects.only("pk", "name").order_by("name"))
        kwargs.setdefault("empty_label", "All clusters")
        super().__init__(**kwargs)


def _taints_contain(item: dict[str, str]) -> Q:
    """Q for "the taints array holds an object with these key/values" (jsonb @> on PostgreSQL)."""
    if connection.vendor == "postgresql":
        return Q(taints__contains=[item])
    # SQLite (embedded demo) has no JSON containment; match the serialized members instead.
    q = Q()
    for key, value in item.items():
        q &= Q(taints__regex=rf"{re.escape(json.dumps(key))}:\s*{re.escape(json.dumps(value))}")
    return q


def _blocking_taint() -> Q:
    q = Q()
    for effect in BLOCKING_TAINT_EFFECTS:
        q |= _taints_contain({"effect": effect})
    return q


def _extended_resource_choices() -> list[tuple[str, str]]:
    return [(name, name) for name in node_extended_resource_names()]


class NodeFilterSet(django_filters.FilterSet):
    cluster = ClusterFilter()
    name = django_filters.CharFilter(lookup_expr="icontains", label="Name contains")
    label = django_filters.CharFilter(method="filter_label", label="Label (key or key=value)")
    extended_resource = django_filters.ChoiceFilter(
        choices=_extended_resource_choices,
        method="filter_extended_resource",
        label="Extended resource",
        empty_label="Any resource",
    )
    schedulable = django_filters.ChoiceFilter(
        choices=[("yes", "Schedulable"), ("no", "Not schedulable")],
        method="filter_schedulable",
        label="Schedulable",
        empty_label="Any",
    )
    taint = django_filters.CharFilter(method="filter_taint", label="Has taint (key)")
    ready = django_filters.BooleanFilter(
        label="Ready", widget=forms.Select(choices=[("", "Any"), ("true", "Ready"), ("false", "Not ready")])
    )

    class Meta:
        model = Node
        fields = ["cluster", "name", "label", "extended_resource", "schedulable", "taint", "ready"]

    def filter_label(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        key, sep, label_value = value.strip().partition("=")
        key = key.strip()
        if not key:
            return queryset
        if not sep:
            return queryset.filter(labels__has_key=key)
        # KeyTextTransform takes the key verbatim, so dots, slashes and "__" in label keys are safe.
        return queryset.alias(_label_value=KeyTextTransform(key, "labels")).filter(_label_value=label_value.strip())

    def filter_extended_resource(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        return queryset.filter(capacity__has_key=value)

    def filter_schedulable(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        blocked = Q(unschedulable=True) | _blocking_taint()
        return queryset.exclude(blocked) if value == "yes" else queryset.filter(blocked)

    def filter_taint(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        key = value.strip()
        return queryset.filter(_taints_contain({"key": key})) if key else queryset


_BOOL_ANY = [("", "Any")]


def _distinct(field: str) -> list[tuple[str, str]]:
    """The non-empty values of a device column, sorted. On PostgreSQL a loose index scan: one index probe per
    distinct value (a handful of models or pools) instead of reading every device row on every page view."""
    if connection.vendor != "postgresql":
        values = Device.objects.exclude(**{field: ""}).order_by(field).values_list(field, flat=True).distinct()
        return [(value, value) for value in values]
    quote = connection.ops.quote_name
    column, table = quote(Device._meta.get_field(field).column), quote(Device._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH RECURSIVE walk(value) AS ("  # noqa: S608 - identifiers from the model, no input
            f" (SELECT {column} FROM {table} WHERE {column} > '' ORDER BY {column} LIMIT 1)"
            f" UNION ALL SELECT (SELECT {column} FROM {table} WHERE {column} > walk.value ORDER BY {column} LIMIT 1)"
            f" FROM walk WHERE walk.value IS NOT NULL) SELECT value FROM walk WHERE value IS NOT NULL")
        return [(value, value) for (value,) in cursor.fetchall()]


def _model_choices() -> list[tuple[str, str]]:
    return _distinct("model")


def _pool_choices() -> list[tuple[str, str]]:
    return _distinct("node_pool")


class DeviceFilterSet(django_filters.FilterSet):
    cluster = ClusterFilter()
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

    cluster = ClusterFilter()
    namespace = django_filters.CharFilter(label="Namespace")
    stage = django_filters.ChoiceFilter(choices=[(s.value, s.value) for s in Stage], empty_label="Any stage")

    class Meta:
        model = Pod
        fields = ["cluster", "namespace", "stage"]


class FindingFilterSet(django_filters.FilterSet):
    cluster = ClusterFilter()
    kind = django_filters.ChoiceFilter(choices=Finding.Kind.choices, empty_label="Any kind")
    severity = django_filters.ChoiceFilter(choices=Finding.Severity.choices, empty_label="Any severity")
    node = django_filters.CharFilter(field_name="node_name", label="Node")

    class Meta:
        model = Finding
        fields = ["cluster", "kind", "severity", "node"]
