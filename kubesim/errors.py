"""The API's errors: ApiError and the Kubernetes Status documents it maps to (404, 410, 504 too-large...)."""

from __future__ import annotations

from typing import Any

from .resources import RESOURCES


class ApiError(Exception):
    """An error that maps to a Kubernetes Status response."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        return status_doc(self.code, self.reason, self.message, self.details)


def status_doc(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        doc["details"] = details
    doc["code"] = code
    return doc


def not_found(plural: str, name: str) -> ApiError:
    group = RESOURCES[plural].group if plural in RESOURCES else ""
    res = f"{plural}.{group}" if group else plural
    details = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return ApiError(404, "NotFound", f'{res} "{name}" not found', details)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


TOO_LARGE_CAUSE = "Too large resource version"


def too_large(requested: int, current: int) -> ApiError:
    """What the API server answers a list or watch from a resourceVersion it has not reached (the apiserver's
    storage.NewTooLargeResourceVersionError: apierrors.NewTimeoutError with the ResourceVersionTooLarge cause); client-go's
    reflector recognises it by that cause and relists from scratch."""
    return ApiError(
        504,
        "Timeout",
        f"Timeout: {TOO_LARGE_CAUSE}: {requested}, current: {current}",
        {"causes": [{"reason": "ResourceVersionTooLarge", "message": TOO_LARGE_CAUSE}], "retryAfterSeconds": 1},
    )

