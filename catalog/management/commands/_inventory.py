"""What the offline command-line tools say when an option needs the inventory database they run without."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import CommandError


def require_inventory(option: str, *, instead: str) -> None:
    """Stop with one line when `option` needs the database and manage.py runs the offline settings."""
    if getattr(settings, "PORTAL_OFFLINE", False):
        raise CommandError(
            f"{option} reads the inventory database: set DJANGO_SECRET_KEY and DATABASE_URL (see .env.example), "
            f"or {instead}",
            returncode=2,
        )
