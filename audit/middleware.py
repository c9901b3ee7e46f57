"""Request id and client address for the audit log (see audit.context)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from audit.context import REQUEST_ID_HEADER, audit_context, client_address, is_sane_request_id


class AuditContextMiddleware:
    """Give every request an id (the caller's X-Request-ID if it is a sane token, else a new one), echo it in the
    response's X-Request-ID header, and make it and the client address available to `audit_record`."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        supplied = request.headers.get(REQUEST_ID_HEADER, "")
        request_id = supplied if is_sane_request_id(supplied) else uuid.uuid4().hex
        address = client_address(
            request.META.get("REMOTE_ADDR"),
            request.META.get("HTTP_X_FORWARDED_FOR"),
            list(getattr(settings, "PORTAL_TRUSTED_PROXIES", [])),
        )
        request.request_id = request_id  # type: ignore[attr-defined]
        with audit_context(request_id=request_id, source_address=address, request=request):
            response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        return response
