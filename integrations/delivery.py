"""One HTTP attempt of a webhook delivery: body, signature, POST, and what the answer means for retries.

No database access here: the caller claims the delivery before and records the outcome after, each in its own short
transaction, so a slow endpoint never holds a transaction (or anything of the sync) open.

- Timeouts: connect PORTAL_WEBHOOK_CONNECT_TIMEOUT (3 s), read PORTAL_WEBHOOK_READ_TIMEOUT (10 s).
- The host is resolved once per attempt and the connection goes to that address (DNS rebinding); loopback, private,
  link-local and other non-public addresses are refused unless allow-listed (integrations/addresses.py).
- Redirects are never followed (a 3xx is a permanent failure: the subscription's URL is wrong).
- Retried: connection errors, timeouts, 429 and 5xx (honouring Retry-After up to the backoff cap). Anything else
  that is not 2xx fails at once.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
import urllib3
from django.conf import settings
from django.utils import timezone

from integrations.addresses import WebhookResolutionError, pin
from integrations.errors import WebhookValidationError

SIGNATURE_HEADER = "X-Portal-Signature-512"
USER_AGENT = "accelerator-portal-webhooks/1"
ERROR_LIMIT = 500


@dataclass(frozen=True, slots=True)
class Outcome:
    delivered: bool
    retry: bool
    code: int | None = None
    error: str = ""
    retry_after: float | None = None


def signature(secret: str, body: bytes) -> str:
    """The signature header's value: `sha512=` + hex HMAC-SHA512 of the raw body keyed with the secret."""
    return "sha512=" + hmac.new(secret.encode(), body, hashlib.sha512).hexdigest()


def signature_valid(secret: str, body: bytes, header: str) -> bool:
    """What a receiver does (constant-time comparison); used by the tests and shown in the docs."""
    return hmac.compare_digest(signature(secret, body), header or "")


def url_for_log(url: str) -> str:
    """The URL without credentials, query or fragment (a token in a URL must not reach logs or the audit log)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def body_and_headers(*, delivery_id: int, event_type: str, payload: dict[str, Any], secret: str) -> tuple[
    bytes, dict[str, str]
]:
    timestamp = int(time.time())
    # The timestamp is also inside the signed body, so a receiver can refuse replays of old deliveries.
    body = orjson.dumps({"delivery": delivery_id, "timestamp": timestamp, **payload})
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Portal-Event": event_type,
        "X-Portal-Delivery": str(delivery_id),
        "X-Portal-Timestamp": str(timestamp),
        SIGNATURE_HEADER: signature(secret, body),
    }
    return body, headers


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(value) - timezone.now()).total_seconds())
    except (TypeError, ValueError):
        return None


def post(*, url: str, body: bytes, headers: dict[str, str]) -> Outcome:
    """POST once to the address the URL's host resolves to now (resolved once and pinned: integrations.addresses);
    never raises for network trouble (it becomes a retryable Outcome). A refused address fails at once."""
    if urlsplit(url).scheme.lower() not in ("http", "https"):
        return Outcome(delivered=False, retry=False, error="only http and https URLs are delivered to")
    try:
        target = pin(url)
    except WebhookValidationError as exc:  # a refused address (WebhookAddressError) or an unusable URL: permanent
        return Outcome(delivered=False, retry=False, error=str(exc)[:ERROR_LIMIT])
    except WebhookResolutionError as exc:
        return Outcome(delivered=False, retry=True, error=str(exc)[:ERROR_LIMIT])
    timeout = urllib3.Timeout(connect=settings.PORTAL_WEBHOOK_CONNECT_TIMEOUT,
                              read=settings.PORTAL_WEBHOOK_READ_TIMEOUT)
    pool: urllib3.HTTPConnectionPool
    if target.scheme == "https":
        # Connect to the pinned address; SNI and the certificate check use the hostname from the URL.
        pool = urllib3.HTTPSConnectionPool(target.address, target.port, timeout=timeout, retries=False, maxsize=1,
                                           cert_reqs="CERT_REQUIRED", server_hostname=target.hostname,
                                           assert_hostname=target.hostname)
    else:
        pool = urllib3.HTTPConnectionPool(target.address, target.port, timeout=timeout, retries=False, maxsize=1)
    try:
        response = pool.urlopen("POST", target.path, body=body, headers={**headers, "Host": target.host_header},
                                redirect=False, retries=False, preload_content=False, assert_same_host=False)
    except urllib3.exceptions.HTTPError as exc:
        text = str(exc).replace(url, url_for_log(url))
        if target.path in text and "?" in target.path:
            text = text.replace(target.path, target.path.split("?", 1)[0])
        pool.close()
        return Outcome(delivered=False, retry=True, error=f"{type(exc).__name__}: {text}"[:ERROR_LIMIT])
    try:
        code = response.status
        try:
            excerpt = response.read(300).decode("utf-8", "replace")
        except urllib3.exceptions.HTTPError:
            excerpt = ""
    finally:
        response.close()
        pool.close()
    if 200 <= code < 300:
        return Outcome(delivered=True, retry=False, code=code)
    if 300 <= code < 400:
        return Outcome(delivered=False, retry=False, code=code,
                       error=f"HTTP {code}: redirects are not followed; fix the subscription's URL")
    error = f"HTTP {code}: {excerpt}".strip()[:ERROR_LIMIT]
    if code == 429 or code >= 500:
        return Outcome(delivered=False, retry=True, code=code, error=error,
                       retry_after=_retry_after(response.headers.get("Retry-After")))
    return Outcome(delivered=False, retry=False, code=code, error=error)


def backoff_seconds(attempts: int, *, retry_after: float | None = None, rng: random.Random | None = None) -> float:
    """Delay before the next attempt after `attempts` failed ones: exponential (base * 2^(n-1)) up to the cap,
    with "equal jitter" (half fixed, half random) so that endpoints coming back are not hit in lockstep. A
    Retry-After answer is honoured when it asks for longer, up to the cap."""
    base = float(settings.PORTAL_WEBHOOK_BACKOFF_SECONDS)
    cap = float(settings.PORTAL_WEBHOOK_BACKOFF_MAX_SECONDS)
    delay: float = min(cap, base * 2 ** max(0, attempts - 1))
    delay = delay / 2 + (rng or random).uniform(0, delay / 2)
    if retry_after is not None:
        delay = max(delay, min(cap, retry_after))
    return delay
