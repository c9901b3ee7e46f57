"""Worker liveness: a heartbeat task each worker sends to itself and consumes like any other task.

On `worker_ready` a thread sends `portal.worker_heartbeat` every PORTAL_WORKER_HEARTBEAT_SECONDS to the worker's own
direct queue (CELERY_WORKER_DIRECT); running it touches PORTAL_WORKER_HEARTBEAT_DIR/<node name>. The file only stays
fresh while the worker is connected *and* consuming, which `celery inspect ping` (answered by the consumer thread
even when the pool no longer takes work) cannot tell. `python -m portal.worker_probe NODE --max-age S` checks it
(the Kubernetes liveness probe; docs/deploy.md "Probes").
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from celery import shared_task
from celery.signals import worker_ready
from celery.utils import worker_direct
from django.conf import settings

logger = logging.getLogger(__name__)


def heartbeat_path(node: str) -> Path:
    return Path(settings.PORTAL_WORKER_HEARTBEAT_DIR) / node.replace("/", "_")


@shared_task(name="portal.worker_heartbeat", ignore_result=True, acks_late=False)  # type: ignore[untyped-decorator]
def worker_heartbeat_task(node: str) -> None:
    path = heartbeat_path(node)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def _send_forever(node: str, stop: threading.Event) -> None:
    interval = float(settings.PORTAL_WORKER_HEARTBEAT_SECONDS)
    while True:
        try:
            worker_heartbeat_task.apply_async((node,), queue=worker_direct(node), expires=interval * 4)
        except Exception as exc:  # noqa: BLE001 - broker down: the file goes stale, which is the point
            logger.warning("worker heartbeat not sent (%s)", type(exc).__name__)
        if stop.wait(interval):
            return


@worker_ready.connect(dispatch_uid="portal.heartbeat")  # type: ignore[untyped-decorator]
def _start_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    node = getattr(sender, "hostname", None)
    if not node or not settings.PORTAL_WORKER_HEARTBEAT_SECONDS:
        return
    threading.Thread(target=_send_forever, args=(node, threading.Event()), name="portal-heartbeat",
                     daemon=True).start()
