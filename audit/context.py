"""Where an audited change came from: the request id and client address of the current request, if any.

`AuditContextMiddleware` sets the context for each request; `audit_record` reads it. Celery tasks and management
commands have no request, so their events carry an empty request id and address unless they wrap their work in
`audit_context(...)` themselves (e.g. to carry the request id of the request that enqueued them).
"""

from __future__ import annotations

import contextvars
import ipaddress
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True, slots=True)
class AuditContext:
    request_id: str = ""
    source_address: str = ""
    # The Django request, so that audit_record can tell token authentication (DRF sets `request.auth`) after the
    # view authenticated the caller; the middleware runs before that.
    request: Any = None


_EMPTY = AuditContext()
_current: contextvars.ContextVar[AuditContext] = contextvars.ContextVar("audit_context", default=_EMPTY)


def current_context() -> AuditContext:
    return _current.get()


@contextmanager
def audit_context(*, request_id: str = "", source_address: str = "", request: Any = None) -> Iterator[AuditContext]:
    """Run a block with this request id / source address recorded on its audit events (values are sanitized)."""
    context = AuditContext(
        request_id=request_id if is_sane_request_id(request_id) else "",
        source_address=normalize_address(source_address),
        request=request,
    )
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)


def is_sane_request_id(value: str | None) -> bool:
    """A request id we are willing to store and echo: 1-64 characters of [A-Za-z0-9._-]."""
    return bool(value) and _SANE_REQUEST_ID.fullmatch(value or "") is not None


def normalize_address(value: str | None) -> str:
    """The canonical text of an IP address ('' if it is not one). IPv4-mapped IPv6 becomes plain IPv4."""
    try:
        address = ipaddress.ip_address((value or "").strip())
    except ValueError:
        return ""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def _networks(entries: list[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            continue
    return networks


def client_address(remote_addr: str | None, forwarded_for: str | None, trusted_proxies: list[str]) -> str:
    """The client's address: REMOTE_ADDR, unless that peer is a trusted proxy.

    Behind trusted proxies, X-Forwarded-For is read right to left (each proxy appends the address it saw) and the
    first address that is not itself a trusted proxy is the client. A malformed entry stops the walk at the last
    address a trusted proxy vouched for, so a client can never inject an address by sending its own header.
    """
    current = normalize_address(remote_addr)
    networks = _networks(trusted_proxies)
    if not current or not networks or not forwarded_for:
        return current

    def trusted(address: str) -> bool:
        ip = ipaddress.ip_address(address)
        return any(ip.version == net.version and ip in net for net in networks)

    for hop in reversed(forwarded_for.split(",")):
        if not trusted(current):
            break
        candidate = normalize_address(hop)
        if not candidate:
            break
        current = candidate
    return current
