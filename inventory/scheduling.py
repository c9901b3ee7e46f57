"""Parse kube-scheduler ``FailedScheduling`` / ``PodScheduled=False`` messages into a typed histogram.

Format (``pkg/scheduler/framework/types.go``, ``FitError.Error()``)::

    0/N nodes are available: <PreFilter message | "<count> <reason>, <count> <reason>, ...">. <PostFilter message>.

The histogram is sorted lexicographically by the scheduler ("10 ..." before "2 ..."); we keep message order.
Pure Python, no Kubernetes client. Every function here accepts any input and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CATEGORIES",
    "MAX_MESSAGE_LENGTH",
    "Reason",
    "SchedulingFailure",
    "categorize_reason",
    "parse_scheduling_message",
    "summarize",
]

CATEGORIES: tuple[str, ...] = (
    "insufficient-resource",
    "untolerated-taint",
    "node-affinity",
    "unschedulable",
    "too-many-pods",
    "volume-affinity",
    "dra",
    "preemption",
    "other",
)

# Real messages are a few KiB at most (one entry per distinct reason); anything longer is not a scheduler message.
MAX_MESSAGE_LENGTH = 64 * 1024

# All patterns are anchored and free of nested quantifiers, so matching is linear in the input length.
_HEADER = re.compile(r"(\d{1,10})/(\d{1,10}) nodes are available:[ ]?")
_ENTRY_START = re.compile(r"\d{1,10} ")
_ENTRY = re.compile(r"(\d{1,10}) (\S.*)", re.DOTALL)
# Histogram entries are joined with ", "; only split where the next entry starts with a count.
_ENTRY_SPLIT = re.compile(r", (?=\d{1,10} )")
_PREEMPTION = re.compile(r"(?:^|(?<=[ ,.]))preemption: ")

_DRA_REASONS = frozenset(
    {
        "cannot allocate all claims",
        "resourceclaim in use",
        "timed out trying to allocate devices",
        "cannot schedule extended resource claim",
    }
)
_NODE_AFFINITY_REASONS = frozenset(
    {
        "node(s) didn't match Pod's node affinity/selector",
        "node(s) didn't match Pod's node affinity",
        "node(s) didn't match node selector",
    }
)
_VOLUME_AFFINITY_REASONS = frozenset(
    {
        "node(s) didn't match PersistentVolume's node affinity",
        "node(s) had volume node affinity conflict",
    }
)


@dataclass(frozen=True, slots=True)
class Reason:
    """One histogram entry: ``count`` nodes rejected the pod for ``reason``."""

    count: int
    reason: str
    category: str
    resource: str = ""
    taint: str = ""


@dataclass(frozen=True, slots=True)
class SchedulingFailure:
    """A parsed scheduler message. ``parsed`` is False (and only ``raw`` is meaningful) for unrecognised text."""

    raw: str
    total_nodes: int | None
    reasons: tuple[Reason, ...]
    prefilter_message: str = ""
    preemption_total: int | None = None
    preemption_reasons: tuple[Reason, ...] = ()
    postfilter_prefix: str = ""
    parsed: bool = True
    # Whole PostFilter text, e.g. "preemption: not eligible due to preemptionPolicy=Never." (kept verbatim).
    postfilter_message: str = ""


def categorize_reason(reason: str) -> tuple[str, str, str]:
    """Return ``(category, resource, taint)`` for one scheduler reason string; category is always in CATEGORIES."""
    text = reason.strip() if isinstance(reason, str) else ""
    if text.startswith("Insufficient "):
        return "insufficient-resource", text.removeprefix("Insufficient ").strip(), ""
    if text == "Too many pods":
        return "too-many-pods", "", ""
    if text.startswith(("node(s) had untolerated taint", "node(s) had taint", "node(s) had taints that the pod")):
        taint = ""
        open_at, close_at = text.find("{"), text.rfind("}")
        if 0 <= open_at < close_at:
            taint = text[open_at + 1 : close_at].strip()
        return "untolerated-taint", "", taint
    if text in _NODE_AFFINITY_REASONS:
        return "node-affinity", "", ""
    if text == "node(s) were unschedulable":
        return "unschedulable", "", ""
    if text in _VOLUME_AFFINITY_REASONS:
        return "volume-affinity", "", ""
    lowered = text.lower()
    if (
        lowered in _DRA_REASONS
        or lowered.startswith("waiting for dynamic resource controller")
        or "resourceclaim" in lowered
        or "resource claim" in lowered
    ):
        return "dra", "", ""
    if "preemption" in lowered:
        return "preemption", "", ""
    return "other", "", ""


def _unparsed(raw: str) -> SchedulingFailure:
    return SchedulingFailure(raw=raw, total_nodes=None, reasons=(), parsed=False)


def _strip_end(text: str) -> str:
    """Drop surrounding blanks and the trailing period(s) the scheduler adds (older builds produce "..")."""
    return text.strip().rstrip(".").rstrip()


def _parse_histogram(body: str) -> tuple[Reason, ...] | None:
    """Split ``"2 a, 10 b"`` into reasons in message order; None if the body is not a histogram."""
    body = _strip_end(body)
    if not _ENTRY_START.match(body):
        return None
    reasons: list[Reason] = []
    for chunk in _ENTRY_SPLIT.split(body):
        match = _ENTRY.fullmatch(chunk.strip())
        if match is None:
            return None
        text = match.group(2).strip()
        category, resource, taint = categorize_reason(text)
        reasons.append(Reason(int(match.group(1)), text, category, resource, taint))
    return tuple(reasons)


def _split_main_and_postfilter(rest: str) -> tuple[str, str]:
    """Split the text after the header into (filter part, PostFilter part); the PostFilter part may be empty."""
    found = _PREEMPTION.search(rest)
    if found is None:
        return rest, ""
    before = rest[: found.start()]
    boundary = before.rfind(". ")
    if boundary < 0:
        # No ". " before the marker: either no filter part at all, or the PostFilter text starts right here.
        return before, rest[found.start() :]
    return before[: boundary + 1], rest[boundary + 2 :]


def parse_scheduling_message(message: str) -> SchedulingFailure:
    """Parse a scheduler message; never raises, runs in linear time, and returns ``parsed=False`` for other text."""
    if not isinstance(message, str):
        return _unparsed("" if message is None else str(message)[:MAX_MESSAGE_LENGTH])
    raw = message
    if not raw or len(raw) > MAX_MESSAGE_LENGTH:
        return _unparsed(raw)
    text = raw.strip()
    header = _HEADER.match(text)
    if header is None:
        return _unparsed(raw)
    total = int(header.group(2))
    main, postfilter = _split_main_and_postfilter(text[header.end() :])

    reasons: tuple[Reason, ...] = ()
    prefilter = ""
    main_text = _strip_end(main)
    if main_text:
        histogram = _parse_histogram(main_text)
        if histogram is None:
            prefilter = main_text
        else:
            # The last entry may carry an unrecognised PostFilter message after ". " (no "preemption:" marker).
            last = histogram[-1]
            cut = last.reason.find(". ")
            if cut >= 0 and not postfilter:
                postfilter = last.reason[cut + 2 :]
                text_only = last.reason[:cut]
                category, resource, taint = categorize_reason(text_only)
                histogram = (*histogram[:-1], Reason(last.count, text_only, category, resource, taint))
            reasons = histogram

    preemption_total: int | None = None
    preemption_reasons: tuple[Reason, ...] = ()
    prefix = ""
    postfilter = postfilter.strip()
    found = _PREEMPTION.search(postfilter)
    if found is not None:
        prefix = postfilter[: found.start()].strip().rstrip(",").strip()
        tail = postfilter[found.end() :]
        inner = _HEADER.match(tail)
        if inner is not None:
            preemption_total = int(inner.group(2))
            preemption_reasons = _parse_histogram(tail[inner.end() :]) or ()
    elif postfilter:
        prefix = _strip_end(postfilter)

    return SchedulingFailure(
        raw=raw,
        total_nodes=total,
        reasons=reasons,
        prefilter_message=prefilter,
        preemption_total=preemption_total,
        preemption_reasons=preemption_reasons,
        postfilter_prefix=prefix,
        parsed=True,
        postfilter_message=_strip_end(postfilter),
    )


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def _verb(count: int, singular: str, plural: str) -> str:
    return singular if count == 1 else plural


def _describe(reason: Reason) -> str:
    """One clause of a summary for one histogram entry."""
    n = reason.count
    nodes = _nodes(n)
    match reason.category:
        case "insufficient-resource":
            return f"{nodes} {_verb(n, 'lacks', 'lack')} {reason.resource}"
        case "untolerated-taint":
            detail = f" ({reason.taint})" if reason.taint else ""
            return f"{nodes} {_verb(n, 'has', 'have')} a taint the pod does not tolerate{detail}"
        case "node-affinity":
            return f"{nodes} {_verb(n, 'does', 'do')} not match the pod's node selector/affinity"
        case "unschedulable":
            return f"{nodes} {_verb(n, 'is', 'are')} cordoned (unschedulable)"
        case "too-many-pods":
            return f"{nodes} {_verb(n, 'is', 'are')} at the pod limit"
        case "volume-affinity":
            return f"{nodes} {_verb(n, 'does', 'do')} not match the volume's node affinity"
        case "dra":
            return f"{nodes}: dynamic resource allocation failed ({reason.reason})"
        case _:
            return f"{nodes}: {reason.reason}"


def summarize(failure: SchedulingFailure) -> str:
    """A short human sentence for ``failure``; never raises and never returns an empty string."""
    if not isinstance(failure, SchedulingFailure):
        return "No scheduling information."
    if not failure.parsed:
        raw = failure.raw.strip()
        if not raw:
            return "No scheduling information."
        return raw if len(raw) <= 200 else raw[:199] + "…"
    parts: list[str] = []
    if failure.prefilter_message:
        parts.append(f"blocked before node filtering: {failure.prefilter_message}")
    parts.extend(_describe(reason) for reason in failure.reasons)
    if not parts:
        parts.append(f"no node out of {failure.total_nodes} is available")
    if failure.preemption_reasons:
        helpful = [r for r in failure.preemption_reasons if r.category != "preemption"]
        if helpful:
            parts.append("preemption: " + ", ".join(f"{_nodes(r.count)}: {r.reason}" for r in helpful))
        else:
            parts.append("preempting other pods would not help")
    elif failure.postfilter_message and not failure.preemption_reasons and failure.preemption_total is None:
        parts.append(failure.postfilter_message)
    return "; ".join(parts)
