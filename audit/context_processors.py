"""Template context for base.html: whether to show the Audit nav link (lazy: evaluated only if used)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from audit.permissions import nav_visible


def audit_nav(request: HttpRequest) -> dict[str, Any]:
    return {"audit_nav_visible": SimpleLazyObject(lambda: nav_visible(request))}
