"""GET /api/v1/audit-events/ (cursor-paginated by id) and /api/v1/audit-events/export/ (JSON lines, for a SIEM).
Audit readers only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import renderers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.settings import api_settings

from audit.api.serializers import AuditEventSerializer
from audit.filtersets import AuditEventFilterSet
from audit.models import AuditEvent
from audit.permissions import IsAuditReader

EXPORT_BATCH = 500
JSON_LINES = "application/x-ndjson"


class AuditEventCursorPagination(CursorPagination):
    ordering = "id"
    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 1000

    def decode_cursor(self, request: Request) -> Cursor | None:
        """A cursor we did not issue is bad input (400, like the CMDB's), not a missing page (DRF's 404)."""
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise ValidationError({"cursor": ["Invalid cursor: use the `next` link of the previous page."]}) from None


class JSONLinesRenderer(renderers.BaseRenderer):
    """One JSON document per line. The export streams its lines itself; this renders errors (403, 400)."""

    media_type = JSON_LINES
    format = "jsonl"
    charset = None

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        return orjson.dumps(data) + b"\n"


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet[AuditEvent]):
    """The audit log, oldest first. Filters: see audit.filtersets (verb, actor, actor_kind, target_type, target_id,
    occurred_from/occurred_to, q, request_id, since_id)."""

    token_scope = "audit:read"  # noqa: S105 - a scope name, not a secret
    # The hash-chained record is served as recorded, list and export alike (docs/tokens.md, node names).
    node_names_redacted = False
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilterSet
    # api_settings imports the dotted paths of the setting; the stubs type it as the strings.
    permission_classes = [*api_settings.DEFAULT_PERMISSION_CLASSES, IsAuditReader]  # type: ignore[list-item]
    pagination_class = AuditEventCursorPagination

    def get_queryset(self) -> QuerySet[AuditEvent]:
        return AuditEvent.objects.order_by("id")

    @extend_schema(
        summary="Export events as JSON lines",
        filters=True,
        description="Streams every matching event, oldest first, one JSON object per line (the fields of the list "
                    "endpoint). Resume with `since_id` = the last id received.",
        responses={(200, JSON_LINES): OpenApiResponse(response=OpenApiTypes.STR, description="JSON lines")},
    )
    @action(detail=False, methods=["get"], url_path="export", pagination_class=None,
            renderer_classes=[JSONLinesRenderer, renderers.JSONRenderer])
    def export(self, request: Request) -> StreamingHttpResponse:
        queryset = self.filter_queryset(self.get_queryset())
        response = StreamingHttpResponse(_lines(queryset), content_type=JSON_LINES)
        response["Cache-Control"] = "no-store"
        return response


def _lines(queryset: QuerySet[AuditEvent]) -> Iterator[bytes]:
    """Keyset batches rather than one long-lived cursor: the stream may be slow and the table large."""
    last = 0
    while True:
        batch = list(queryset.filter(id__gt=last).order_by("id")[:EXPORT_BATCH])
        if not batch:
            return
        for row in AuditEventSerializer(batch, many=True).data:
            yield orjson.dumps(row) + b"\n"
        last = batch[-1].id
