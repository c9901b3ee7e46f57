"""Test settings: the machine's real PostgreSQL and Redis; only speed settings differ from base."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-not-secret")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
os.environ.setdefault("DJANGO_SECURE", "false")

from portal.settings.base import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
PORTAL_WATCH_LEASE_SECONDS = env.int("PORTAL_WATCH_LEASE_SECONDS", default=5)  # noqa: F405
# Lets the test runner empty the append-only audit table between transactional tests (see audit 0001).
DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c audit.allow_truncate=on"  # noqa: F405
# WhiteNoise scans STATIC_ROOT at start-up; tests never run collectstatic, so point it at an empty directory.
STATIC_ROOT = Path(tempfile.gettempdir()) / "portal-test-static"
STATIC_ROOT.mkdir(exist_ok=True)
