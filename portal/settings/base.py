"""Settings from environment variables. Production differences are env values, never another settings file.

A missing secret crashes at import time (fail fast); `portal.settings.demo` and `portal.settings.test` supply the
embedded defaults before importing this module.
"""

import tempfile
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(environ.Env().str("PORTAL_VAR_DIR", default=str(BASE_DIR / "var")))

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")  # local convenience only; deployments inject real env vars

SECRET_KEY = env("DJANGO_SECRET_KEY")  # no default on purpose
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=[])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served by the app (no CDN)
    "portal",
    "audit",
    "apitokens",
    "inventory",
    "catalog",
    "integrations",
]

MIDDLEWARE = [
    "portal.observability.ProbeMiddleware",  # /healthz, /readyz: before the host check and the HTTPS redirect
    "audit.middleware.AuditContextMiddleware",  # every response carries X-Request-ID
    "portal.observability.RequestMetricsMiddleware",  # latency histogram and the access log (with the request id)
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # static files without a separate web server
    "portal.middleware.ContentSecurityPolicyMiddleware",
    "django.middleware.http.ConditionalGetMiddleware",  # ETag / If-None-Match → 304 (CMDB pollers)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.middleware.VaryOnHtmxMiddleware",
    "inventory.redaction.NodeNameRedactionMiddleware",  # PORTAL_REDACT_NODE_NAMES: API data before rendering
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "audit.context_processors.audit_nav",
            ],
        },
    }
]

DATABASES = {"default": env.db("DATABASE_URL")}
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=60))
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Embedded demo: several watcher threads write; IMMEDIATE transactions avoid lock-upgrade deadlocks.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
ATOMIC_REQUESTS = False  # services own their transactions (STYLE.md anti-pattern 8)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Every password check is throttled per (client, username) and per client (portal/security.py).
AUTHENTICATION_BACKENDS = ["portal.security.ThrottledModelBackend"]
PORTAL_LOGIN_MAX_FAILURES = env.int("PORTAL_LOGIN_MAX_FAILURES", default=10)
PORTAL_LOGIN_MAX_FAILURES_PER_CLIENT = env.int("PORTAL_LOGIN_MAX_FAILURES_PER_CLIENT", default=100)
PORTAL_LOGIN_WINDOW_SECONDS = env.int("PORTAL_LOGIN_WINDOW_SECONDS", default=900)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"  # each role lands where its work is (portal.views.home)
LOGOUT_REDIRECT_URL = "login"

# Notification e-mail (portal/notifications/services.py). The demo writes messages to files under var/mail instead.
EMAIL_BACKEND = env("DJANGO_EMAIL_BACKEND", default="django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env("DJANGO_EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("DJANGO_EMAIL_PORT", default=25)
EMAIL_USE_TLS = env.bool("DJANGO_EMAIL_USE_TLS", default=False)
EMAIL_TIMEOUT = env.int("DJANGO_EMAIL_TIMEOUT", default=10)
EMAIL_FILE_PATH = env("DJANGO_EMAIL_FILE_PATH", default=str(VAR_DIR / "mail"))
DEFAULT_FROM_EMAIL = env("DJANGO_DEFAULT_FROM_EMAIL", default="accelerator-portal@localhost")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env.path("DJANGO_STATIC_ROOT", default=str(BASE_DIR / "staticfiles"))
# WhiteNoise serves STATIC_ROOT (collected at image build) and, without collectstatic, the app directories.
WHITENOISE_USE_FINDERS = True

# Security headers; `manage.py check --deploy` is clean when DJANGO_SECURE=true (production behind TLS).
SECURE = env.bool("DJANGO_SECURE", default=not DEBUG)
SESSION_COOKIE_SECURE = SECURE
CSRF_COOKIE_SECURE = SECURE
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=SECURE)
SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=31536000 if SECURE else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE
SECURE_HSTS_PRELOAD = SECURE
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

