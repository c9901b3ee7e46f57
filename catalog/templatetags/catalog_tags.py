"""Template helpers of the catalog pages: formatting, and the geometry of the server-side SVG plots.

The plots are computed here as numbers and rendered by small templates (autoescaped): no chart library, no
JavaScript, and no user text ever reaches the SVG unescaped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django import template
from django.utils import timezone

from catalog.models import CapacitySample, Offering, OfferingCapacity, OfferingPrice

register = template.Library()

# History chart (viewBox units).
HISTORY_W, HISTORY_H = 760, 240
HISTORY_PAD = {"left": 48, "right": 16, "top": 14, "bottom": 34}
HISTORY_SERIES = (("allocatable", "Allocatable"), ("held", "Held"), ("free", "Free"))
HISTORY_KEYS = ("total_units", *(key for key, _ in HISTORY_SERIES))
HISTORY_X_LABELS = 6
# Free-by-node bar chart.
BARS_MAX = 40
BAR_H, BAR_GAP, BAR_LABEL_W, BAR_AREA_W, BAR_VALUE_W = 16, 5, 210, 420, 48
NODE_LABEL_CHARS = 30


@register.filter
def gib(memory_mib: int | None) -> str:
    """``81920`` → ``80 GiB``; ``9728`` → ``9.5 GiB``; an em dash when unknown."""
    if memory_mib is None:
        return "—"
    value = memory_mib / 1024
    return f"{value:.0f} GiB" if value.is_integer() else f"{value:.1f} GiB"


@register.filter
def money(amount: Decimal | None) -> str:
    """A unit price with at least two decimals and no trailing zeros beyond them: 2.5000 → 2.50, 0.1250 → 0.125."""
    if amount is None:
        return "—"
    text = f"{Decimal(amount):.4f}".rstrip("0")
    whole, _, decimals = text.partition(".")
    return f"{whole}.{decimals.ljust(2, '0')}"


@register.filter
def percent(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 100:.0f}%"


@register.filter
def price_state(price: OfferingPrice, now: Any) -> str:
    """``past``, ``current`` or ``scheduled`` for a price period at ``now``."""
    if price.effective_from > now:
        return "scheduled"
    if price.effective_to is not None and price.effective_to <= now:
        return "past"
    return "current"


@register.filter
def node_selector_text(selector: Any) -> list[str]:
    return [f"{k}={v}" for k, v in selector.items()] if isinstance(selector, dict) else []


@register.filter
def toleration_text(tolerations: Any) -> list[str]:
    """``dedicated=training:NoSchedule``, ``key:Exists``; tolerant of malformed entries."""
    out = []
    for t in tolerations if isinstance(tolerations, list) else []:
        if not isinstance(t, dict):
            continue
        key = str(t.get("key") or "*")
        operator = str(t.get("operator") or "Equal")
        body = f"{key} exists" if operator == "Exists" else f"{key}={t.get('value') or ''}"
        effect = str(t.get("effect") or "")
        out.append(f"{body}:{effect}" if effect else body)
    return out


@register.filter
def version_range(offering: Offering, prefix: str) -> str:
    """``driver`` → ``≥ 550.54 and ≤ 570``, from ``<prefix>_min`` / ``<prefix>_max``; "any" when open."""
    low, high = getattr(offering, f"{prefix}_min", ""), getattr(offering, f"{prefix}_max", "")
    if low and high:
        return f"{low} to {high}"
    if low:
        return f"≥ {low}"
    if high:
        return f"≤ {high}"
    return "any"


# ------------------------------------------------------------------------------------------------ plots


def _nice_scale(top: float, ticks: int = 4) -> tuple[int, int]:
    """An axis maximum ≥ top and a round integer step (1, 2, 5 x 10^k) giving at most `ticks` intervals."""
    top = max(float(top), 1.0)
    raw = top / ticks
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next((m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw), 10 * magnitude)
    step = max(1, int(step))
    return step * math.ceil(top / step), step


@dataclass
class Series:
    key: str
    label: str
    points: str
    dots: list[tuple[str, str]]
    last: int


@register.inclusion_tag("catalog/_history_chart.html")
def history_chart(samples: Iterable[CapacitySample], title: str = "Capacity over time") -> dict[str, Any]:
    """Allocatable, held and free units per hour (summed over the clusters shown) as an SVG line chart."""
    by_hour: dict[Any, dict[str, int]] = {}
    for sample in samples:
        hour = by_hour.setdefault(sample.hour, dict.fromkeys(HISTORY_KEYS, 0))
        for key in HISTORY_KEYS:
            hour[key] += int(getattr(sample, key) or 0)
    hours = sorted(by_hour)
    context: dict[str, Any] = {"title": title, "empty": not hours, "width": HISTORY_W, "height": HISTORY_H}
    if not hours:
        return context
    left, right, top, bottom = (HISTORY_PAD[k] for k in ("left", "right", "top", "bottom"))
    plot_w, plot_h = HISTORY_W - left - right, HISTORY_H - top - bottom
    y_max, step = _nice_scale(max(v[key] for v in by_hour.values() for key, _ in HISTORY_SERIES))
    first, last = hours[0], hours[-1]
    span = (last - first).total_seconds()

    def x(hour: Any) -> float:
        return left + (plot_w / 2 if not span else (hour - first).total_seconds() / span * plot_w)

    def y(value: float) -> float:
        return top + plot_h - value / y_max * plot_h

    series = []
    for key, label in HISTORY_SERIES:
        coords = [(x(h), y(by_hour[h][key])) for h in hours]
        series.append(
            Series(
                key=key,
                label=label,
                points=" ".join(f"{cx:.1f},{cy:.1f}" for cx, cy in coords),
                dots=[(f"{cx:.1f}", f"{cy:.1f}") for cx, cy in coords] if len(coords) <= 48 else [],
                last=by_hour[last][key],
            )
        )
    y_ticks = [(f"{y(v):.1f}", v) for v in range(0, y_max + 1, step)]
    picks = sorted({round(i * (len(hours) - 1) / (HISTORY_X_LABELS - 1)) for i in range(HISTORY_X_LABELS)})
    x_ticks = [
        (
            f"{x(hours[i]):.1f}",
            f"{timezone.localtime(hours[i]):%m-%d %H:%M}",
            "middle" if len(picks) == 1 else "start" if i == picks[0] else "end" if i == picks[-1] else "middle",
        )
        for i in picks
    ]
    context.update(
        series=series,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        left=left,
        right=HISTORY_W - right,
        top=top,
        bottom=top + plot_h,
        label_x=left - 6,
        label_y=top + plot_h + 18,
        hours=len(hours),
        first=first,
        last=last,
        table=[(h, by_hour[h]) for h in reversed(hours)][:48],
    )
    return context


@register.inclusion_tag("catalog/_free_by_node_chart.html")
def free_by_node_chart(row: OfferingCapacity) -> dict[str, Any]:
    """Free units per feasible node of one cluster as a horizontal SVG bar chart (most free first)."""
    raw = row.free_by_node if isinstance(row.free_by_node, dict) else {}
    items: list[tuple[str, int]] = []
    for node, free in raw.items():
        try:
            items.append((str(node), max(0, int(free))))
        except (TypeError, ValueError):
            continue
    items.sort(key=lambda item: (-item[1], item[0]))
    shown, hidden = items[:BARS_MAX], items[BARS_MAX:]
    top = max((free for _, free in shown), default=0)
    bars = []
    for index, (node, free) in enumerate(shown):
        y = index * (BAR_H + BAR_GAP)
        width = free / top * BAR_AREA_W if top else 0
        label = node if len(node) <= NODE_LABEL_CHARS else node[: NODE_LABEL_CHARS - 1] + "…"
        bars.append(
            {
                "node": node,
                "label": label,
                "free": free,
                "y": y,
                "text_y": f"{y + BAR_H - 4:.1f}",
                "width": f"{max(width, 1.5 if free else 0):.1f}",
                "value_x": f"{BAR_LABEL_W + width + 6:.1f}",
            }
        )
    return {
        "cluster": row.cluster,
        "bars": bars,
        "hidden": len(hidden),
        "hidden_free": sum(f for _, f in hidden),
        "width": BAR_LABEL_W + BAR_AREA_W + BAR_VALUE_W,
        "height": max(len(bars), 1) * (BAR_H + BAR_GAP),
        "bar_x": BAR_LABEL_W,
        "label_x": BAR_LABEL_W - 8,
        "bar_h": BAR_H,
    }


@register.filter
def reference_request(offering: Offering) -> int:
    """The request size stranded units are counted for: the largest of the offering's common request sizes."""
    from catalog.services.capacity import reference_request as largest_common_request

    return largest_common_request(offering)
