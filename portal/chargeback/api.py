"""REST API for chargeback: `/api/v1/chargeback/` (JSON or CSV) and `/api/v1/chargeback/focus/` (FOCUS-style CSV).

Tenants see their own tenants' namespaces; finance and platform roles see everything, and the idle capacity."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils import encoders
from rest_framework.views import APIView

from core.api.exceptions import PortalExceptionHandlerMixin
from inventory.redaction import NodeNameRedactor, known_node_names, redacts_node_names
from portal.chargeback import rollups
from portal.chargeback import services as cb
from portal.chargeback.csv_export import CSVRenderer, csv_stream
from portal.tenancy.models import sees_all_tenants


def _efficiency_fields() -> tuple[serializers.DecimalField, ...]:
    """measured_unit_hours, used_cost, idle_cost (docs/chargeback.md, "Efficiency")."""
    return (
        serializers.DecimalField(max_digits=20, decimal_places=6, help_text=(
            "Unit-hours with DCGM telemetry (rollups); used_cost + idle_cost is the cost of these only.")),
        serializers.DecimalField(max_digits=20, decimal_places=6, help_text=(
            "Cost of the measured unit-hours times the mean engine activity (busy share).")),
        serializers.DecimalField(max_digits=20, decimal_places=6, help_text=(
            "Cost of the measured unit-hours the holder allocated but left idle (1 - busy share).")),
    )


class ChargebackRowSerializer(serializers.Serializer):
    period_start = serializers.DateTimeField()
    tenant = serializers.CharField(required=False)
    namespace = serializers.CharField(required=False)
    offering = serializers.CharField(required=False)
    cluster = serializers.CharField(required=False)
    cost_center = serializers.CharField(required=False)
    currency = serializers.CharField()
    unit_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    cost = serializers.DecimalField(max_digits=20, decimal_places=6)
    admin_unit_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    unpriced_unit_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    measured_unit_hours, used_cost, idle_cost = _efficiency_fields()


class ChargebackTotalSerializer(serializers.Serializer):
    currency = serializers.CharField()
    unit_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    cost = serializers.DecimalField(max_digits=20, decimal_places=6)
    admin_unit_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    unpriced_unit_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    measured_unit_hours, used_cost, idle_cost = _efficiency_fields()


class IdleRowSerializer(serializers.Serializer):
    period_start = serializers.DateTimeField()
    offering = serializers.CharField()
    cluster = serializers.CharField()
    currency = serializers.CharField()
    idle_unit_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    idle_cost = serializers.DecimalField(max_digits=20, decimal_places=6)


class PieceSerializer(serializers.Serializer):
    interval = serializers.IntegerField()
    holder = serializers.CharField()
    cluster = serializers.CharField()
    namespace = serializers.CharField()
    tenant = serializers.CharField()
    offering = serializers.CharField()
    resource = serializers.CharField()
    node_name = serializers.CharField()
    period_start = serializers.DateTimeField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    quantity = serializers.IntegerField()
    share = serializers.DecimalField(max_digits=8, decimal_places=6, help_text=(
        "The fraction of each unit the holder consumed: below 1 only for a claim sharing a device by consumable "
        "capacity; unit_hours = quantity x share x hours."))
    unit_price = serializers.DecimalField(max_digits=12, decimal_places=4, allow_null=True)
    currency = serializers.CharField()
    admin_access = serializers.BooleanField()
    unpriced = serializers.BooleanField()
    unit_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    cost = serializers.DecimalField(max_digits=20, decimal_places=6)
    measured_unit_hours, used_cost, idle_cost = _efficiency_fields()


class ChargebackReportSerializer(serializers.Serializer):
    window = serializers.DictField(child=serializers.DateTimeField())
    step = serializers.ChoiceField(choices=cb.STEPS)
    as_of = serializers.DateTimeField(help_text=(
        "Allocations are counted up to this moment: the hourly rollups' time, at most "
        "PORTAL_CHARGEBACK_ROLLUP_MAX_AGE seconds (default 60) before the request."))
    aggregate = serializers.ListField(child=serializers.ChoiceField(choices=cb.DIMENSIONS))
    rows = ChargebackRowSerializer(many=True)
    totals = ChargebackTotalSerializer(many=True)
    idle = IdleRowSerializer(many=True, required=False)
    intervals = PieceSerializer(many=True, required=False)


COMMON_PARAMETERS = [
    OpenApiParameter("window", OpenApiTypes.STR, required=True,
                     description="`<start>,<end>` in ISO 8601 (dates or date-times, UTC when naive; end exclusive)."),
    OpenApiParameter("step", OpenApiTypes.STR, enum=list(cb.STEPS), description="Period of each row (UTC)."),
    OpenApiParameter("cluster", OpenApiTypes.STR, description="Only this cluster."),
    OpenApiParameter("tenant", OpenApiTypes.STR, description="Only this tenant (slug)."),
]


class _ChargebackBase(PortalExceptionHandlerMixin, APIView):
    token_scope = "chargeback:read"  # noqa: S105 - a scope name, not a secret
    csv_header: tuple[str, ...] = ()  # the CSV's columns when there are no rows

    def _params(self, request: Request) -> dict[str, Any]:
        """The report's arguments from the query, checked (a ChargebackError is a 400 before anything is read)."""
        if any("\x00" in request.query_params.get(name, "") for name in ("cluster", "tenant")):
            raise cb.ChargebackError("cluster and tenant cannot contain NUL characters.")  # nor PostgreSQL text
        start, end = cb.parse_window(request.query_params.get("window", ""))
        return {"start": start, "end": end, "step": cb.parse_step(request.query_params.get("step", "month")),
                "scope": cb.Scope.for_user(request.user), "cluster": request.query_params.get("cluster") or None,
                "tenant": request.query_params.get("tenant") or None}