REST_FRAMEWORK = {
    # drf-spectacular, plus the error, 304 and ETag answers it does not document by itself.
    "DEFAULT_SCHEMA_CLASS": "core.api.schema.PortalAutoSchema",
    # Views with their own permission_classes extend these (`[*api_settings.DEFAULT_PERMISSION_CLASSES, …]`):
    # API tokens are refused by views that do not run TokenScopePermission (docs/tokens.md).
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "apitokens.permissions.TokenScopePermission",
    ],
    # Tokens first: a request that sends one is held to its scopes, and unauthenticated API calls answer 401 with
    # `WWW-Authenticate: Bearer`.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "apitokens.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        # No Basic authentication: the API takes no passwords, so password guessing has one way in, the throttled
        # login pages (docs/tokens.md).
    ],
    # JSON bodies bounded by DATA_UPLOAD_MAX_MEMORY_SIZE and refused (400) when nested too deeply; forms as DRF's.
    "DEFAULT_PARSER_CLASSES": [
        "core.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "core.api.pagination.PortalLimitOffsetPagination",  # limit ≤ 1000
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": ["apitokens.throttling.TokenRateThrottle"],  # token requests only
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Accelerator Portal API",
    "DESCRIPTION": "Inventory, catalog, quota and chargeback for accelerators on Kubernetes.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Anyone may read the schema; an API token with any scope too (the views declare token_scope "*").
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny", "apitokens.permissions.TokenScopePermission"],
    "ENUM_NAME_OVERRIDES": {
        "OfferingLifecycleEnum": "catalog.models.Lifecycle",
        "LifecycleChangeEnum": ["active", "deprecated", "retired"],
        "AccessKindEnum": "portal.access.models.AccessKind",
        "ViolationKindEnum": "portal.enforcement.models.Violation.Kind",
        "QuotaTargetEnum": "portal.tenancy.models.QuotaTarget",
    },
}

# Redis: broker, and the watcher leases. Without REDIS_URL (embedded demo) the broker is kombu's filesystem
# transport and leases live in the database.
REDIS_URL = env("REDIS_URL", default="")
if REDIS_URL:
    CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL)
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"visibility_timeout": 3600}
else:
    _broker_dir = VAR_DIR / "celery-broker"
    CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="filesystem://localhost/")  # the host is ignored
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
PORTAL_LEASE_BACKEND = env("PORTAL_LEASE_BACKEND", default="redis" if REDIS_URL else "database")
if REDIS_URL:
    # Shared by every process: API token rate limits and the task debounces count across workers.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
    # Sessions are read from Redis and written through to PostgreSQL: a page view no longer queries django_session
    # (a lost Redis costs a re-read, never a logout; Redis runs with noeviction, docs/deploy.md).
    SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=300)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=360)
CELERY_TASK_DEFAULT_QUEUE = "default"
# Webhook deliveries get their own queue so slow endpoints never hold the sync's workers (docs/changes-webhooks.md).
# The queue position reads run beside the watchers: the `watch` workers hold the reader role (docs/deploy.md).
CELERY_TASK_ROUTES = {"inventory.watch_window": {"queue": "watch"},
                      "inventory.queue_positions_sync": {"queue": "watch"},
                      "integrations.webhook_deliver": {"queue": "webhooks"}}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Every worker also consumes its own direct queue: its heartbeat task goes there (portal/heartbeat.py).
CELERY_WORKER_DIRECT = True
# Watch windows keep running through a broker outage (they need only their lease and the cluster); cancelling them
# would restart every watcher for a blip.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# How long a watch batch waits after its first event for more (inventory/services/sync.py); events that arrived while
# the previous batch was being applied come along anyway. 0 lowers the lag at high churn (batches then grow with the
# rate by themselves), but at low churn every event becomes its own batch, and a batch's fixed cost tripled the watch
# worker's CPU at 50 changes/s: keep 0.2 where the watch worker shares its cores (docs/deploy.md, "Watch lag").
PORTAL_WATCH_BATCH_WAIT = env.float("PORTAL_WATCH_BATCH_WAIT", default=0.2)
PORTAL_WORKER_HEARTBEAT_SECONDS = env.float("PORTAL_WORKER_HEARTBEAT_SECONDS", default=30.0)  # 0 = no heartbeat
PORTAL_WORKER_HEARTBEAT_DIR = env("PORTAL_WORKER_HEARTBEAT_DIR",
                                  default=str(Path(tempfile.gettempdir()) / "portal-heartbeat"))
