"""Dotted numeric versions (driver 550.54.15, CUDA 12.4, compute capability 8.0, Kubernetes v1.35.0)."""

from __future__ import annotations

import re

_VERSION = re.compile(r"^v?(\d{1,6})(?:\.(\d{1,6}))?(?:\.(\d{1,6}))?(?:[-+].*)?$")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """'12.4' → (12, 4, 0); 'v1.35.0' → (1, 35, 0); anything else → None."""
    match = _VERSION.match(str(text or "").strip())
    if not match:
        return None
    major, minor, patch = (int(part or 0) for part in match.groups())
    return major, minor, patch


def format_version(version: tuple[int, ...], parts: int = 2) -> str:
    return ".".join(str(p) for p in version[:parts])


def in_range(value: tuple[int, int, int], low: str, high: str) -> bool:
    """low ≤ value ≤ high; an empty bound is open. A `high` given as '12' covers 12.x (any minor)."""
    if low and (lo := parse_version(low)) is not None and value < lo:
        return False
    if high and (hi := parse_version(high)) is not None:
        given = len(str(high).lstrip("v").split("."))
        return value[:given] <= hi[:given]
    return True
