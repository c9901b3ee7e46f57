"""Settings for the command-line tools that need no database and no secret (manage.py's OFFLINE_COMMANDS).

`validate_manifest FILE [--snapshot CLUSTER.json]`, `explain_pod --pod … --nodes …`, `cel_eval` and `kubesim` read
their input from files; nothing is signed, stored or sent. manage.py selects this module only when the production
settings cannot load (no DJANGO_SECRET_KEY / DATABASE_URL), so a configured environment keeps its database.
"""

import os
import secrets

# A throw-away key: these tools sign nothing that outlives the process.
os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
os.environ.setdefault("DATABASE_URL", "sqlite://:memory:")
os.environ.setdefault("PORTAL_LOG_FORMAT", "plain")

from portal.settings.base import *  # noqa: F403

# No database at all: Django's dummy backend raises ImproperlyConfigured on any query, which the commands turn
# into "this option needs the inventory database".
DATABASES: dict[str, dict[str, object]] = {}
PORTAL_OFFLINE = True
