"""Signal receivers, connected in AuditConfig.ready()."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from audit.permissions import is_audit_reader, remember_reader
from core.types import RequestUser


def remember_reader_on_login(sender: Any, request: HttpRequest | None, user: RequestUser, **kwargs: Any) -> None:
    if request is not None:
        remember_reader(request, is_audit_reader(user))
