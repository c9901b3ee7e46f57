"""System checks of the portal's own settings (`manage.py check --deploy`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Tags, Warning, register

# A bearer token shorter than this is guessable by a scraper on the pod network (token_urlsafe(32) gives 43).
METRICS_TOKEN_MIN_LENGTH = 32


@register(Tags.security, deploy=True)
def metrics_token_set(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """/metrics is closed (403) without PORTAL_METRICS_TOKEN: safe, but the platform's Prometheus then scrapes
    nothing, and the portal's own alerts (sync lag, queue depth, idle units) go silent."""
    token = getattr(settings, "PORTAL_METRICS_TOKEN", "") or ""
    if not token:
        return [Warning(
            "PORTAL_METRICS_TOKEN is not set: /metrics answers 403 to every scrape, so the portal's metrics and the "
            "alerts built on them are silent.",
            hint="Set it in the Secret (python -c 'import secrets; print(secrets.token_urlsafe(32))') and give the "
                 "same token to the Prometheus scrape job; docs/observability.md.",
            id="portal.W001",
        )]
    if len(token) < METRICS_TOKEN_MIN_LENGTH:
        return [Warning(
            f"PORTAL_METRICS_TOKEN is {len(token)} characters long: a bearer token under "
            f"{METRICS_TOKEN_MIN_LENGTH} characters can be guessed.",
            hint="Use python -c 'import secrets; print(secrets.token_urlsafe(32))'; docs/observability.md.",
            id="portal.W002",
        )]
    return []
