"""Writing and verifying the audit chain. `audit_record` must run inside the caller's transaction."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson
from django.db import connection, models, transaction
from django.utils import timezone

from audit.models import AuditEvent

GENESIS = "0" * 64
_CHAIN_LOCK = 0x61756469  # pg_advisory_xact_lock key: one writer appends at a time, so the chain never forks


def _digest(prev_hash: str, fields: dict[str, Any]) -> str:
    body = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS, default=str)
    return hashlib.sha256(prev_hash.encode() + b"\x1f" + body).hexdigest()


def _content(event: AuditEvent) -> dict[str, Any]:
    return {
        "occurred_at": event.occurred_at.isoformat(), "actor_id": event.actor_id, "actor_name": event.actor_name,
        "verb": event.verb, "target_type": event.target_type, "target_id": event.target_id,
        "target_repr": event.target_repr, "data": event.data,
    }


def audit_record(*, actor: Any, verb: str, target: models.Model, data: dict[str, Any] | None = None) -> AuditEvent:
    """Append one event. Call inside the transaction that makes the change, so both commit or neither does."""
    if not connection.in_atomic_block:
        raise RuntimeError("audit_record must run inside the transaction of the change it records")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CHAIN_LOCK])
    last = AuditEvent.objects.order_by("-id").values_list("hash", flat=True).first()
    authenticated = bool(actor is not None and getattr(actor, "is_authenticated", False))
    event = AuditEvent(
        occurred_at=timezone.now(),
        actor_id=actor.pk if authenticated else None,
        actor_name=actor.get_username() if authenticated else "system",
        verb=verb,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        target_repr=str(target)[:300],
        data=orjson.loads(orjson.dumps(data or {}, default=str)),
        prev_hash=last or GENESIS,
    )
    event.hash = _digest(event.prev_hash, _content(event))
    event.save(force_insert=True)
    return event


@dataclass(frozen=True)
class ChainReport:
    checked: int
    first_bad_id: int | None
    problem: str

    @property
    def intact(self) -> bool:
        return self.first_bad_id is None


@transaction.atomic
def audit_verify() -> ChainReport:
    """Recompute the chain from the first row; report the first row whose hash or link does not match."""
    prev = GENESIS
    checked = 0
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        if event.prev_hash != prev:
            return ChainReport(checked, event.id, "link broken: a row before it was removed or altered")
        if _digest(event.prev_hash, _content(event)) != event.hash:
            return ChainReport(checked, event.id, "content does not match its hash")
        prev = event.hash
        checked += 1
    return ChainReport(checked, None, "")
