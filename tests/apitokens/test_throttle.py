"""Per-token rate limit: 429 with Retry-After past `rate_limit_per_minute`; other tokens and sessions unaffected."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from apitokens import throttling
from tests.apitokens.conftest import bearer, make_token

pytestmark = pytest.mark.django_db

URL = "/api/v1/clusters/"


@pytest.fixture
def frozen_time(monkeypatch: pytest.MonkeyPatch) -> float:
    now = 1_800_000_015.5  # 15.5 s into a minute: the window closes in 44.5 s
    monkeypatch.setattr(throttling.time, "time", lambda: now)
    return now


def test_a_token_past_its_limit_gets_429_with_retry_after(member, frozen_time) -> None:
    limited = bearer(make_token(member, "inventory:read", name="limited", rate_limit_per_minute=3).plaintext)
    other = bearer(make_token(member, "inventory:read", name="other", rate_limit_per_minute=3).plaintext)
    assert [limited.get(URL).status_code for _ in range(3)] == [200, 200, 200]
    refused = limited.get(URL)
    assert refused.status_code == 429
    assert refused["Retry-After"] == "45"
    assert "throttled" in refused.json()["detail"].lower()
    assert other.get(URL).status_code == 200  # counted per token
    session = APIClient()
    session.force_login(member)
    assert all(session.get(URL).status_code == 200 for _ in range(5))  # sessions are not token-limited


def test_the_window_resets(member, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1_800_000_000.0]
    monkeypatch.setattr(throttling.time, "time", lambda: clock[0])
    client = bearer(make_token(member, "inventory:read", rate_limit_per_minute=1).plaintext)
    assert client.get(URL).status_code == 200
    assert client.get(URL).status_code == 429
    clock[0] += 60
    assert client.get(URL).status_code == 200


def test_the_default_limit_comes_from_settings(member, settings) -> None:
    settings.PORTAL_API_TOKEN_RATE_LIMIT_PER_MINUTE = 42
    assert make_token(member, "inventory:read").token.rate_limit_per_minute == 42


def test_on_redis_a_request_costs_one_round_trip(member, frozen_time, settings, monkeypatch) -> None:
    """Production's cache: INCR and EXPIRE in one pipeline (Django's add + incr took three round trips)."""
    import redis.connection
    from django.core.cache import caches

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": settings.REDIS_URL, "KEY_PREFIX": "throttle-test"}}
    token = make_token(member, "inventory:read", name="on-redis", rate_limit_per_minute=2)
    client = bearer(token.plaintext)
    sent = []
    original = redis.connection.AbstractConnection.send_packed_command
    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command",
                        lambda self, command, *args, **kwargs: sent.append(command) or original(
                            self, command, *args, **kwargs))
    try:
        assert [client.get(URL).status_code for _ in range(3)] == [200, 200, 429]
        counting = [c for c in sent if b"apitokens:rate" in b"".join(c if isinstance(c, list) else [c])]
        assert len(counting) == 3  # one per request (the others: the connection's handshake)
        key = caches["default"].make_and_validate_key(f"apitokens:rate:{token.token.pk}:{int(frozen_time // 60)}")
        raw = caches["default"]._cache.get_client(key)
        assert int(raw.get(key)) == 3
        assert 0 < raw.ttl(key) <= 120
    finally:
        caches["default"].clear()
