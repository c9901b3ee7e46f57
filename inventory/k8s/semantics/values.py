"""Typed reads of untrusted JSON (Kubernetes objects as the API, a user or a cluster sent them): never raise, never
return the wrong type. The one copy of these helpers; every module that walks raw objects imports them."""

from __future__ import annotations

from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def as_int(value: Any) -> int | None:
    """An integer (never a bool); None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
