"""Writing and verifying the audit chain. `audit_record` must run inside the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from django.db import connection, models, transaction
from django.utils import timezone

from audit.chain import GENESIS, content, content_problem, digest
from audit.context import current_context
from audit.models import CURRENT_HASH_VERSION, HASH_V1, ActorKind, AuditEvent
from core.types import RequestUser

__all__ = ["GENESIS", "ChainProblem", "ChainReport", "audit_record", "audit_verify"]

_CHAIN_LOCK = 0x61756469  # pg_advisory_xact_lock key: one writer appends at a time, so the chain never forks
MAX_PROBLEMS = 1000


def chain_lock() -> None:
    """Serialize appends (and checkpoint snapshots) for the rest of the transaction."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_CHAIN_LOCK])


def _clean_text(value: str) -> str:
    return value.replace("\x00", "")  # PostgreSQL text cannot hold NUL


def _clean_json(value: Any) -> Any:
    if isinstance(value, str):
        return _clean_text(value)
    if isinstance(value, list):
        return [_clean_json(item) for item in value]
    if isinstance(value, dict):
        return {_clean_text(str(key)): _clean_json(item) for key, item in value.items()}
    return value


def _jsonable(value: Any) -> Any:
    """What the JSON column will hand back: the value as it round-trips through JSON (dates, Decimals → str)."""
    return _clean_json(orjson.loads(orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS)))


def _actor(actor: RequestUser | None, actor_kind: str | None) -> tuple[int | None, str, str]:
    """(actor_id, actor_name, actor_kind) of the acting user, the API token it authenticated with, or the system."""
    if actor is None or not getattr(actor, "is_authenticated", False):
        return None, "system", actor_kind or ActorKind.SYSTEM
    name = actor.get_username()
    request = current_context().request
    token = getattr(request, "auth", None) if request is not None and getattr(request, "user", None) == actor else None
    kind = actor_kind or (ActorKind.TOKEN if token is not None else ActorKind.USER)
    if kind == ActorKind.TOKEN and token is not None:
        # A token's label, if it has one; never its key (DRF's authtoken Token uses the key as primary key).
        label = getattr(token, "audit_label", None) or getattr(token, "name", None)
        if isinstance(label, str) and label:
            name = f"{name} (token {label})"
    return actor.pk, _clean_text(name)[:150], kind


def audit_record(
    *,
    actor: RequestUser | None,
    verb: str,
    target: models.Model,
    data: dict[str, Any] | None = None,
    before: Any = None,
    after: Any = None,
    reason: str = "",
    actor_kind: str | None = None,
) -> AuditEvent:
    """Append one event. Call inside the transaction that makes the change, so both commit or neither does.

    `actor` is a user (or None / an anonymous user for the system). `before`/`after` are the JSON-able states of
    the target around the change (None: not recorded); `reason` is the actor's justification. The request id and
    client address come from the current request (AuditContextMiddleware); `actor_kind` is derived (user, token when
    the request authenticated with an API token, system without a user) unless given.
    """
    if not connection.in_atomic_block:
        raise RuntimeError("audit_record must run inside the transaction of the change it records")
    if actor_kind is not None and actor_kind not in ActorKind.values:
        raise ValueError(f"actor_kind must be one of {ActorKind.values}")
    if len(verb) > 100:
        raise ValueError("verb is at most 100 characters")
    actor_id, actor_name, kind = _actor(actor, actor_kind)
    context = current_context()
    chain_lock()
    last = AuditEvent.objects.order_by("-id").values_list("hash", flat=True).first()
    event = AuditEvent(
        occurred_at=timezone.now(),
        actor_id=actor_id,
        actor_name=actor_name,
        actor_kind=kind,
        verb=verb,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        target_repr=_clean_text(str(target))[:300],
        data=_jsonable(data or {}),
        before=None if before is None else _jsonable(before),
        after=None if after is None else _jsonable(after),
        reason=_clean_text(reason or ""),
        request_id=context.request_id,
        source_address=context.source_address,
        hash_version=CURRENT_HASH_VERSION,
        prev_hash=last or GENESIS,
    )
    event.hash = digest(event.prev_hash, content(event))
    event.save(force_insert=True)
    return event


