"""Celery tasks of the audit app."""

from __future__ import annotations

import logging
from pathlib import Path

from celery import shared_task
from django.conf import settings

logger = logging.getLogger(__name__)


@shared_task(name="audit.checkpoint")  # type: ignore[untyped-decorator]
def audit_checkpoint_task() -> int | None:
    """Hourly (beat, only when PORTAL_AUDIT_CHECKPOINT_KEY is set): sign and store a checkpoint of the chain head.

    The signed line is also logged (so log shipping keeps a copy outside the database) and appended to
    PORTAL_AUDIT_CHECKPOINT_FILE if set. Returns the checkpoint's id, or None when no key is configured.
    """
    from audit.checkpoints import checkpoint_create, checkpoint_export, checkpoint_line
    from audit.errors import CheckpointKeyMissingError

    try:
        checkpoint = checkpoint_create()
    except CheckpointKeyMissingError as exc:
        logger.warning("audit checkpoint skipped: %s", exc)
        return None
    logger.info("audit checkpoint %s", checkpoint_line(checkpoint))
    path = str(getattr(settings, "PORTAL_AUDIT_CHECKPOINT_FILE", "") or "")
    if path:
        with Path(path).open("a", encoding="utf-8") as stream:
            checkpoint_export(checkpoint, stream)
    return checkpoint.pk