CELERY_BEAT_SCHEDULE = {
    "inventory-watchers-ensure": {
        "task": "inventory.watchers_ensure",
        "schedule": env.float("PORTAL_WATCHERS_ENSURE_SECONDS", default=10.0),
    },
    # Catch-up and hourly history for the catalog's capacity (sync batches also trigger it, debounced).
    "catalog-capacity-refresh": {
        "task": "catalog.capacity_refresh",
        "schedule": env.float("PORTAL_CAPACITY_REFRESH_SECONDS", default=900.0),
    },
    "catalog-offerings-retire-due": {"task": "catalog.offerings_retire_due", "schedule": 3600.0},
    "catalog-discovery": {"task": "catalog.discovery_run", "schedule": 3600.0},
    "portal-tenant-namespaces": {"task": "portal.tenant_namespaces_sync", "schedule": 60.0},
    # Telemetry: one rollup/findings task per cluster (docs/utilization.md).
    # Chargeback's hourly rollups: rebuild what changed, and the current hour as of now (docs/chargeback.md).
    "portal-chargeback-rollups": {"task": "portal.chargeback_rollups_refresh",
                                  "schedule": env.float("PORTAL_CHARGEBACK_ROLLUP_SECONDS", default=30.0)},
    "portal-telemetry-refresh": {"task": "portal.telemetry_refresh",
                                 "schedule": env.float("PORTAL_TELEMETRY_REFRESH_SECONDS", default=300.0)},
    # Applying quota requests become active once the sync shows them; expiry; re-enqueue lost applies.
    "portal-quota-confirm": {"task": "portal.quota_confirm", "schedule": env.float("PORTAL_QUOTA_CONFIRM_SECONDS",
                                                                                   default=10.0)},
    # Exceptions: expiry, activation once the sync shows them, drift re-applies and violation detection.
    "portal-access-reconcile": {"task": "portal.access_reconcile",
                                "schedule": env.float("PORTAL_ACCESS_RECONCILE_SECONDS", default=10.0)},
    # CMDB change feed retention, and webhooks: dispatch new events every few seconds (docs/changes-webhooks.md).
    "inventory-change-events-prune": {"task": "inventory.change_events_prune", "schedule": 86400.0},
    # Kueue's queue positions from its visibility API, per cluster serving Kueue (docs/queues.md).
    "inventory-queue-positions": {"task": "inventory.queue_positions_due",
                                  "schedule": env.float("PORTAL_QUEUE_POSITIONS_SECONDS", default=30.0)},
    "integrations-webhooks-dispatch": {"task": "integrations.webhooks_dispatch",
                                       "schedule": env.float("PORTAL_WEBHOOK_DISPATCH_SECONDS", default=5.0)},
    "integrations-webhook-deliveries-prune": {"task": "integrations.webhook_deliveries_prune", "schedule": 86400.0},
}
# Telemetry (docs/utilization.md): dcgm-exporter metrics read through a Prometheus-compatible HTTP API.
PORTAL_PROMETHEUS_URL = env("PORTAL_PROMETHEUS_URL", default="")
PORTAL_PROMETHEUS_CONNECT_TIMEOUT = env.float("PORTAL_PROMETHEUS_CONNECT_TIMEOUT", default=3.0)
PORTAL_PROMETHEUS_READ_TIMEOUT = env.float("PORTAL_PROMETHEUS_READ_TIMEOUT", default=30.0)
PORTAL_TELEMETRY_SCRAPE_SECONDS = env.float("PORTAL_TELEMETRY_SCRAPE_SECONDS", default=15.0)
PORTAL_TELEMETRY_BACKFILL_HOURS = env.int("PORTAL_TELEMETRY_BACKFILL_HOURS", default=6)
# Chargeback reports count allocations up to the rollups' moment: a reader rolls the current hour up again when that
# moment is older than this (the beat does it every PORTAL_CHARGEBACK_ROLLUP_SECONDS).
PORTAL_CHARGEBACK_ROLLUP_MAX_AGE = env.float("PORTAL_CHARGEBACK_ROLLUP_MAX_AGE", default=60.0)
# A reader rebuilds rollups itself only when that reaches back at most this many hours; a longer rebuild (a back-dated
# price, a newly registered cluster's history, a beat that stopped) is left to the beat, and the reports price the
# intervals meanwhile (docs/chargeback.md).
PORTAL_CHARGEBACK_READER_REBUILD_HOURS = env.int("PORTAL_CHARGEBACK_READER_REBUILD_HOURS", default=168)
PORTAL_IDLE_THRESHOLD = env.float("PORTAL_IDLE_THRESHOLD", default=0.05)
PORTAL_IDLE_HOURS = env.int("PORTAL_IDLE_HOURS", default=1)
PORTAL_CAPACITY_DEBOUNCE_SECONDS = env.int("PORTAL_CAPACITY_DEBOUNCE_SECONDS", default=10)
# Quota approval thresholds apply to a namespace's total increase of an offering within this many days (pending and
# granted requests), so ten small requests need the approvals one big request would (docs/quota.md).
PORTAL_QUOTA_THRESHOLD_WINDOW_DAYS = env.int("PORTAL_QUOTA_THRESHOLD_WINDOW_DAYS", default=30)
# Namespaces where the privileged-container policy is not bound and the violation scan does not look (docs/access.md
# "System namespaces"): Kubernetes' own, the portal's own, and the GPU operator and NVIDIA DRA driver, whose node
# agents need host access by design. Everything else is enforced, namespaces of no tenant included; a namespace
# assigned to a tenant is enforced even when listed. Operators add namespaces with the second list.
PORTAL_ENFORCEMENT_EXEMPT_NAMESPACES = env.list("PORTAL_ENFORCEMENT_EXEMPT_NAMESPACES", default=[
    "kube-system", "kube-public", "kube-node-lease", "accelerator-portal", "accelerator-portal-system",
    "gpu-operator", "nvidia-dra-driver-gpu",
])
PORTAL_ENFORCEMENT_EXTRA_EXEMPT_NAMESPACES = env.list("PORTAL_ENFORCEMENT_EXTRA_EXEMPT_NAMESPACES", default=[])
# The feasibility explainer reuses a cluster's scheduling snapshot (nodes, bound pods, DRA objects) this long.
PORTAL_FEASIBILITY_SNAPSHOT_SECONDS = env.float("PORTAL_FEASIBILITY_SNAPSHOT_SECONDS", default=15.0)

