"""`manage.py check --deploy` with the environment a production pod gets: the base ConfigMap
(deploy/kustomize/base/prepare/config.env), the example overlay's values, the Secret's variables filled as an operator
would, and the image's DJANGO_STATIC_ROOT. Production has no settings file of its own (portal/settings/base.py reads
the environment), so these run `portal.settings.base` in a subprocess with exactly that environment.

Not repeated here: the probes answering before the host check and the redirect (tests/deploy/test_probe_contract.py),
the Content-Security-Policy and CSRF (tests/test_security_headers.py)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.fernet import Fernet

pytestmark = pytest.mark.slow  # Django started in a subprocess per check (1.5-4 s each)

ROOT = Path(__file__).resolve().parent.parent
KUSTOMIZE = ROOT / "deploy" / "kustomize"
ONE_YEAR = 365 * 24 * 3600


def _env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line.strip() and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def production_env(**overrides: str) -> dict[str, str]:
    """The web pod's environment (envFrom the ConfigMap and the Secret) on top of this machine's PATH and the like;
    nothing of the test settings leaks in."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("DJANGO_", "PORTAL_", "DATABASE_", "CELERY_", "REDIS_", "PROMETHEUS_"))}
    env.update(_env_file(KUSTOMIZE / "base" / "prepare" / "config.env"))
    overlay = yaml.safe_load((KUSTOMIZE / "overlays" / "example" / "kustomization.yaml").read_text())
    for generator in overlay["configMapGenerator"]:
        env.update(literal.split("=", 1) for literal in generator.get("literals", []))
    secret_names = set(_env_file(KUSTOMIZE / "overlays" / "example" / "secrets.env.example"))
    filled = {
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(64),
        # check --deploy connects to neither; the test run's own servers, should anything try.
        "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal"),
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"),
        "PORTAL_AUDIT_CHECKPOINT_KEY": secrets.token_hex(32),
        "PORTAL_FIELD_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
        "PORTAL_METRICS_TOKEN": secrets.token_urlsafe(32),
    }
    assert secret_names <= set(filled), f"fill the new Secret variables here: {secret_names - set(filled)}"
    env.update(filled)
    static_root = Path(tempfile.gettempdir()) / "portal-deploy-check-static"  # the image's /app/staticfiles
    static_root.mkdir(exist_ok=True)
    env["DJANGO_STATIC_ROOT"] = str(static_root)
    env.update(overrides)
    return env


def manage(*args: str, **overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=production_env(**overrides))


def test_the_pods_environment_is_production() -> None:
    env = production_env()
    assert env["DJANGO_SETTINGS_MODULE"] == "portal.settings.base"
    assert env["DJANGO_SECURE"] == "true"
    assert env.get("DJANGO_DEBUG", "false") == "false"


def test_check_deploy_reports_nothing_for_the_pods_environment() -> None:
    """The Secret's PORTAL_AUDIT_CHECKPOINT_KEY and PORTAL_FIELD_ENCRYPTION_KEYS are filled, as an operator must:
    without them the audit and encryption checks warn (tests below)."""
    result = manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    # Zero issues of any level (INFO included), and nothing silenced.
    assert "System check identified no issues (0 silenced)." in result.stdout, result.stdout + result.stderr


# Each variable weakens one setting, each reported by its own check: one process for all of them (a process loads
# the whole project, ~5 s), plus one for DJANGO_SECURE=false, which weakens several at once.
WEAKENED_ENV = {
    "DJANGO_HSTS_SECONDS": ("0", "security.W004"),
    "DJANGO_SECURE_SSL_REDIRECT": ("false", "security.W008"),
    "DJANGO_DEBUG": ("true", "security.W018"),
    "DJANGO_SECRET_KEY": ("short-and-guessable", "security.W009"),
    "DJANGO_ALLOWED_HOSTS": ("", "security.W020"),
}


@pytest.fixture(scope="module")
def weakened_env_check() -> subprocess.CompletedProcess[str]:
    return manage("check", "--deploy", "--fail-level", "WARNING",
                  **{name: value for name, (value, _) in WEAKENED_ENV.items()})


@pytest.mark.parametrize("variable", list(WEAKENED_ENV))
def test_check_deploy_fails_when_a_variable_weakens_security(
        weakened_env_check: subprocess.CompletedProcess[str], variable: str) -> None:
    assert weakened_env_check.returncode != 0
    assert f"({WEAKENED_ENV[variable][1]})" in weakened_env_check.stderr, weakened_env_check.stderr
    # DJANGO_SECURE is still true: the cookies stay secure (their checks only fire below).
    assert "(security.W012)" not in weakened_env_check.stderr


