"""REST API for utilisation: `/api/v1/utilization/?window=&aggregate=` (hourly DCGM rollups summed by the chosen
dimensions) and `/api/v1/devices/<id>/utilization/` (one unit's hourly history). Scoped like chargeback."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any

from django.conf import settings
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api.exceptions import PortalExceptionHandlerMixin
from inventory.models import Device
from portal import chargeback as cb
from portal.telemetry_selectors import rollups_visible_to

DIMENSIONS = ("tenant", "namespace", "offering", "cluster", "node", "unit_kind", "hour")
_FIELDS = {"tenant": "tenant__slug", "namespace": "namespace", "offering": "offering__slug", "cluster": "cluster__name",
           "node": "node_name", "unit_kind": "unit_kind", "hour": "hour"}


def parse_aggregate(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip() for p in (text or "tenant").split(",") if p.strip()))
    if not names or any(n not in DIMENSIONS for n in names):
        raise cb.ChargebackError(f"aggregate is a comma-separated list of {', '.join(DIMENSIONS)}.")
    return names


def summarize(rows: Any, dimensions: tuple[str, ...]) -> list[dict[str, Any]]:
    """Entity-hours per group: sample-weighted mean activity, the largest p95, energy, idle entity-hours."""
    threshold = settings.PORTAL_IDLE_THRESHOLD
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    columns = [_FIELDS[d] for d in dimensions]
    for values in rows.values_list(*columns, "samples", "coverage", "util_mean", "util_p95", "energy_j",
                                   "xid_codes", "holder_uid").iterator(chunk_size=5000):
        key = tuple("" if v is None else v for v in values[: len(columns)])
        samples, coverage, mean, p95, energy, xid, holder = values[len(columns):]
        group = groups.get(key)
        if group is None:
            group = groups[key] = {**dict(zip(dimensions, key, strict=True)), "entity_hours": 0, "measured_hours": 0.0,
                                   "_weighted": 0.0, "_samples": 0, "util_p95_max": None, "energy_kwh": 0.0,
                                   "idle_allocated_hours": 0, "unallocated_hours": 0, "xid_codes": set()}
        group["entity_hours"] += 1
        group["measured_hours"] += coverage
        if mean is not None and samples:
            group["_weighted"] += mean * samples
            group["_samples"] += samples
            if holder and mean < threshold:
                group["idle_allocated_hours"] += 1
        if not holder:
            group["unallocated_hours"] += 1
        if p95 is not None:
            group["util_p95_max"] = max(p95, group["util_p95_max"] or 0.0)
        group["energy_kwh"] += (energy or 0.0) / 3.6e6
        group["xid_codes"].update(xid or [])
    out = []
    for key in sorted(groups, key=lambda k: tuple(str(v) for v in k)):
        group = groups[key]
        samples = group.pop("_samples")
        weighted = group.pop("_weighted")
        group["util_mean"] = round(weighted / samples, 4) if samples else None
        group["measured_hours"] = round(group["measured_hours"], 3)
        group["energy_kwh"] = round(group["energy_kwh"], 3)
        group["xid_codes"] = sorted(group["xid_codes"])
        out.append(group)
    return out


class UtilizationRowSerializer(serializers.Serializer[Any]):
    tenant = serializers.CharField(required=False)
    namespace = serializers.CharField(required=False)
    offering = serializers.CharField(required=False)
    cluster = serializers.CharField(required=False)
    node = serializers.CharField(required=False)
    unit_kind = serializers.CharField(required=False)
    hour = serializers.DateTimeField(required=False)
    entity_hours = serializers.IntegerField(help_text="DCGM entity-hours (a card or MIG instance, per holder).")
    measured_hours = serializers.FloatField(help_text="Entity-hours weighted by sample coverage.")
    util_mean = serializers.FloatField(allow_null=True, help_text="Mean graphics-engine activity (0..1).")
    util_p95_max = serializers.FloatField(allow_null=True)
    energy_kwh = serializers.FloatField()
    idle_allocated_hours = serializers.IntegerField(help_text="Held entity-hours below the idle threshold.")
    unallocated_hours = serializers.IntegerField()
    xid_codes = serializers.ListField(child=serializers.IntegerField())


class UtilizationReportSerializer(serializers.Serializer[Any]):
    window = serializers.DictField(child=serializers.DateTimeField())
    aggregate = serializers.ListField(child=serializers.ChoiceField(choices=DIMENSIONS))
    rows = UtilizationRowSerializer(many=True)


class UtilizationView(PortalExceptionHandlerMixin, APIView):
    """Hourly DCGM rollups in a window (hours starting inside it), summed by the chosen dimensions."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret

    @extend_schema(parameters=[
        OpenApiParameter("window", OpenApiTypes.STR, required=True,
                         description="`<start>,<end>` in ISO 8601 (UTC when naive; end exclusive)."),
        OpenApiParameter("aggregate", OpenApiTypes.STR,
                         description=f"Comma-separated dimensions: {', '.join(DIMENSIONS)} (default tenant)."),
        OpenApiParameter("cluster", OpenApiTypes.STR, description="Only this cluster."),
    ], responses=UtilizationReportSerializer)
    def get(self, request: Request) -> Response:
        start, end = cb.parse_window(request.query_params.get("window", ""))
        dimensions = parse_aggregate(request.query_params.get("aggregate", "tenant"))
        rows = rollups_visible_to(request.user, start, end)
        cluster = (request.query_params.get("cluster") or "").replace("\x00", "")
        if cluster:
            rows = rows.filter(cluster__name=cluster)
        report = {"window": {"start": start, "end": end}, "aggregate": list(dimensions),
                  "rows": summarize(rows, dimensions)}
        return Response(UtilizationReportSerializer(report).data)


