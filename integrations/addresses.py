"""Where a webhook may be delivered: public addresses only, unless the operator allow-lists a network.

Server-side request forgery: a subscription URL is chosen by an admin (or by whoever took over an admin's token),
and the portal's workers sit inside the cluster, next to the database, Redis, the Kubernetes API and the cloud's
metadata service. So a delivery goes only to a *global* unicast address: never loopback, private (10/8, 172.16/12,
192.168/16, fc00::/7), link-local (169.254/16 with the metadata service, fe80::/10), shared (100.64/10), unspecified,
multicast, reserved or documentation ranges. IPv4-mapped (`::ffff:10.0.0.1`), IPv4-compatible and 6to4 IPv6
addresses are judged by the IPv4 address inside. `PORTAL_WEBHOOK_ALLOWED_NETWORKS` (CIDRs) lets an operator open
specific internal networks (an in-cluster SIEM collector).

DNS rebinding: a name may answer a public address when the subscription is saved and a private one when the worker
connects. Each delivery attempt therefore resolves the name once (`pin`), checks every address it got, and connects
to the first one itself (`integrations.delivery.post`), sending the original Host header and, for https, the
hostname as TLS SNI and for the certificate check. Nothing resolves the name again for that attempt.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from integrations.errors import WebhookValidationError

logger = logging.getLogger(__name__)
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class WebhookAddressError(WebhookValidationError):
    """The URL's host is, or resolves to, an address deliveries may not go to."""


class WebhookResolutionError(Exception):
    """The name did not resolve (retryable at delivery time)."""


@dataclass(frozen=True, slots=True)
class Pinned:
    """A delivery target with its address fixed: connect to `address`, speak to `hostname`."""

    scheme: str
    hostname: str
    port: int
    address: str
    host_header: str
    path: str


def resolve(hostname: str, port: int) -> list[str]:
    """Every address the name resolves to, in the resolver's order (tests replace this function)."""
    try:
        infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookResolutionError(f"cannot resolve {hostname}: {exc}") from None
    seen: list[str] = []
    for _family, _type, _proto, _canonname, sockaddr in infos:
        address = str(sockaddr[0]).split("%", 1)[0]  # drop an IPv6 zone
        if address not in seen:
            seen.append(address)
    return seen


def _embedded_ipv4(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if int(address) >> 32 == 0 and int(address) > 1:  # IPv4-compatible ::a.b.c.d (deprecated)
            return ipaddress.IPv4Address(int(address))
    return address


def _allowed_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    networks = []
    for entry in getattr(settings, "PORTAL_WEBHOOK_ALLOWED_NETWORKS", []) or []:
        try:
            networks.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:  # an entry that is no network opens nothing
            logger.warning("PORTAL_WEBHOOK_ALLOWED_NETWORKS: %r is not a network; ignored", entry)
    return networks


def address_refusal(text: str) -> str | None:
    """Why deliveries may not go to this address, or None if they may."""
    try:
        raw = ipaddress.ip_address(text)
    except ValueError:
        return f"{text!r} is not an IP address"
    allowed = _allowed_networks()
    for candidate in {raw, _embedded_ipv4(raw)}:
        if any(candidate.version == net.version and candidate in net for net in allowed):
            return None
    address = _embedded_ipv4(raw)
    if address.is_global and not address.is_multicast:
        return None
    kind = ("loopback" if address.is_loopback else "link-local" if address.is_link_local
            else "unspecified" if address.is_unspecified else "multicast" if address.is_multicast
            else "private" if address.is_private else "not public")
    return f"{raw} is a {kind} address (allow it with PORTAL_WEBHOOK_ALLOWED_NETWORKS)"


def _parts(url: str) -> tuple[str, str, int, str, str]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise WebhookValidationError("the URL must be http:// or https://")
    hostname = parts.hostname or ""
    if not hostname:
        raise WebhookValidationError("the URL has no host")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise WebhookValidationError("the URL's port is not a number from 1 to 65535") from None
    default = 443 if scheme == "https" else 80
    shown = f"[{hostname}]" if ":" in hostname else hostname
    host_header = shown if port == default else f"{shown}:{port}"
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return scheme, hostname, port, host_header, path


def _literal(hostname: str) -> str | None:
    try:
        return str(ipaddress.ip_address(hostname))
    except ValueError:
        return None


def url_check(url: str) -> None:
    """Refuse a subscription URL whose host is, or now resolves to, a refused address. A name that does not resolve
    yet is accepted: every delivery resolves and checks again (`pin`)."""
    _scheme, hostname, port, _host_header, _path = _parts(url)
    literal = _literal(hostname)
    try:
        addresses = [literal] if literal else resolve(hostname, port)
    except WebhookResolutionError:
        return
    for address in addresses:
        reason = address_refusal(address)
        if reason:
            raise WebhookAddressError(f"deliveries may not go to {hostname}: {reason}")


def pin(url: str) -> Pinned:
    """Resolve the URL's host once and fix the address this delivery attempt connects to: the first one, provided
    that every address the name gave is allowed (a name that also answers a private address is refused whole).
    Raises WebhookAddressError (permanent) or WebhookResolutionError (retryable)."""
    scheme, hostname, port, host_header, path = _parts(url)
    literal = _literal(hostname)
    addresses = [literal] if literal else resolve(hostname, port)
    if not addresses:
        raise WebhookResolutionError(f"{hostname} resolved to no address")
    for address in addresses:
        reason = address_refusal(address)
        if reason:
            raise WebhookAddressError(f"deliveries may not go to {hostname}: {reason}")
    return Pinned(scheme=scheme, hostname=hostname, port=port, address=addresses[0], host_header=host_header,
                  path=path)
