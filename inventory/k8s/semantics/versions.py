"""Kubernetes versions as the API server reports them (`/version` gitVersion: 'v1.34.3-eks-1234', '1.35.0')."""

from __future__ import annotations

import re

__all__ = ["kubernetes_version"]

_VERSION = re.compile(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,5}))?")


def kubernetes_version(text: object) -> tuple[int, int] | None:
    """(major, minor) of '1.35', 'v1.34.1', '1.34.1-gke.100'; None when it is not a version."""
    match = _VERSION.match(text.strip()) if isinstance(text, str) else None
    return (int(match[1]), int(match[2])) if match else None
