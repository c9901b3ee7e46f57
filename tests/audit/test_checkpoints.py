"""Signed checkpoints: stored, exported as JSON lines, and checked by audit_verify --checkpoints."""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from audit.chain import GENESIS, content, digest
from audit.checkpoints import checkpoint_create, checkpoint_sign
from audit.models import AuditCheckpoint, AuditEvent
from audit.services import audit_verify
from audit.tasks import audit_checkpoint_task
from tests.audit.conftest import KEY, json_verify, record, run_verify, tampering

pytestmark = pytest.mark.django_db


def make_checkpoint(path: Path) -> dict:
    out = io.StringIO()
    call_command("audit_checkpoint", "--output", str(path), stdout=out)
    return orjson.loads(out.getvalue())


def rewrite_whole_chain(*, edit_id: int) -> None:
    """What someone who can disable triggers could do: change a row and recompute every hash after it."""
    with tampering() as cursor:
        prev = GENESIS
        for event in AuditEvent.objects.order_by("id"):
            if event.id == edit_id:
                event.target_repr = "nothing to see here"
            event.prev_hash = prev
            event.hash = digest(prev, content(event))
            cursor.execute("UPDATE audit_auditevent SET target_repr = %s, prev_hash = %s, hash = %s WHERE id = %s",
                           [event.target_repr, event.prev_hash, event.hash, event.id])
            prev = event.hash


def test_checkpoint_refuses_to_run_without_a_key(settings) -> None:
    settings.PORTAL_AUDIT_CHECKPOINT_KEY = ""
    with pytest.raises(CommandError, match="PORTAL_AUDIT_CHECKPOINT_KEY is not set"):
        call_command("audit_checkpoint", stdout=io.StringIO())
    settings.PORTAL_AUDIT_CHECKPOINT_KEY = "short"
    with pytest.raises(CommandError, match="at least 32"):
        call_command("audit_checkpoint", stdout=io.StringIO())
    assert not AuditCheckpoint.objects.exists()


def test_checkpoint_is_stored_printed_and_appended(checkpoint_key, tmp_path) -> None:
    events = record(3)
    path = tmp_path / "checkpoints.jsonl"
    first = make_checkpoint(path)
    record(1)
    second = make_checkpoint(path)
    lines = path.read_text().splitlines()
    assert [orjson.loads(line) for line in lines] == [first, second]
    stored = AuditCheckpoint.objects.get(pk=first["checkpoint_id"])
    assert (stored.last_event_id, stored.last_hash, stored.event_count) == (events[-1].id, events[-1].hash, 3)
    assert (first["last_id"], first["count"], second["count"]) == (events[-1].id, 3, 4)
    expected = hmac.new(KEY.encode(), orjson.dumps(
        {k: first[k] for k in ("v", "created_at", "last_id", "last_hash", "count")}, option=orjson.OPT_SORT_KEYS,
    ), hashlib.sha256).hexdigest()
    assert first["signature"] == expected
    assert KEY not in path.read_text()


def test_checkpoint_of_an_empty_chain(checkpoint_key, tmp_path) -> None:
    line = make_checkpoint(tmp_path / "c.jsonl")
    assert (line["last_id"], line["last_hash"], line["count"]) == (None, GENESIS, 0)
    record(2)
    assert run_verify("--checkpoints", str(tmp_path / "c.jsonl"))[0] == 0


def test_verify_accepts_matching_checkpoints(checkpoint_key, tmp_path) -> None:
    record(3)
    path = tmp_path / "c.jsonl"
    make_checkpoint(path)
    record(2)  # the chain grew since: still contains the checkpointed head
    code, out = json_verify("--checkpoints", str(path))
    assert code == 0
    assert out["intact"] is True
    assert [c["ok"] for c in out["checkpoints"]] == [True, True]  # the stored row and the exported line
    assert out["checkpoints"][1]["source"] == f"{path}:1"


def test_a_rewritten_chain_verifies_alone_but_not_against_a_checkpoint(checkpoint_key, tmp_path) -> None:
    events = record(4)
    path = tmp_path / "c.jsonl"
    make_checkpoint(path)
    rewrite_whole_chain(edit_id=events[1].id)
    assert audit_verify().intact  # the chain on its own cannot tell
    code, out = json_verify("--checkpoints", str(path), "--no-stored-checkpoints")
    assert code == 1
    assert out["chain_intact"] is True
    assert out["intact"] is False
    [result] = out["checkpoints"]
    assert result["ok"] is False
    assert result["problem"] == (f"row {events[-1].id} no longer has the hash it had at this checkpoint: "
                                 "the chain was rewritten")


