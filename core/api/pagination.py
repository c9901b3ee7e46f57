"""The API's default pagination (REST_FRAMEWORK["DEFAULT_PAGINATION_CLASS"]): DRF's `?limit=&offset=` with bounds,
so that no number a client sends reaches SQL unchecked (PostgreSQL's LIMIT and OFFSET are bigint: `?limit=2**70`
used to answer 500)."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

MAX_LIMIT = 1000  # as the audit log's and the CMDB's pages
MAX_OFFSET = 10**12  # past any table: the page is empty


class PortalLimitOffsetPagination(LimitOffsetPagination):
    """`limit` is capped at 1000 (DRF's `max_limit`); an offset beyond 10**12 reads as 10**12 (an empty page)."""

    max_limit = MAX_LIMIT
    limit_query_description = f"Number of results to return per page (at most {MAX_LIMIT})."

    def get_offset(self, request: Request) -> int:
        return min(super().get_offset(request), MAX_OFFSET)