# Sync engine tuning.
PORTAL_WATCH_WINDOW_SECONDS = env.int("PORTAL_WATCH_WINDOW_SECONDS", default=120)
PORTAL_WATCH_LEASE_SECONDS = env.int("PORTAL_WATCH_LEASE_SECONDS", default=30)
PORTAL_LIST_PAGE_SIZE = env.int("PORTAL_LIST_PAGE_SIZE", default=500)
# Discovery (which kinds a cluster serves, at which version) is re-read when older than this, after a 404, and every
# PORTAL_UNSERVED_RECHECK_SECONDS by the watcher of a kind the cluster does not serve (docs/clusters.md).
PORTAL_DISCOVERY_SECONDS = env.int("PORTAL_DISCOVERY_SECONDS", default=300)
PORTAL_UNSERVED_RECHECK_SECONDS = env.float("PORTAL_UNSERVED_RECHECK_SECONDS", default=60.0)
# A queue position read from Kueue's visibility API is shown as Kueue's for this long after it was read; after that
# (or where the API is not served) the pending page shows the portal's estimate, labelled as such (docs/queues.md).
PORTAL_QUEUE_POSITION_FRESH_SECONDS = env.int("PORTAL_QUEUE_POSITION_FRESH_SECONDS", default=120)
# Safety net: every (cluster, kind) is listed in full again about this often (each kind staggered between 0.75x and
# 1.25x) even when its watch looks healthy; 0 = never. Anything the watch missed is tombstoned or corrected.
PORTAL_SYNC_RELIST_SECONDS = env.int("PORTAL_SYNC_RELIST_SECONDS", default=6 * 3600)
# A kind whose watcher has applied no event or bookmark for this long is shown as stale (no live watcher).
PORTAL_SYNC_STALE_SECONDS = env.int("PORTAL_SYNC_STALE_SECONDS", default=180)
PORTAL_K8S_CONNECT_TIMEOUT = env.float("PORTAL_K8S_CONNECT_TIMEOUT", default=5.0)
PORTAL_K8S_READ_TIMEOUT = env.float("PORTAL_K8S_READ_TIMEOUT", default=60.0)