# The audit log's, the stored secrets' and the metrics' own checks (audit/checks.py, inventory/checks.py,
# portal/checks.py): each variable unset or
# pointed somewhere unsafe is reported with its id, in one process.
UNSAFE_ENV = {
    "PORTAL_AUDIT_CHECKPOINT_KEY": ("", "audit.W001"),
    "PORTAL_FIELD_ENCRYPTION_KEYS": ("", "inventory.W001"),
    "PORTAL_METRICS_TOKEN": ("", "portal.W001"),
    # The audit tables' TRUNCATE escape hatch opens in databases named test_* (audit migration 0003).
    "DATABASE_URL": ("postgres://portal_app@db.example.internal:5432/test_portal", "audit.W003"),
}
MALFORMED_ENV = {
    "PORTAL_AUDIT_CHECKPOINT_KEY": ("too-short", "audit.E001"),
    "PORTAL_FIELD_ENCRYPTION_KEYS": ("not-a-fernet-key", "inventory.E001"),
}


@pytest.fixture(scope="module")
def unsafe_env_check() -> subprocess.CompletedProcess[str]:
    return manage("check", "--deploy", "--fail-level", "WARNING",
                  **{name: value for name, (value, _) in UNSAFE_ENV.items()})


@pytest.mark.parametrize("variable", list(UNSAFE_ENV))
def test_check_deploy_warns_about_the_audit_and_encryption_settings(
        unsafe_env_check: subprocess.CompletedProcess[str], variable: str) -> None:
    assert unsafe_env_check.returncode != 0
    assert f"({UNSAFE_ENV[variable][1]})" in unsafe_env_check.stderr, unsafe_env_check.stderr


def test_the_encryption_warning_says_where_the_key_comes_from(
        unsafe_env_check: subprocess.CompletedProcess[str]) -> None:
    assert "derived from DJANGO_SECRET_KEY" in unsafe_env_check.stderr


def test_malformed_audit_and_encryption_keys_are_errors_everywhere() -> None:
    result = manage("check", **{name: value for name, (value, _) in MALFORMED_ENV.items()})
    assert result.returncode != 0
    for _, check_id in MALFORMED_ENV.values():
        assert f"({check_id})" in result.stderr, result.stderr
    assert "too-short" not in result.stderr  # never echo a key
    assert "not-a-fernet-key" not in result.stderr


def test_check_deploy_warns_about_a_guessable_metrics_token() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", PORTAL_METRICS_TOKEN="guessable-tok")
    assert result.returncode != 0
    assert "(portal.W002)" in result.stderr, result.stderr
    assert "guessable-tok" not in result.stderr  # never echo a token


def test_check_deploy_fails_without_django_secure() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", DJANGO_SECURE="false")
    assert result.returncode != 0
    for check_id in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert f"({check_id})" in result.stderr, result.stderr


# What the settings are under that environment, and what the deployment checks say when one of them is weakened
# alone (override_settings inside the production process): each is guarded by a check, not only by this test.
_PROBE = """
import json
import django
from django.conf import settings
from django.core.checks import run_checks
from django.test import Client, override_settings

django.setup()
weakened = {name: value for name, value in json.loads(WEAKENED)}
report = {
    "settings": {name: getattr(settings, name) for name in NAMES},
    "baseline": [m.id for m in run_checks(include_deployment_checks=True)],
    "weakened": {},
}
for name, value in weakened.items():
    with override_settings(**{name: value}):
        report["weakened"][name] = [m.id for m in run_checks(include_deployment_checks=True)]
client = Client()
plain = client.get("/static/portal.css", HTTP_HOST="portal.example.com")
tls = client.get("/static/portal.css", HTTP_HOST="portal.example.com", HTTP_X_FORWARDED_PROTO="https")
report["static"] = {
    "plain": [plain.status_code, plain.get("Location", "")],
    "tls": [tls.status_code, tls.get("Strict-Transport-Security", "")],
}
print(json.dumps(report, default=list))
"""
NAMES = ["DEBUG", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD",
         "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SESSION_COOKIE_HTTPONLY", "SECURE_SSL_REDIRECT",
         "SECURE_PROXY_SSL_HEADER", "SECURE_CONTENT_TYPE_NOSNIFF", "SECURE_REFERRER_POLICY",
         "SECURE_CROSS_ORIGIN_OPENER_POLICY", "X_FRAME_OPTIONS", "SILENCED_SYSTEM_CHECKS", "ALLOWED_HOSTS",
         "CSRF_TRUSTED_ORIGINS", "MIDDLEWARE"]
