"""Kubernetes scheduling predicates the catalog needs: taints vs tolerations and node selectors vs labels.

Semantics follow the core/v1 API: an empty toleration key with `Exists` tolerates everything; an empty effect
tolerates every effect; `Equal` (the default operator) compares values; only NoSchedule and NoExecute taints keep
pods out (PreferNoSchedule is a preference).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from inventory.choices import BLOCKING_TAINT_EFFECTS


def toleration_tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taints(taints: Iterable[Any], tolerations: Iterable[Any]) -> list[dict[str, Any]]:
    """The blocking taints (NoSchedule/NoExecute) that no toleration tolerates."""
    tolerations = [t for t in tolerations if isinstance(t, Mapping)]
    return [
        dict(taint) for taint in taints
        if isinstance(taint, Mapping) and taint.get("effect") in BLOCKING_TAINT_EFFECTS
        and not any(toleration_tolerates(t, taint) for t in tolerations)
    ]


def labels_match(labels: Mapping[str, Any], selector: Mapping[str, Any]) -> bool:
    """A nodeSelector-style equality match: every selector label present with the same value."""
    return all(labels.get(key) == value for key, value in selector.items())
