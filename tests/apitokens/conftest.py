"""API token helpers: create a token through the service, and a client that sends it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone
from rest_framework.test import APIClient

from apitokens.services import CreatedToken, api_token_create


def make_token(user: Any, *scopes: str, days: int = 30, name: str = "ci", **kwargs: Any) -> CreatedToken:
    return api_token_create(actor=user, user=user, name=name, scopes=list(scopes),
                            expires_at=timezone.now() + timedelta(days=days), **kwargs)


def bearer(plaintext: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    """Rate-limit counters live in the (locmem) cache."""
    cache.clear()
    yield
    cache.clear()
