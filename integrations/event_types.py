"""The event types a subscription can name, and how an entry matches an event.

Two sources share one vocabulary: inventory changes (`<cluster|node|device>.<created|updated|deleted>`) and audit
verbs (`grant.issued`, `violation.opened`, `quota_request.approved`, …: audit.models.AuditEvent.verb). An entry is an
exact type or a prefix ending in "." (`device.`, `grant.`); it matches events of both sources (`cluster.deleted` is
both a change and an audit verb — the payload's `source` tells them apart).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from integrations.errors import WebhookValidationError
from inventory.models import ChangeEvent

CHANGE_EVENT_TYPES: tuple[str, ...] = tuple(
    f"{kind}.{action}" for kind in ChangeEvent.ObjectType.values for action in ChangeEvent.Action.values
)
# First segments of the audit verbs the portal writes (grep `verb=` in the services); `webhook.` is ours.
AUDIT_NAMESPACES: tuple[str, ...] = (
    "access", "access_request", "api_token", "cluster", "grant", "offering", "price", "quota_policy",
    "quota_request", "tenant", "user", "violation", "webhook",
)
NAMESPACES = frozenset((*ChangeEvent.ObjectType.values, *AUDIT_NAMESPACES))
_ENTRY = re.compile(r"^(?P<namespace>[a-z][a-z0-9_]*)\.(?P<rest>[a-z0-9_.]*)$")
MAX_ENTRIES = 50


def event_types_validate(entries: Iterable[object]) -> list[str]:
    """Normalised, de-duplicated entries; WebhookValidationError names every entry that cannot match anything."""
    cleaned: list[str] = []
    problems: list[str] = []
    for entry in entries:
        text = str(entry).strip()
        match = _ENTRY.match(text)
        if not match or match["namespace"] not in NAMESPACES:
            problems.append(text or "(empty)")
        elif match["namespace"] in ChangeEvent.ObjectType.values and match["rest"] not in (
            "", *ChangeEvent.Action.values
        ) and match["namespace"] not in AUDIT_NAMESPACES:
            problems.append(text)
        elif text not in cleaned:
            cleaned.append(text)
    if problems:
        raise WebhookValidationError(
            f"unknown event types: {', '.join(problems)}. Use inventory changes ({', '.join(CHANGE_EVENT_TYPES)}, or "
            f"a prefix such as 'node.') or audit verbs or prefixes of {', '.join(f'{n}.' for n in AUDIT_NAMESPACES)}"
        )
    if not cleaned:
        raise WebhookValidationError("subscribe to at least one event type")
    if len(cleaned) > MAX_ENTRIES:
        raise WebhookValidationError(f"at most {MAX_ENTRIES} event types")
    return cleaned


def matches(entries: Iterable[str], event_type: str) -> bool:
    return any(event_type == entry or (entry.endswith(".") and event_type.startswith(entry)) for entry in entries)
