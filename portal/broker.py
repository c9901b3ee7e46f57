"""The Celery broker transport: kombu's Redis transport, made to ride out a Redis outage or FLUSH.

When Redis goes away, celery's consumer detaches the connection's transport (`Connection.collect()` sets
`transport.client = None`) and reconnects with a new one, but the old channel lives on: closing it restores its
delivered, unacknowledged messages, and a task that finishes later acknowledges its message on it. With kombu 5.7 both
reach `Channel._connparams` → `None.hostname` / `None.client` and raise AttributeError, which neither celery's
close-with-ignore_errors nor its ack error handling expects: the worker exits ("Unrecoverable error:
AttributeError"). Here a detached channel raises a *connection* error instead (logged by celery, which carries on),
and does not try to restore: the messages stay in Redis's unacked index, from where `restore_visible` returns them to
their queue after the visibility timeout (a FLUSH took them anyway; every task they carry is idempotent and leased).
Registered for the `redis://` and `rediss://` schemes by portal.celery.

`AMQP` (the Celery app's amqp class) reconnects a lost broker every 1, 2, … at most 5 s instead of kombu's 2, 4, … at
most 30 s: the worker's consumer is back within seconds of Redis, not up to half a minute later, and the watchers it
runs with it.
"""

from __future__ import annotations

import logging
from typing import Any

import kombu
from celery.app import amqp as celery_amqp
from kombu.transport import redis as kombu_redis
from redis import exceptions as redis_exceptions

logger = logging.getLogger(__name__)


class DetachedChannelError(redis_exceptions.ConnectionError):
    """The channel's connection was closed under it (a lost broker): a connection error, like the loss itself."""


def _detached(channel: kombu_redis.Channel) -> bool:
    transport = channel.connection
    return transport is None or transport.client is None


class QoS(kombu_redis.QoS):
    def restore_unacked(self, client: object = None) -> None:
        if client is None and _detached(self.channel):
            logger.warning(
                "broker connection already closed: %d unacknowledged message(s) left in Redis's unacked index, "
                "redelivered after the visibility timeout", len(self._delivered),
            )
            self._delivered.clear()
            return
        super().restore_unacked(client)  # type: ignore[no-untyped-call]


class Channel(kombu_redis.Channel):
    QoS = QoS

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if _detached(self):
            raise DetachedChannelError("the broker connection of this channel was closed")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[no-untyped-call]
        return params


class Transport(kombu_redis.Transport):
    Channel = Channel


class Connection(kombu.Connection):  # type: ignore[misc,name-defined]
    def ensure_connection(self, errback: Any = None, max_retries: int | None = None, interval_start: float = 1,
                          interval_step: float = 1, interval_max: float = 5, **kwargs: Any) -> Any:
        return super().ensure_connection(errback, max_retries, interval_start, interval_step, interval_max, **kwargs)


class AMQP(celery_amqp.AMQP):  # type: ignore[misc]
    Connection = Connection
    BrokerConnection = Connection


def transport_register() -> None:
    """Make `redis://` and `rediss://` broker URLs use this transport (kombu looks the scheme up by name)."""
    from kombu.transport import TRANSPORT_ALIASES

    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = "portal.broker:Transport"