WEAKENED = [
    ("SECURE_HSTS_SECONDS", 0, "security.W004"),
    ("SESSION_COOKIE_SECURE", False, "security.W012"),
    ("CSRF_COOKIE_SECURE", False, "security.W016"),
    ("SECURE_SSL_REDIRECT", False, "security.W008"),
    ("SECURE_HSTS_INCLUDE_SUBDOMAINS", False, "security.W005"),
    ("SECURE_HSTS_PRELOAD", False, "security.W021"),
    ("SESSION_COOKIE_HTTPONLY", False, "security.W015"),
    ("X_FRAME_OPTIONS", "SAMEORIGIN", "security.W019"),
    ("SECURE_CONTENT_TYPE_NOSNIFF", False, "security.W006"),
    ("DEBUG", True, "security.W018"),
]


@pytest.fixture(scope="module")
def production() -> dict[str, Any]:
    code = f"NAMES = {NAMES!r}\nWEAKENED = {json.dumps(json.dumps([[n, v] for n, v, _ in WEAKENED]))}\n{_PROBE}"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env=production_env())
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_security_settings_under_the_pods_environment(production: dict[str, Any]) -> None:
    values = production["settings"]
    assert values["DEBUG"] is False
    assert values["SECURE_HSTS_SECONDS"] >= ONE_YEAR
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] is True
    assert values["SECURE_HSTS_PRELOAD"] is True
    assert values["SESSION_COOKIE_SECURE"] is True
    assert values["CSRF_COOKIE_SECURE"] is True
    assert values["SESSION_COOKIE_HTTPONLY"] is True
    assert values["SECURE_SSL_REDIRECT"] is True
    # TLS ends at the ingress controller, the only peer NetworkPolicy lets reach the web (docs/deploy.md).
    assert values["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert values["SECURE_CONTENT_TYPE_NOSNIFF"] is True
    assert values["SECURE_REFERRER_POLICY"] == "same-origin"
    assert values["SECURE_CROSS_ORIGIN_OPENER_POLICY"] == "same-origin"
    assert values["X_FRAME_OPTIONS"] == "DENY"
    assert values["SILENCED_SYSTEM_CHECKS"] == []
    assert values["ALLOWED_HOSTS"] == ["portal.example.com"]
    assert values["CSRF_TRUSTED_ORIGINS"] == ["https://portal.example.com"]
    assert production["baseline"] == []


@pytest.mark.parametrize(("name", "check_id"), [(name, check_id) for name, _, check_id in WEAKENED],
                         ids=[name for name, _, _ in WEAKENED])
def test_each_setting_weakened_alone_is_reported(production: dict[str, Any], name: str, check_id: str) -> None:
    assert check_id in production["weakened"][name]


def test_middleware_order_for_production(production: dict[str, Any]) -> None:
    middleware = production["settings"]["MIDDLEWARE"]
    # The kubelet probes the pod IP over plain HTTP: the probe middleware answers before anything can refuse it.
    assert middleware[0] == "portal.observability.ProbeMiddleware"
    security = middleware.index("django.middleware.security.SecurityMiddleware")
    # Only middleware that never answers a request itself (request id, latency) may run before the HTTPS redirect
    # and HSTS; anything else placed there would serve plain HTTP.
    assert middleware[:security] == ["portal.observability.ProbeMiddleware", "audit.middleware.AuditContextMiddleware",
                                     "portal.observability.RequestMetricsMiddleware"]
    # WhiteNoise answers static files itself: right after SecurityMiddleware, as its documentation asks.
    assert middleware[security + 1] == "whitenoise.middleware.WhiteNoiseMiddleware"
    order = [middleware.index(name) for name in (
        "django.contrib.sessions.middleware.SessionMiddleware",
        "django.middleware.csrf.CsrfViewMiddleware",
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "django.contrib.messages.middleware.MessageMiddleware",
    )]
    assert order == sorted(order)
    assert "django.middleware.clickjacking.XFrameOptionsMiddleware" in middleware


def test_static_files_are_redirected_to_https_and_carry_hsts(production: dict[str, Any]) -> None:
    """WhiteNoise behind SecurityMiddleware: a static file over plain HTTP is redirected, over TLS it carries HSTS."""
    assert production["static"]["plain"] == [301, "https://portal.example.com/static/portal.css"]
    status, hsts = production["static"]["tls"]
    assert status == 200
    assert hsts == f"max-age={ONE_YEAR}; includeSubDomains; preload"