class ChargebackView(_ChargebackBase):
    """Priced allocations in a window, aggregated by the chosen dimensions and step; `?format=csv` for CSV.

    `detail=intervals` adds every priced piece (interval, step period and price period) the numbers are sums of;
    `idle=true` (finance and platform roles) adds the cost of free capacity per offering."""

    renderer_classes = [JSONRenderer, CSVRenderer]

    @extend_schema(parameters=[
        *COMMON_PARAMETERS,
        OpenApiParameter("aggregate", OpenApiTypes.STR,
                         description=f"Comma-separated dimensions: {', '.join(cb.DIMENSIONS)} (default tenant)."),
        OpenApiParameter("detail", OpenApiTypes.STR, enum=["intervals"], description="Add the priced pieces."),
        OpenApiParameter("idle", OpenApiTypes.BOOL, description="Add idle capacity (finance / platform roles)."),
    ], responses={(200, "application/json"): ChargebackReportSerializer,
                  (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description="`?format=csv`: the rows (or with "
                                                     "`detail=intervals` the pieces) as CSV with a header line.")})
    def get(self, request: Request) -> Response:
        dimensions = cb.parse_aggregate(request.query_params.get("aggregate", "tenant"))
        params = self._params(request)
        window = {"start": params["start"], "end": params["end"], "step": params["step"]}
        state = rollups.for_reading()
        selection = {"step": params["step"], "scope": params["scope"], "cluster": params["cluster"],
                     "tenant": params["tenant"]}
        found: list[cb.Piece] = []
        if request.query_params.get("detail") == "intervals":  # every piece: priced from the intervals
            found = cb.pieces(params["start"], params["end"], **selection, now=state.as_of)
            rows, totals = cb.aggregate(found, dimensions), cb.totals(found)
        else:  # the same figures from the hourly rollups (portal/chargeback/rollups.py)
            rows = rollups.report(params["start"], params["end"], dimensions=dimensions, **selection, state=state)
            totals = rollups.totals(params["start"], params["end"], scope=params["scope"], cluster=params["cluster"],
                                    tenant=params["tenant"], state=state)
        if request.accepted_renderer.format == "csv":
            # named like the FOCUS export: what it is and the window, so downloads sort and never clash
            span = f"{window['start']:%Y%m%d}-{window['end']:%Y%m%d}"
            if request.query_params.get("detail") == "intervals":
                self.csv_header = tuple(PieceSerializer().fields)
                return _attachment(Response([cb.piece_json(p) for p in found]), f"chargeback-intervals-{span}.csv")
            self.csv_header = ("period_start", *dimensions, *ChargebackTotalSerializer().fields)
            return _attachment(Response(rows), f"chargeback-{'-'.join(dimensions) or 'total'}-{span}.csv")
        report: dict[str, Any] = {"window": {"start": window["start"], "end": window["end"]}, "step": window["step"],
                                  "as_of": state.as_of, "aggregate": list(dimensions), "rows": rows, "totals": totals}
        if request.query_params.get("idle") in ("1", "true") and sees_all_tenants(request.user):
            report["idle"] = cb.idle(window["start"], window["end"], step=window["step"],
                                     cluster=request.query_params.get("cluster") or None)
        if request.query_params.get("detail") == "intervals":
            report["intervals"] = [cb.piece_json(p) for p in found]
        return Response(ChargebackReportSerializer(report).data)


