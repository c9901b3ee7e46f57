"""Test settings: the machine's real PostgreSQL and Redis; only speed settings differ from base."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-not-secret")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
os.environ.setdefault("DJANGO_SECURE", "false")


def _redis_url_for_worker(url: str, worker: str) -> str:
    """Each pytest-xdist worker (gw0, gw1, ...) its own Redis database, counting down from the configured one (tests
    flush it), as pytest-django gives each its own test database. Processes a test starts inherit the environment and
    get the URL already moved, so it is moved once: the variable below says for which worker it was."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    index = int(worker.removeprefix("gw"))
    database = int(parts.path.strip("/") or 0) - index
    if database < 0:
        raise ValueError(f"{url}: too few Redis databases below it for xdist worker {worker}")
    return urlunsplit(parts._replace(path=f"/{database}"))


_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and os.environ.get("PORTAL_TEST_REDIS_WORKER") != _worker:
    os.environ["REDIS_URL"] = _redis_url_for_worker(os.environ["REDIS_URL"], _worker)
    os.environ["PORTAL_TEST_REDIS_WORKER"] = _worker

from portal.settings.base import *  # noqa: E402, F403 - after the environment it reads is set

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"]["ENGINE"] = "tests.postgresql"  # noqa: F405 - Django's, with a flush that skips empty tables
PORTAL_WATCH_LEASE_SECONDS = env.int("PORTAL_WATCH_LEASE_SECONDS", default=5)  # noqa: F405
# Lets the test runner empty the append-only audit table between transactional tests (see audit 0001).
DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c audit.allow_truncate=on"  # noqa: F405
# WhiteNoise scans STATIC_ROOT at start-up; tests never run collectstatic, so point it at an empty directory.
STATIC_ROOT = Path(tempfile.gettempdir()) / "portal-test-static"
STATIC_ROOT.mkdir(exist_ok=True)