class DeviceHourSerializer(serializers.Serializer[Any]):
    hour = serializers.DateTimeField()
    gpu_uuid = serializers.CharField()
    gpu_instance = serializers.CharField()
    gpu_profile = serializers.CharField()
    holder_kind = serializers.CharField()
    namespace = serializers.CharField()
    holder_name = serializers.CharField()
    samples = serializers.IntegerField()
    coverage = serializers.FloatField()
    util_mean = serializers.FloatField(allow_null=True)
    util_p95 = serializers.FloatField(allow_null=True)
    mem_used_mib = serializers.FloatField(allow_null=True)
    energy_j = serializers.FloatField(allow_null=True)
    temp_max = serializers.FloatField(allow_null=True)
    xid_codes = serializers.ListField(child=serializers.IntegerField())


def device_history(user: Any, device: Device, start: dt.datetime, end: dt.datetime) -> list[Any]:
    return list(rollups_visible_to(user, start, end).filter(device=device).order_by("hour", "gpu_uuid",
                                                                                     "gpu_instance"))


class DeviceUtilizationView(PortalExceptionHandlerMixin, APIView):
    """One unit's hourly telemetry (default: the last 24 hours); tenants see the hours their namespaces held it."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret

    @extend_schema(parameters=[OpenApiParameter("window", OpenApiTypes.STR, description="`<start>,<end>`.")],
                   responses=DeviceHourSerializer(many=True))
    def get(self, request: Request, pk: int) -> Response:
        device = get_object_or_404(Device, pk=pk)
        text = request.query_params.get("window", "")
        if text:
            start, end = cb.parse_window(text)
        else:
            end = timezone.now()
            start = end - dt.timedelta(hours=24)
        return Response(DeviceHourSerializer(device_history(request.user, device, start, end), many=True).data)


def sparkline_hours(rows: list[Any]) -> list[float]:
    """Per hour, the sample-weighted mean activity of the rows (for page sparklines)."""
    per_hour: dict[dt.datetime, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        if row.util_mean is not None and row.samples:
            per_hour[row.hour][0] += row.util_mean * row.samples
            per_hour[row.hour][1] += row.samples
    return [w / n for _, (w, n) in sorted(per_hour.items()) if n]
