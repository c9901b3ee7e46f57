"""DRF glue shared by every app's API: domain errors become 4xx answers (HackSoft's ApplicationError idea)."""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import PortalError, StateConflictError

# Errors that mean "the resource is not in a state that allows this" rather than "your input is wrong"; an app's
# conflict errors subclass StateConflictError (inventory's LeaseLostError does), as core imports no app.
CONFLICT_ERRORS: tuple[type[PortalError], ...] = (StateConflictError,)


def portal_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus PortalError → 409 for state conflicts and 400 for everything else."""
    if isinstance(exc, PortalError):
        code = status.HTTP_409_CONFLICT if isinstance(exc, CONFLICT_ERRORS) else status.HTTP_400_BAD_REQUEST
        return Response({"detail": str(exc), "code": type(exc).__name__}, status=code)
    return drf_exception_handler(exc, context)


class PortalExceptionHandlerMixin:
    """Use `portal_exception_handler` on a view without a global EXCEPTION_HANDLER setting."""

    def get_exception_handler(self) -> Any:
        return portal_exception_handler
