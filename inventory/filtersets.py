"""Node filters shared by the node page and the REST API.

Semantics:
- ``cluster``: cluster id.  ``name``: case-insensitive substring of the node name.
- ``label``: ``key`` (the label exists, any value) or ``key=value`` (exact value).
- ``extended_resource``: the node's *capacity* has that resource name (e.g. ``nvidia.com/gpu``), whatever the amount.
- ``schedulable``: ``yes`` = not cordoned (``spec.unschedulable``) and no taint with effect NoSchedule or NoExecute;
  ``no`` = the opposite. PreferNoSchedule does not count: the scheduler may still place ordinary pods there.
- ``taint``: a taint with that key exists (any value, any effect).  ``ready``: the Ready condition is True / not True.
"""

from __future__ import annotations

import json
import re

import django_filters
from django import forms
from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.fields.json import KeyTextTransform

from inventory.k8s.semantics import BLOCKING_TAINT_EFFECTS
from inventory.models import Cluster, Node
from inventory.selectors import node_extended_resource_names


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
    cluster = django_filters.ModelChoiceFilter(queryset=Cluster.objects.all(), empty_label="All clusters")
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
