"""Building blocks for hot list endpoints: no COUNT(*) pagination and an orjson renderer.

A COUNT(*) over tens of thousands of rows costs more than producing a page; clients of large inventories page with
`next` links. `count` is null on these endpoints (documented in the schema).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from django.db.models import QuerySet
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from core.api.pagination import PortalLimitOffsetPagination


class NoCountLimitOffsetPagination(PortalLimitOffsetPagination):
    """`?limit=&offset=` without COUNT(*): fetches limit+1 rows to know whether a next page exists."""

    has_next: bool = False

    def paginate_queryset(self, queryset: QuerySet[Any] | Sequence[Any], request: Request,
                          view: Any = None) -> list[Any] | None:
        self.request = request
        self.limit = self.get_limit(request)
        if self.limit is None:
            return None
        self.offset = self.get_offset(request)
        self.count = None  # type: ignore[assignment]
        rows = list(queryset[self.offset : self.offset + self.limit + 1])
        self.has_next = len(rows) > self.limit
        return rows[: self.limit]

    def get_next_link(self) -> str | None:
        if not self.has_next:
            return None
        url = self.request.build_absolute_uri()
        url = replace_query_param(url, self.limit_query_param, self.limit)
        return replace_query_param(url, self.offset_query_param, self.offset + self.limit)

    def get_previous_link(self) -> str | None:
        if self.offset <= 0:
            return None
        url = replace_query_param(self.request.build_absolute_uri(), self.limit_query_param, self.limit)
        if self.offset - self.limit <= 0:
            return remove_query_param(url, self.offset_query_param)
        return replace_query_param(url, self.offset_query_param, self.offset - self.limit)

    def get_paginated_response(self, data: Any) -> Response:
        return Response({"count": None, "next": self.get_next_link(), "previous": self.get_previous_link(),
                         "results": data})

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        response = super().get_paginated_response_schema(schema)
        response["properties"]["count"] = {"type": "integer", "nullable": True,
                                           "description": "Always null: large lists are not counted."}
        return response


class ORJSONRenderer(JSONRenderer):
    """JSON rendered by orjson (several times faster than the standard encoder on large pages)."""

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if data is None:
            return b""
        return orjson.dumps(data, default=str, option=orjson.OPT_NON_STR_KEYS)
