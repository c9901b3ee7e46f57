"""Leases that keep one watcher per (cluster, kind), with fencing tokens.

A lease is a Redis key set with NX and a TTL (or, in the embedded demo without Redis, a row update guarded by the
expiry time). Each acquisition gets a token larger than every earlier one; the sync engine records the highest token
that wrote in SyncState.fence under a row lock, so a stalled watcher whose lease passed to a successor cannot write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from inventory.errors import LeaseLostError
from inventory.models import SyncState

logger = logging.getLogger(__name__)

_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""


class LeaseBackend(Protocol):
    def acquire(self, state: SyncState, ttl: float) -> Lease | None: ...

    def renew(self, lease: Lease) -> bool: ...

    def release(self, lease: Lease) -> None: ...

    def is_held(self, state: SyncState) -> bool: ...

    def break_(self, state: SyncState) -> None: ...


@dataclass
class Lease:
    """A held lease. `valid()` is conservative: it turns false once the TTL passed without a successful renewal."""

    backend: LeaseBackend
    state_id: int
    token: int
    ttl: float
    valid_until: float = field(default=0.0)
    next_renew: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.valid_until = time.monotonic() + self.ttl
        self.next_renew = time.monotonic() + self.renew_every

    @property
    def renew_every(self) -> float:
        return max(0.5, self.ttl / 3)

    def valid(self) -> bool:
        return time.monotonic() < self.valid_until

    def keep(self) -> None:
        """Renew when due; raise LeaseLostError once the lease can no longer be trusted."""
        if time.monotonic() >= self.next_renew:
            self.renew()
            self.next_renew = time.monotonic() + self.renew_every
        if not self.valid():
            raise LeaseLostError(f"sync state {self.state_id}: lease expired or taken over (token {self.token})")

    @contextmanager
    def renewing(self) -> Iterator[None]:
        """Keep the lease renewed from a heartbeat thread while one long step runs (waiting for the cluster's
        change lock, tombstoning and deriving after a big listing), where `keep()` cannot be called. The thread renews
        only this token's lease; the fencing token still guards every write, so a lease lost meanwhile (renewal
        refused) stops the heartbeat and the next `keep()` raises LeaseLostError as usual."""
        stop = threading.Event()

        def heartbeat() -> None:
            try:
                while not stop.wait(self.renew_every):
                    if not self.renew():
                        return
            finally:
                connection.close()  # the database backend renews over this thread's own connection

        thread = threading.Thread(target=heartbeat, name=f"lease-{self.state_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self.next_renew = time.monotonic()  # renew at the next keep(): the heartbeat's last one may be old

    def renew(self) -> bool:
        started = time.monotonic()
        try:
            ok = self.backend.renew(self)
        except Exception as exc:  # noqa: BLE001 - a lost Redis/DB connection means "not renewed", not a crash
            logger.warning("lease renew failed for state %s: %s", self.state_id, type(exc).__name__)
            return False
        if ok:
            self.valid_until = started + self.ttl
        else:
            self.valid_until = 0.0
        return bool(ok)

    def release(self) -> None:
        try:
            self.backend.release(self)
        except Exception as exc:  # noqa: BLE001 - expiry will free it anyway
            logger.warning("lease release failed for state %s: %s", self.state_id, type(exc).__name__)


def _claim_fence(state_id: int, token: int) -> int:
    """Record `token` as the state's fence. Returns 0 on success, else the fence already there (token unusable)."""
    with transaction.atomic():
        current = SyncState.objects.select_for_update().values_list("fence", flat=True).get(pk=state_id)
        if current >= token:
            return current
        SyncState.objects.filter(pk=state_id).update(fence=token)
        return 0


class RedisLeaseBackend:
    def __init__(self, url: str) -> None:
        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._renew = self._redis.register_script(_RENEW)
        self._release = self._redis.register_script(_RELEASE)

    @staticmethod
    def key(state: SyncState | int) -> str:
        state_id = state if isinstance(state, int) else state.pk
        return f"portal:lease:sync:{state_id}"

    def acquire(self, state: SyncState, ttl: float) -> Lease | None:
        key = self.key(state)
        for _attempt in range(3):
            token = int(self._redis.incr(f"{key}:fence"))
            if not self._redis.set(key, token, nx=True, px=int(ttl * 1000)):
                return None
            fence = _claim_fence(state.pk, token)
            if not fence:
                return Lease(self, state.pk, token, ttl)
            # Redis lost its counter (restart without persistence): move it past the database's fence and retry.
            self._redis.delete(key)
            self._redis.set(f"{key}:fence", fence)
        return None

    def renew(self, lease: Lease) -> bool:
        return bool(self._renew(keys=[self.key(lease.state_id)], args=[lease.token, int(lease.ttl * 1000)]))

    def release(self, lease: Lease) -> None:
        self._release(keys=[self.key(lease.state_id)], args=[lease.token])

    def is_held(self, state: SyncState) -> bool:
        return bool(self._redis.exists(self.key(state)))

    def break_(self, state: SyncState) -> None:
        self._redis.delete(self.key(state))


class DatabaseLeaseBackend:
    """Embedded-mode leases: the SyncState row itself, taken with a guarded UPDATE (atomic on SQLite and Postgres)."""

    def acquire(self, state: SyncState, ttl: float) -> Lease | None:
        now = timezone.now()
        with transaction.atomic():
            row = SyncState.objects.select_for_update().get(pk=state.pk)
            if row.lease_expires_at is not None and row.lease_expires_at > now:
                return None
            token = max(row.lease_token, row.fence) + 1
            SyncState.objects.filter(pk=state.pk).update(
                lease_token=token, lease_expires_at=now + timedelta(seconds=ttl), fence=token
            )
        return Lease(self, state.pk, token, ttl)

    def renew(self, lease: Lease) -> bool:
        return bool(
            SyncState.objects.filter(pk=lease.state_id, lease_token=lease.token).update(
                lease_expires_at=timezone.now() + timedelta(seconds=lease.ttl)
            )
        )

    def release(self, lease: Lease) -> None:
        SyncState.objects.filter(pk=lease.state_id, lease_token=lease.token).update(lease_expires_at=None)

    def is_held(self, state: SyncState) -> bool:
        return SyncState.objects.filter(pk=state.pk).filter(Q(lease_expires_at__gt=timezone.now())).exists()

    def break_(self, state: SyncState) -> None:
        SyncState.objects.filter(pk=state.pk).update(lease_expires_at=None)


def leases_break(states: Iterable[SyncState]) -> int:
    """Free the leases of these (cluster, kind) states whatever holds them: only for a process that knows no watcher
    of theirs runs (`manage.py demo` at start, after checking no other demo is up). The fencing token still moves
    forward on the next acquire, so a watcher that was in fact alive cannot write after it."""
    backend = lease_backend()
    count = 0
    for state in states:
        backend.break_(state)
        count += 1
    return count


def lease_backend() -> LeaseBackend:
    if settings.PORTAL_LEASE_BACKEND == "redis":
        return RedisLeaseBackend(settings.REDIS_URL)
    return DatabaseLeaseBackend()
