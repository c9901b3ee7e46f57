"""Template helpers for mirrored objects; label keys such as ``nvidia.com/gpu.product`` defeat dotted lookups."""

from __future__ import annotations

from django import template

from inventory.models import Node
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