# Kubeconfigs are data, never programs (inventory/k8s/kubeconfig.py). A cluster registered by *path* reads its
# kubeconfig from under this directory only (the mounted Secrets, docs/deploy.md); empty = registering by path is
# refused.
PORTAL_KUBECONFIG_DIR = env("PORTAL_KUBECONFIG_DIR", default="")
# The exact `proxy-url` values a kubeconfig may name; empty = no kubeconfig may send the portal through a proxy.
PORTAL_KUBECONFIG_ALLOWED_PROXIES = env.list("PORTAL_KUBECONFIG_ALLOWED_PROXIES", default=[])

# Groups that may see hardware identifiers (serials, UUIDs, PCI addresses): the platform roles of portal/tenancy/roles.py.
# Node names in REST API answers become stable pseudonyms for users who may not see sensitive data (docs/tokens.md).
PORTAL_REDACT_NODE_NAMES = env.bool("PORTAL_REDACT_NODE_NAMES", default=False)
PORTAL_SENSITIVE_DATA_GROUPS = env.list(
    "PORTAL_SENSITIVE_DATA_GROUPS", default=["platform-admin", "approver", "security-approver"]
)
# API tokens (docs/tokens.md): default requests per minute of a new token, and the longest lifetime.
PORTAL_API_TOKEN_RATE_LIMIT_PER_MINUTE = env.int("PORTAL_API_TOKEN_RATE_LIMIT_PER_MINUTE", default=600)
PORTAL_API_TOKEN_MAX_DAYS = env.int("PORTAL_API_TOKEN_MAX_DAYS", default=365)
# CMDB change feed and webhooks (docs/changes-webhooks.md). Events older than the retention are pruned (each object's
# latest event stays); cursors from before a pruned deletion answer 410 Gone.
PORTAL_CHANGE_RETENTION_DAYS = env.int("PORTAL_CHANGE_RETENTION_DAYS", default=30)
PORTAL_WEBHOOK_ADMIN_GROUPS = env.list("PORTAL_WEBHOOK_ADMIN_GROUPS", default=["platform-admin"])
# Networks (CIDRs) webhooks may be delivered to although they are not public (loopback, private, link-local…):
# e.g. an in-cluster collector. Empty: public addresses only (integrations/addresses.py).
PORTAL_WEBHOOK_ALLOWED_NETWORKS = env.list("PORTAL_WEBHOOK_ALLOWED_NETWORKS", default=[])
PORTAL_WEBHOOK_CONNECT_TIMEOUT = env.float("PORTAL_WEBHOOK_CONNECT_TIMEOUT", default=3.0)
PORTAL_WEBHOOK_READ_TIMEOUT = env.float("PORTAL_WEBHOOK_READ_TIMEOUT", default=10.0)
PORTAL_WEBHOOK_MAX_ATTEMPTS = env.int("PORTAL_WEBHOOK_MAX_ATTEMPTS", default=8)
PORTAL_WEBHOOK_BACKOFF_SECONDS = env.float("PORTAL_WEBHOOK_BACKOFF_SECONDS", default=10.0)
PORTAL_WEBHOOK_BACKOFF_MAX_SECONDS = env.float("PORTAL_WEBHOOK_BACKOFF_MAX_SECONDS", default=3600.0)
PORTAL_WEBHOOK_DELIVERY_RETENTION_DAYS = env.int("PORTAL_WEBHOOK_DELIVERY_RETENTION_DAYS", default=30)
# Node labels naming a node's pool, first match wins (managed Kubernetes flavours, Karpenter, the simulator).
PORTAL_NODE_POOL_LABELS = env.list("PORTAL_NODE_POOL_LABELS", default=[
    "kubesim.io/node-pool", "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool", "kubernetes.azure.com/agentpool", "node.kubernetes.io/pool",
])

