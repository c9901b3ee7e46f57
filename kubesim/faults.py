"""Fault injection: failing, slow and expired requests, dropped watch connections."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .server import Simulator


class Faults:
    """Knobs consulted by the request handler for every API (resource) request."""

    def __init__(self, sim: Simulator):
        self._sim = sim
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._fail: list[tuple[int, float | None]] = []
            self._slow: list[float] = []
            self._expire = 0
            self._visibility: list[bytes] = []

    def fail_next_requests(self, n: int, status: int = 500, retry_after: float | None = 1) -> None:
        """The next n resource requests answer `status` with a Status body (+ Retry-After for 429/503)."""
        with self._lock:
            self._fail.extend([(status, retry_after)] * n)

    def slow_next_requests(self, n: int, delay_seconds: float) -> None:
        with self._lock:
            self._slow.extend([delay_seconds] * n)

    def expire_next_watches(self, n: int = 1) -> None:
        with self._lock:
            self._expire += n

    def malform_next_visibility_answers(self, n: int, body: bytes) -> None:
        """The next n visibility (pendingworkloads) requests answer 200 with `body` instead of the real summary: a
        Kueue that answers something the portal must refuse."""
        with self._lock:
            self._visibility.extend([body] * n)

    def drop_watches(self) -> int:
        """Abruptly close every open watch connection (no final chunk). Returns how many."""
        handlers = self._sim._active_watch_handlers()
        for h in handlers:
            h.dropped = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            w = getattr(h, "watcher", None)
            if w is not None:
                w.stop()
        return len(handlers)

    # ------------------------------------------------------------------ consumed by the server
    def take_failure(self) -> tuple[int, float | None] | None:
        with self._lock:
            return self._fail.pop(0) if self._fail else None

    def take_delay(self) -> float:
        with self._lock:
            return self._slow.pop(0) if self._slow else 0.0

    def take_visibility_body(self) -> bytes | None:
        with self._lock:
            return self._visibility.pop(0) if self._visibility else None

    def take_expire(self) -> bool:
        with self._lock:
            if self._expire > 0:
                self._expire -= 1
                return True
            return False
