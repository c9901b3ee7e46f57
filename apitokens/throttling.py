"""Per-token rate limit: `ApiToken.rate_limit_per_minute` requests per calendar minute, counted in Django's cache
(Redis in production, so all web workers share the count). Session requests are not throttled here (logins are:
portal/security.py).

A fixed window with an atomic increment, at the price of allowing up to twice the limit across a minute boundary. On
Redis, INCR and EXPIRE go in one MULTI pipeline: one round trip per request (Django's `cache.add` + `cache.incr` take
three: SET NX, EXISTS, INCR). Other cache backends (the tests' local memory) use `add` + `incr`; neither has a
read-modify-write race.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.cache import caches
from django.core.cache.backends.redis import RedisCache
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
        count = _count(f"apitokens:rate:{token.pk}:{window}")
        if count <= token.rate_limit_per_minute:
            return True
        self._wait = (window + 1) * WINDOW_SECONDS - now
        return False

    def wait(self) -> float | None:
        return self._wait


def _count(key: str) -> int:
    """Add one to the window's counter and return it."""
    cache = caches["default"]
    if isinstance(cache, RedisCache):
        name = cache.make_and_validate_key(key)
        pipe = cache._cache.get_client(name, write=True).pipeline(transaction=True)
        pipe.incr(name)
        pipe.expire(name, WINDOW_SECONDS * 2)
        count, _ = pipe.execute()
        return int(count)
    cache.add(key, 0, timeout=WINDOW_SECONDS * 2)
    try:
        return int(cache.incr(key))
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=WINDOW_SECONDS * 2)
        return 1
