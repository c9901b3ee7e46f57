"""Embedded defaults for `make demo`: SQLite under var/, filesystem broker, a per-checkout secret."""

import os
import secrets
from pathlib import Path

_var = Path(os.environ.get("PORTAL_VAR_DIR") or Path(__file__).resolve().parent.parent.parent / "var")
_var.mkdir(parents=True, exist_ok=True)
_secret_file = _var / "demo-secret-key"
if not _secret_file.exists():
    _secret_file.write_text(secrets.token_urlsafe(50))
os.environ.setdefault("DJANGO_SECRET_KEY", _secret_file.read_text().strip())
os.environ.setdefault("DATABASE_URL", f"sqlite:///{_var / 'demo.sqlite3'}")
# Not DEBUG: the demo shows the portal's own error pages, never Django's debug page with the URL list.
os.environ.setdefault("DJANGO_DEBUG", "false")
os.environ.setdefault("DJANGO_SECURE", "false")  # plain http on 127.0.0.1
os.environ.setdefault("DJANGO_EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")  # var/mail
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
os.environ.setdefault("PORTAL_WATCH_WINDOW_SECONDS", "60")

# Settings layering is the one place we star-import: the module *is* base.py with different env defaults.
from portal.settings.base import *  # noqa: E402, F403

PORTAL_DEMO = True
LOGGING["handlers"]["console"]["formatter"] = env("PORTAL_LOG_FORMAT", default="plain")  # noqa: F405 - for humans
