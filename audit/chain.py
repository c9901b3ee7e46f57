"""The hash chain's content rules, by hash format version. Pure functions: no queries.

hash = SHA-256(prev_hash ‖ 0x1f ‖ canonical JSON of the row's content), where the content depends on the row's
`hash_version`. Version 1 rows (written before migration 0002) keep their original content so they still verify;
version 2 adds the context columns and the version number itself, so flipping a row's version is also detected.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from audit.models import HASH_V1, HASH_V2, AuditEvent

GENESIS = "0" * 64
SUPPORTED_VERSIONS = (HASH_V1, HASH_V2)
# Columns a v1 row must have at their defaults: they were added after it was written, and v1 does not hash them.
V2_ONLY_DEFAULTS: dict[str, Any] = {
    "actor_kind": "", "before": None, "after": None, "reason": "", "request_id": "", "source_address": "",
}


def digest(prev_hash: str, fields: dict[str, Any]) -> str:
    body = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.sha256(prev_hash.encode() + b"\x1f" + body).hexdigest()


def content(event: AuditEvent) -> dict[str, Any]:
    """The hashed content of a row, by its hash_version (ValueError for an unknown version)."""
    fields: dict[str, Any] = {
        "occurred_at": event.occurred_at.isoformat(), "actor_id": event.actor_id, "actor_name": event.actor_name,
        "verb": event.verb, "target_type": event.target_type, "target_id": event.target_id,
        "target_repr": event.target_repr, "data": event.data,
    }
    if event.hash_version == HASH_V1:
        return fields
    if event.hash_version == HASH_V2:
        return {
            **fields, "v": HASH_V2, "actor_kind": event.actor_kind, "before": event.before, "after": event.after,
            "reason": event.reason, "request_id": event.request_id, "source_address": event.source_address,
        }
    raise ValueError(f"unknown hash version {event.hash_version!r}")


def event_digest(event: AuditEvent) -> str:
    return digest(event.prev_hash, content(event))


def content_problem(event: AuditEvent) -> str:
    """Why a row's stored hash does not vouch for its content ('' if it does)."""
    if event.hash_version not in SUPPORTED_VERSIONS:
        return f"unknown hash version {event.hash_version!r}"
    if event.hash_version == HASH_V1:
        changed = [name for name, default in V2_ONLY_DEFAULTS.items() if getattr(event, name) != default]
        if changed:
            return f"a version-1 row has values in columns it predates ({', '.join(changed)})"
    if event_digest(event) != event.hash:
        return "content does not match its hash"
    return ""
