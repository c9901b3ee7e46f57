"""The OpenAPI schema class of every API view (REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]): drf-spectacular's, plus the
answers it does not document by itself, so that the schema lists every status a client can get (checked by the
schema-driven fuzzing in tests/test_api_fuzz.py, docs/api-fuzzing.md):

- 400 wherever the request carries input (query parameters or a body) or the operation writes (domain errors),
- 401 and 403 wherever authentication is required (no or bad credentials; a role or a token scope is missing),
- 404 wherever the path names an object (or `?format=` chooses a renderer: DRF answers an unknown one with 404),
- 409 on writes of views whose domain errors include state conflicts (core.api.exceptions),
- 429 wherever a throttle applies (API tokens are rate-limited),
- 304 on reads: ConditionalGetMiddleware sets `ETag` and answers `If-None-Match` with 304 Not Modified.

Errors are rendered by the view's renderers: JSON documents, or text for the CSV and JSON-lines renderers.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ComponentRegistry
from rest_framework import permissions, serializers

from core.api.exceptions import portal_exception_handler

JSON = "application/json"
# Streamed bodies get no ETag from ConditionalGetMiddleware, hence no 304.
STREAMED_MEDIA_TYPES = frozenset({"application/x-ndjson"})


class ErrorSerializer(serializers.Serializer[Any]):
    """An error answer: DRF's `detail`, plus the domain error's class for the portal's own errors."""

    detail = serializers.CharField()
    code = serializers.CharField(required=False, help_text="The domain error (e.g. QuotaStateError), when one.")


VALIDATION_ERROR = {
    "type": "object",
    "additionalProperties": {},
    "description": "Field errors (`{field: [messages]}`, `non_field_errors`), or `{detail, code}` for a domain "
                   "error or an unreadable body.",
}
ERRORS: dict[str, str] = {
    "400": "Invalid input; nothing was changed.",
    "401": "No or invalid credentials.",
    "403": "Not allowed: a role, an object permission or the API token's scope is missing.",
    "404": "No such object (or not visible to you), or an unknown `format`.",
    "409": "The object's state does not allow this (e.g. an already decided request); nothing was changed.",
    "429": "Too many requests with this API token; retry after `Retry-After` seconds.",
}


class PortalAutoSchema(AutoSchema):
    def get_operation(self, path: str, path_regex: str, path_prefix: str, method: str,
                      registry: ComponentRegistry) -> dict[str, Any] | None:
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        responses = operation.setdefault("responses", {})
        for code in self._error_codes(operation):
            responses.setdefault(code, self._error_response(code))
        if self.method == "GET" and not STREAMED_MEDIA_TYPES & set(self.map_renderers("media_type")):
            self._document_conditional_get(operation)
        return operation

    def _error_codes(self, operation: dict[str, Any]) -> list[str]:
        view = self.view
        writes = self.method not in permissions.SAFE_METHODS
        query = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        codes = []
        if writes or query or "requestBody" in operation:
            codes.append("400")
        if not all(isinstance(p, type) and issubclass(p, permissions.AllowAny) for p in view.permission_classes):
            codes += ["401", "403"]
        if "{" in self.path or "format" in query:  # DRF answers an unknown `?format=` with 404
            codes.append("404")
        if writes and view.get_exception_handler() is portal_exception_handler:
            codes.append("409")
        if view.throttle_classes:
            codes.append("429")
        return codes

    def _error_response(self, code: str) -> dict[str, Any]:
        json_schema = VALIDATION_ERROR if code == "400" else self.resolve_serializer(ErrorSerializer, "response").ref
        content = {media_type: {"schema": json_schema if media_type == JSON else {"type": "string"}}
                   for media_type in self.map_renderers("media_type")}
        response: dict[str, Any] = {"description": ERRORS[code], "content": content}
        if code == "401":
            response["headers"] = {"WWW-Authenticate": {"schema": {"type": "string"},
                                                        "description": "How to authenticate (Bearer: an API token)."}}
        if code == "429":
            response["headers"] = {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds."}}
        return response

    @staticmethod
    def _document_conditional_get(operation: dict[str, Any]) -> None:
        operation.setdefault("parameters", []).append({
            "in": "header", "name": "If-None-Match", "required": False, "schema": {"type": "string"},
            "description": "The `ETag` of a previous answer: 304 Not Modified if nothing changed.",
        })
        etag = {"schema": {"type": "string"}, "description": "The body's validator; send it back as If-None-Match."}
        for code, response in operation["responses"].items():
            if code.startswith("2"):
                response.setdefault("headers", {})["ETag"] = etag
        operation["responses"]["304"] = {"description": "Not Modified: the body's ETag matches If-None-Match.",
                                         "headers": {"ETag": etag}}