# Audit log (docs/audit.md). Readers of /audit/ and /api/v1/audit-events/ by group name; superusers always.
PORTAL_AUDIT_READER_GROUPS = env.list("PORTAL_AUDIT_READER_GROUPS", default=["platform-admin", "finance"])
# Direct peers (IPs or CIDRs of our reverse proxies) whose X-Forwarded-For is believed for the client address of
# audit events and of the login throttle; empty: REMOTE_ADDR only.
PORTAL_TRUSTED_PROXIES = env.list("PORTAL_TRUSTED_PROXIES", default=[])
# HMAC-SHA256 key (>= 32 characters) signing audit chain checkpoints. No default: without it checkpoints are off.
PORTAL_AUDIT_CHECKPOINT_KEY = env("PORTAL_AUDIT_CHECKPOINT_KEY", default="")
# Retired checkpoint keys, only to verify checkpoints signed before a key rotation.
PORTAL_AUDIT_CHECKPOINT_OLD_KEYS = env.list("PORTAL_AUDIT_CHECKPOINT_OLD_KEYS", default=[])
# The hourly checkpoint also appends its signed line here (keep it off the database host, e.g. WORM storage).
PORTAL_AUDIT_CHECKPOINT_FILE = env("PORTAL_AUDIT_CHECKPOINT_FILE", default="")
# The database role the web and workers connect as, when migrations run as another role that owns the tables
# (docs/deploy.md, "Database roles"): `migrate` then grants it its privileges, SELECT and INSERT only on the audit
# tables. Empty: one role does both; owning the tables, it could disable the append-only triggers (audit.W004).
PORTAL_DATABASE_APP_ROLE = env("PORTAL_DATABASE_APP_ROLE", default="")
if PORTAL_AUDIT_CHECKPOINT_KEY:
    CELERY_BEAT_SCHEDULE["audit-checkpoint"] = {
        "task": "audit.checkpoint",
        "schedule": env.float("PORTAL_AUDIT_CHECKPOINT_SECONDS", default=3600.0),
    }

# JSON lines on stdout with the request id; PORTAL_LOG_FORMAT=plain for humans. Secrets (bearer and API tokens,
# kubeconfig credentials) are removed from every record by a filter, as defence in depth.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "portal.observability.RequestIdFilter"},
        "secrets": {"()": "portal.observability.RedactSecretsFilter"},
        "client_errors": {"()": "portal.observability.ClientErrorFilter"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
        "json": {"()": "pythonjsonlogger.json.JsonFormatter",
                 "format": "%(asctime)s %(levelname)s %(name)s %(request_id)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["request_id", "client_errors", "secrets"],
                             "formatter": env("PORTAL_LOG_FORMAT", default="json")}},
    "root": {"handlers": ["console"], "level": env("PORTAL_LOG_LEVEL", default="INFO")},
    "loggers": {
        # urllib3 logs request headers at DEBUG, which would include bearer tokens.
        "urllib3": {"level": "WARNING"},
        "kubernetes": {"level": "WARNING"},
    },
}
# /metrics: the bearer token scrapers send; empty: /metrics is closed (403). /readyz?strict=1: a cluster is stale
# after PORTAL_SYNC_STALE_SECONDS.
PORTAL_METRICS_TOKEN = env("PORTAL_METRICS_TOKEN", default="")
# Fernet keys for secrets stored in the database (kubeconfigs, webhook secrets): the first encrypts, all decrypt (rotation). Without
# keys one is derived from DJANGO_SECRET_KEY; set real ones in production (docs/observability.md).
PORTAL_FIELD_ENCRYPTION_KEYS = env.list("PORTAL_FIELD_ENCRYPTION_KEYS", default=[])
PORTAL_SYNC_STALE_SECONDS = env.int("PORTAL_SYNC_STALE_SECONDS", default=300)
