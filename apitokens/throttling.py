"""Per-token rate limit: `ApiToken.rate_limit_per_minute` requests per calendar minute, counted in Django's cache
(Redis in production, so all web workers share the count). Session requests are not throttled here (logins are:
portal/security.py).

A fixed window with an atomic increment (`cache.add` + `cache.incr`): one cache round trip per request and no
read-modify-write race, at the price of allowing up to twice the limit across a minute boundary.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

from apitokens.models import ApiToken

WINDOW_SECONDS = 60


class TokenRateThrottle(BaseThrottle):
    def __init__(self) -> None:
        self._wait: float | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        token = getattr(request, "auth", None)
        if not isinstance(token, ApiToken):
            return True
        now = time.time()
        window = int(now // WINDOW_SECONDS)
        key = f"apitokens:rate:{token.pk}:{window}"
        cache.add(key, 0, timeout=WINDOW_SECONDS * 2)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=WINDOW_SECONDS * 2)
            count = 1
        if count <= token.rate_limit_per_minute:
            return True
        self._wait = (window + 1) * WINDOW_SECONDS - now
        return False

    def wait(self) -> float | None:
        return self._wait