def test_a_forged_checkpoint_is_rejected(checkpoint_key, tmp_path) -> None:
    events = record(3)
    path = tmp_path / "c.jsonl"
    genuine = make_checkpoint(path)
    rewrite_whole_chain(edit_id=events[0].id)
    head = AuditEvent.objects.order_by("-id").first()
    # The forger matches the rewritten chain but does not have the key.
    forged = {**genuine, "last_hash": head.hash}
    forged["signature"] = checkpoint_sign(forged, key=b"x" * 32)
    tampered = {**genuine, "count": 2}  # and an altered genuine line
    path.write_text("\n".join(orjson.dumps(c).decode() for c in (forged, tampered)) + "\n\nnot json\n")
    code, out = json_verify("--checkpoints", str(path), "--no-stored-checkpoints")
    assert code == 1
    assert [(c["source"], c["ok"]) for c in out["checkpoints"]] == [
        (f"{path}:1", False), (f"{path}:2", False), (f"{path}:4", False)]
    assert out["checkpoints"][0]["problem"].startswith("bad signature")
    assert out["checkpoints"][1]["problem"].startswith("bad signature")
    assert out["checkpoints"][2]["problem"] == "not JSON"


def test_removing_the_newest_rows_is_caught_by_a_checkpoint(checkpoint_key, tmp_path) -> None:
    events = record(4)
    path = tmp_path / "c.jsonl"
    make_checkpoint(path)
    with tampering() as cursor:
        cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [events[-1].id])
    assert audit_verify().intact  # the rest of the chain is consistent
    code, out = run_verify("--checkpoints", str(path))
    assert code == 1
    assert f"row {events[-1].id}, the head at this checkpoint, no longer exists" in out


def test_an_edited_stored_checkpoint_fails_its_signature(checkpoint_key) -> None:
    events = record(3)
    checkpoint = checkpoint_create()
    rewrite_whole_chain(edit_id=events[0].id)
    with tampering("audit_auditcheckpoint") as cursor:  # make the stored checkpoint match the rewritten chain
        cursor.execute("UPDATE audit_auditcheckpoint SET last_hash = %s WHERE id = %s",
                       [AuditEvent.objects.get(pk=events[-1].id).hash, checkpoint.pk])
    code, out = json_verify()
    assert code == 1
    assert out["chain_intact"] is True
    assert out["checkpoints"][0]["source"] == f"checkpoint {checkpoint.pk}"
    assert out["checkpoints"][0]["problem"].startswith("bad signature")


def test_verify_with_checkpoints_needs_the_key(settings, tmp_path) -> None:
    settings.PORTAL_AUDIT_CHECKPOINT_KEY = ""
    path = tmp_path / "c.jsonl"
    path.write_text("")
    with pytest.raises(CommandError, match="not set") as excinfo:
        call_command("audit_verify", "--checkpoints", str(path), stdout=io.StringIO())
    assert excinfo.value.returncode == 2
    settings.PORTAL_AUDIT_CHECKPOINT_KEY = KEY
    with pytest.raises(CommandError, match="No such checkpoint file") as excinfo:
        call_command("audit_verify", "--checkpoints", str(tmp_path / "missing"), stdout=io.StringIO())
    assert excinfo.value.returncode == 2


def test_the_task_checkpoints_logs_and_appends(checkpoint_key, settings, tmp_path, caplog) -> None:
    record(2)
    settings.PORTAL_AUDIT_CHECKPOINT_FILE = str(tmp_path / "beat.jsonl")
    caplog.set_level("INFO", logger="audit.tasks")
    pk = audit_checkpoint_task()
    line = orjson.loads((tmp_path / "beat.jsonl").read_text())
    assert line["checkpoint_id"] == pk
    assert line["signature"] in caplog.text
    assert KEY not in caplog.text


def test_the_task_does_nothing_without_a_key(settings, caplog) -> None:
    settings.PORTAL_AUDIT_CHECKPOINT_KEY = ""
    assert audit_checkpoint_task() is None
    assert not AuditCheckpoint.objects.exists()


@pytest.mark.parametrize(("key", "scheduled"), [("", False), (KEY, True)])
def test_beat_schedules_the_checkpoint_only_with_a_key(key: str, scheduled: bool) -> None:
    env = {**os.environ, "PORTAL_AUDIT_CHECKPOINT_KEY": key, "DJANGO_SETTINGS_MODULE": "portal.settings.test"}
    code = ("from django.conf import settings; s = settings.CELERY_BEAT_SCHEDULE.get('audit-checkpoint'); "
            "print(s and s['task'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=django_settings.BASE_DIR, timeout=60)
    assert out.stdout.strip() == ("audit.checkpoint" if scheduled else "None")


def test_checkpoints_signed_with_a_retired_key_still_verify(settings, tmp_path) -> None:
    old_key, new_key = "o" * 40, "n" * 40
    settings.PORTAL_AUDIT_CHECKPOINT_KEY = old_key
    record(2)
    path = tmp_path / "c.jsonl"
    make_checkpoint(path)
    settings.PORTAL_AUDIT_CHECKPOINT_KEY = new_key  # rotated: old checkpoints no longer verify ...
    code, out = json_verify("--checkpoints", str(path))
    assert code == 1
    assert [c["problem"][:13] for c in out["checkpoints"]] == ["bad signature"] * 2
    settings.PORTAL_AUDIT_CHECKPOINT_OLD_KEYS = [old_key]  # ... until the retired key is listed for verification
    assert run_verify("--checkpoints", str(path))[0] == 0
    settings.PORTAL_AUDIT_CHECKPOINT_OLD_KEYS = ["short"]
    assert run_verify("--checkpoints", str(path))[0] == 2
