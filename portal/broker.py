"""The Celery broker transport: kombu's Redis transport, made to ride out a Redis outage or FLUSH.

kombu 5.7's Redis channel, when celery's consumer closes a connection that Redis dropped, restores the
unacknowledged messages *after* the connection detached its transport (`Connection._do_close_transport` sets
`transport.client = None`): `QoS.restore_unacked` → `Channel._connparams` → `None.hostname` raises AttributeError,
which celery's close-with-ignore_errors does not catch, and the worker exits ("Unrecoverable error: AttributeError").
Here that one case is caught: the messages stay in Redis's unacked index, where `restore_visible` returns them to their
queue after the visibility timeout (and a FLUSH took them anyway); every task they carry is idempotent and leased.
Registered for the `redis://` and `rediss://` schemes by portal.celery.
"""

from __future__ import annotations

import logging

from kombu.transport import redis as kombu_redis

logger = logging.getLogger(__name__)


class QoS(kombu_redis.QoS):
    def restore_unacked(self, client: object = None) -> None:
        try:
            super().restore_unacked(client)
        except AttributeError:
            if self.channel.connection.client is not None:
                raise  # not the detached-connection case: a real bug, let it show
            logger.warning(
                "broker connection already closed: %d unacknowledged message(s) left in Redis's unacked index, "
                "redelivered after the visibility timeout", len(self._delivered),
            )
            self._delivered.clear()


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel


def transport_register() -> None:
    """Make `redis://` and `rediss://` broker URLs use this transport (kombu looks the scheme up by name)."""
    from kombu.transport import TRANSPORT_ALIASES

    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = "portal.broker:Transport"