@dataclass(frozen=True)
class ChainProblem:
    """One finding: `kind` is edited, deleted or reordered; `event_id` is the row where it shows."""

    event_id: int
    kind: str
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.event_id, "kind": self.kind, "detail": self.detail}


@dataclass(frozen=True)
class ChainReport:
    checked: int
    first_bad_id: int | None
    problem: str
    problems: tuple[ChainProblem, ...] = field(default=())
    head_id: int | None = None
    head_hash: str = GENESIS
    truncated: bool = False

    @property
    def intact(self) -> bool:
        return self.first_bad_id is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "intact": self.intact, "checked": self.checked, "head": {"id": self.head_id, "hash": self.head_hash},
            "problems": [p.as_dict() for p in self.problems], "truncated": self.truncated,
        }


def _link_problem(event: AuditEvent, prev_id: int | None) -> ChainProblem:
    """Explain a row whose prev_hash is not the hash of the row stored before it."""
    if event.prev_hash == GENESIS:
        return ChainProblem(event.id, "reordered",
                            f"claims to be the first row of the chain, but row {prev_id} is stored before it")
    linked = AuditEvent.objects.filter(hash=event.prev_hash).values_list("id", flat=True).first()
    if linked is not None:
        where = f"after row {prev_id}" if prev_id is not None else "first"
        return ChainProblem(event.id, "reordered", f"follows row {linked} in the chain but is stored {where}")
    if prev_id is None:
        return ChainProblem(event.id, "deleted",
                            "the rows before it in the chain are missing (the start of the chain was removed)")
    if event.id - prev_id > 1:
        gap = f"{prev_id + 1}" if event.id - prev_id == 2 else f"{prev_id + 1}-{event.id - 1}"
        return ChainProblem(event.id, "deleted", f"the row before it in the chain is missing (ids {gap} are absent, "
                                                 f"after row {prev_id})")
    return ChainProblem(event.id, "deleted", f"its predecessor in the chain is missing: a row between {prev_id} and "
                                             f"{event.id} was removed, or row {prev_id} was rewritten with a new hash")


@transaction.atomic
def audit_verify(*, max_problems: int = MAX_PROBLEMS) -> ChainReport:
    """Recompute the chain from the first row and report every row whose content, version or link is wrong.

    Edited: a row's content does not match its hash. Deleted: a row's prev_hash names no existing row (an id gap
    says where). Reordered: a row's prev_hash names a row other than the one stored before it. Id gaps alone are
    not findings: a rolled-back transaction consumes ids too. Rows removed from the end of the chain are only
    detectable against a checkpoint (audit.checkpoints).
    """
    problems: list[ChainProblem] = []
    truncated = False
    prev_id: int | None = None
    prev_hash = GENESIS
    seen_v2 = False
    checked = 0

    def add(problem: ChainProblem) -> None:
        nonlocal truncated
        if len(problems) < max_problems:
            problems.append(problem)
        else:
            truncated = True

    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        if event.prev_hash != prev_hash:
            add(_link_problem(event, prev_id))
        why = content_problem(event)
        if why:
            add(ChainProblem(event.id, "edited", why))
        elif event.hash_version == HASH_V1 and seen_v2:
            add(ChainProblem(event.id, "edited", "a version-1 row after version-2 rows (its version was rewritten)"))
        seen_v2 = seen_v2 or event.hash_version != HASH_V1
        prev_id, prev_hash = event.id, event.hash
        checked += 1
    first = problems[0] if problems else None
    return ChainReport(
        checked=checked,
        first_bad_id=first.event_id if first else None,
        problem=f"{first.kind}: {first.detail}" if first else "",
        problems=tuple(problems),
        head_id=prev_id,
        head_hash=prev_hash,
        truncated=truncated,
    )