FOCUS_ROWS = "The rows: CSV with a header line, or objects with `?format=json`."


class FocusExportView(_ChargebackBase):
    """FOCUS-style cost and usage rows (CSV): one per allocation interval and step period."""

    renderer_classes = [CSVRenderer, JSONRenderer]
    csv_header = cb.FOCUS_COLUMNS

    @extend_schema(parameters=COMMON_PARAMETERS, responses={
        (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description=FOCUS_ROWS),
        (200, "application/json"): OpenApiResponse(
            {"type": "array", "items": {"type": "object", "properties": {key: {} for key in cb.FOCUS_COLUMNS}}},
            description=FOCUS_ROWS),
    })
    def get(self, request: Request) -> StreamingHttpResponse:
        """Streamed (cb.focus_stream): a month of a large fleet never sits in memory, as rows or as the document.
        The arguments are checked before the first byte; the node-name pseudonyms (PORTAL_REDACT_NODE_NAMES), which
        NodeNameRedactionMiddleware applies to other answers, are applied here row by row."""
        params = self._params(request)
        rows: Iterable[dict[str, Any]] = cb.focus_stream(
            params["start"], params["end"], step=params["step"], scope=params["scope"], cluster=params["cluster"],
            tenant=params["tenant"], now=rollups.for_reading().as_of)  # up to the moment the reports count
        if redacts_node_names(request.user):
            rows = _redacted(rows)
        if request.accepted_renderer.format == "csv":
            response = StreamingHttpResponse(csv_stream(rows, cb.FOCUS_COLUMNS), content_type="text/csv; charset=utf-8")
            return _attachment(response, f"focus-{params['start']:%Y%m%d}-{params['end']:%Y%m%d}.csv")
        return StreamingHttpResponse(_json_array(rows), content_type="application/json")


def _redacted(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    names = known_node_names()
    redactor = NodeNameRedactor(names) if names else None
    for row in rows:
        yield redactor(row) if redactor else row


def _json_array(rows: Iterable[dict[str, Any]], *, batch: int = 500) -> Iterator[bytes]:
    """A JSON array of the rows, written as DRF's JSONRenderer writes a body (its encoder, compact, UTF-8, no NaN,
    U+2028/9 escaped), a batch of rows at a time."""
    parts: list[str] = ["["]
    first = True
    for row in rows:
        text = json.dumps(row, cls=encoders.JSONEncoder, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        parts.append(text if first else "," + text)
        first = False
        if len(parts) >= batch:
            yield _javascript_safe("".join(parts))
            parts = []
    parts.append("]")
    yield _javascript_safe("".join(parts))


def _javascript_safe(text: str) -> bytes:
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()  # as JSONRenderer does


def _attachment(response: Any, name: str) -> Any:
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
