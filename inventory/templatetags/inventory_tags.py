"""Template helpers for mirrored objects; label keys such as ``nvidia.com/gpu.product`` defeat dotted lookups."""

from __future__ import annotations

import json
from datetime import datetime

from django import template
from django.utils import timezone

from inventory.models import Mode, Node, Pod
from inventory.overview import OverviewRow
from inventory.scheduling import parse_scheduling_message, summarize
from inventory.selectors import GPU_PRODUCT_LABEL, ResourceLine, node_is_schedulable, node_resources

register = template.Library()


@register.filter
def lookup(mapping: object, key: str) -> object:
    """``{{ node.labels|lookup:"nvidia.com/gpu.product" }}``; empty string when missing."""
    return mapping.get(key, "") if isinstance(mapping, dict) else ""


@register.filter
def gpu_product(node: Node) -> str:
    labels = node.labels if isinstance(node.labels, dict) else {}
    return str(labels.get(GPU_PRODUCT_LABEL, ""))


@register.filter
def schedulable(node: Node) -> bool:
    return node_is_schedulable(node)


@register.filter
def extended_resources(node: Node) -> list[ResourceLine]:
    return node_resources(node, extended_only=True)


@register.filter
def truncate_error(text: str, length: int = 160) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= length else text[: length - 1] + "…"


UNIT_PHRASES: dict[str, str] = {
    Mode.WHOLE: "whole card",
    Mode.MIG: "MIG slice",
    Mode.TIME_SLICING: "time-slice replica",
    Mode.MPS: "MPS share",
    Mode.DRA_DEVICE: "DRA device",
    Mode.DRA_PARTITION: "DRA partition",
    Mode.OTHER: "other extended resource",
}


@register.filter
def unit_statement(row: OverviewRow) -> str:
    """What one unit of an overview row is, e.g. ``nvidia.com/gpu (time-slice replica, 4 per card)``."""
    label = UNIT_PHRASES.get(row.mode, row.mode)
    per_card = ""
    if row.mode in (Mode.TIME_SLICING, Mode.MPS, Mode.MIG) and row.cards:
        ratio = row.units / row.cards
        if ratio > 1 and abs(ratio - round(ratio)) < 1e-9:
            per_card = f", {round(ratio)} per card"
    return f"{row.unit} ({label}{per_card})"


@register.filter
def cards(value: float) -> str:
    """Physical cards: whole numbers without a decimal point, fractions (odd replica counts) with one."""
    number = float(value or 0)
    return str(int(number)) if number.is_integer() else f"{number:.1f}"


@register.filter
def mib(value: int | None) -> str:
    """``81559`` → ``79.6 GiB``; an em dash when unknown."""
    if value is None:
        return "—"
    gib = value / 1024
    return f"{gib:.0f} GiB" if gib.is_integer() else f"{gib:.1f} GiB"


@register.filter
def pretty_json(value: object) -> str:
    """Indented JSON for evidence/raw fields; autoescaped by the template like any other string."""
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@register.filter
def scheduling_summary(pod: Pod) -> str:
    """The human sentence for a pod's scheduler message (inventory.scheduling.summarize)."""
    return summarize(parse_scheduling_message(pod.scheduling_message or ""))


@register.filter
def scheduling_reason_rows(reasons: object) -> list[dict[str, object]]:
    """The ``reasons`` list of Pod.scheduling_reasons, tolerant of anything malformed."""
    items = reasons.get("reasons") if isinstance(reasons, dict) else None
    return [r for r in items if isinstance(r, dict)] if isinstance(items, list) else []


@register.filter
def age(value: datetime | None) -> str:
    """Compact age: ``45s``, ``12m``, ``3h``, ``5d``."""
    if value is None:
        return "—"
    seconds = max(0, int((timezone.now() - value).total_seconds()))
    for size, suffix in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{suffix}"
    return f"{seconds}s"
