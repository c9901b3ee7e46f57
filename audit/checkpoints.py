"""Signed checkpoints of the chain head, kept in the database and exported outside it.

A checkpoint says "at time T the chain's last row was #N with hash H, and N rows existed up to it", signed with
HMAC-SHA256 under PORTAL_AUDIT_CHECKPOINT_KEY. Someone who can disable the append-only trigger can rewrite the
whole chain so that it verifies on its own; they cannot make it match a checkpoint exported earlier without the
key, and they cannot forge a new checkpoint either. The key itself is never stored, printed or logged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import orjson
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.chain import GENESIS
from audit.errors import CheckpointKeyMissingError
from audit.models import AuditCheckpoint, AuditEvent
from audit.services import chain_lock

FORMAT_VERSION = 1
MIN_KEY_LENGTH = 32
SIGNED_FIELDS = ("v", "created_at", "last_id", "last_hash", "count")


def checkpoint_key() -> bytes:
    """The signing key from settings; raises CheckpointKeyMissingError if it is unset or shorter than 32 chars."""
    key = str(getattr(settings, "PORTAL_AUDIT_CHECKPOINT_KEY", "") or "")
    if not key:
        raise CheckpointKeyMissingError("PORTAL_AUDIT_CHECKPOINT_KEY is not set; refusing to sign or verify "
                                        "checkpoints without it.")
    if len(key) < MIN_KEY_LENGTH:
        raise CheckpointKeyMissingError(f"PORTAL_AUDIT_CHECKPOINT_KEY must be at least {MIN_KEY_LENGTH} characters.")
    return key.encode()


def verification_keys() -> list[bytes]:
    """The current key, then retired keys (PORTAL_AUDIT_CHECKPOINT_OLD_KEYS) that older checkpoints were signed with.
    Raises CheckpointKeyMissingError without a current key."""
    current = checkpoint_key()
    old = [str(k) for k in getattr(settings, "PORTAL_AUDIT_CHECKPOINT_OLD_KEYS", []) if k]
    if any(len(k) < MIN_KEY_LENGTH for k in old):
        raise CheckpointKeyMissingError(f"Every PORTAL_AUDIT_CHECKPOINT_OLD_KEYS entry must be at least "
                                        f"{MIN_KEY_LENGTH} characters.")
    return [current, *(k.encode() for k in old)]


def _canonical(payload: dict[str, Any]) -> bytes:
    return orjson.dumps({name: payload.get(name) for name in SIGNED_FIELDS}, option=orjson.OPT_SORT_KEYS)


def checkpoint_sign(payload: dict[str, Any], *, key: bytes) -> str:
    return hmac.new(key, _canonical(payload), hashlib.sha256).hexdigest()


def checkpoint_payload(checkpoint: AuditCheckpoint) -> dict[str, Any]:
    """The exported form of a checkpoint (one JSON object): the signed fields, its row id and the signature."""
    return {
        "v": FORMAT_VERSION,
        "checkpoint_id": checkpoint.pk,
        "created_at": checkpoint.created_at.isoformat(),
        "last_id": checkpoint.last_event_id,
        "last_hash": checkpoint.last_hash,
        "count": checkpoint.event_count,
        "signature": checkpoint.signature,
    }


def checkpoint_line(checkpoint: AuditCheckpoint) -> str:
    return orjson.dumps(checkpoint_payload(checkpoint)).decode()


@transaction.atomic(durable=True)
def checkpoint_create() -> AuditCheckpoint:
    """Sign and store a checkpoint of the current chain head. Raises CheckpointKeyMissingError without a key."""
    key = checkpoint_key()
    chain_lock()  # no append between reading the head and counting up to it
    head = AuditEvent.objects.order_by("-id").values("id", "hash").first()
    last_id = head["id"] if head else None
    count = AuditEvent.objects.filter(id__lte=last_id).count() if head else 0
    checkpoint = AuditCheckpoint(
        created_at=timezone.now(), last_event_id=last_id, last_hash=head["hash"] if head else GENESIS,
        event_count=count,
    )
    checkpoint.signature = checkpoint_sign(
        {"v": FORMAT_VERSION, "created_at": checkpoint.created_at.isoformat(), "last_id": last_id,
         "last_hash": checkpoint.last_hash, "count": count},
        key=key,
    )
    checkpoint.save(force_insert=True)
    return checkpoint


@dataclass(frozen=True)
class CheckpointResult:
    source: str  # "checkpoint 12" (database row) or "file.jsonl:3" (exported line)
    last_id: int | None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "last_id": self.last_id, "ok": self.ok, "problem": self.problem}


def _signed_by(payload: dict[str, Any], signature: Any, keys: Sequence[bytes]) -> bool:
    if not isinstance(signature, str):
        return False
    # Check every key (no early exit) so the time taken says nothing about which one matched.
    matches = [hmac.compare_digest(signature, checkpoint_sign(payload, key=key)) for key in keys]
    return any(matches)


def checkpoint_check(source: str, payload: Any, *, keys: Sequence[bytes]) -> CheckpointResult:
    """Verify one checkpoint's signature, then that the chain still has its head at its id with its hash and the
    same number of rows up to it."""
    if not isinstance(payload, dict) or any(name not in payload for name in (*SIGNED_FIELDS, "signature")):
        return CheckpointResult(source, None, "not a checkpoint (fields missing)")
    last_id = payload["last_id"]
    signature = payload["signature"]
    if not _signed_by(payload, signature, keys):
        return CheckpointResult(source, None if not isinstance(last_id, int) else last_id,
                                "bad signature: forged or altered, or signed with another key")
    if last_id is None:
        return CheckpointResult(source, None)  # signed when the chain was empty: any chain extends it
    row = AuditEvent.objects.filter(id=last_id).values_list("hash", flat=True).first()
    if row is None:
        return CheckpointResult(source, last_id, f"row {last_id}, the head at this checkpoint, no longer exists")
    if row != payload["last_hash"]:
        return CheckpointResult(source, last_id, f"row {last_id} no longer has the hash it had at this checkpoint: "
                                                 "the chain was rewritten")
    count = AuditEvent.objects.filter(id__lte=last_id).count()
    if count != payload["count"]:
        return CheckpointResult(source, last_id, f"{payload['count']} rows up to row {last_id} at this checkpoint, "
                                                 f"{count} now: rows were removed or inserted")
    return CheckpointResult(source, last_id)


def checkpoints_verify_stored(*, keys: Sequence[bytes]) -> list[CheckpointResult]:
    """Check every checkpoint row of the database (weaker than exported copies: they live beside the chain)."""
    return [
        checkpoint_check(f"checkpoint {cp.pk}", checkpoint_payload(cp), keys=keys)
        for cp in AuditCheckpoint.objects.order_by("id").iterator()
    ]


def checkpoints_verify_lines(
    lines: Iterable[str], *, keys: Sequence[bytes], name: str = "checkpoints"
) -> list[CheckpointResult]:
    """Check exported checkpoints, one JSON object per line (blank lines are skipped)."""
    results = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        source = f"{name}:{number}"
        try:
            payload = orjson.loads(line)
        except orjson.JSONDecodeError:
            results.append(CheckpointResult(source, None, "not JSON"))
            continue
        results.append(checkpoint_check(source, payload, keys=keys))
    return results


def checkpoint_export(checkpoint: AuditCheckpoint, stream: TextIO) -> None:
    stream.write(checkpoint_line(checkpoint) + "\n")
    stream.flush()
