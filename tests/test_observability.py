"""Observability: /metrics (request latency and fleet metrics from the synced demo), /healthz, /readyz (database,
Redis, per-cluster freshness), JSON logs with the request id, and secrets never in the logs."""

from __future__ import annotations

import io
import json
import logging

import pytest
import yaml
from django.test import override_settings

from inventory.services.clusters import cluster_register
from portal.models import QuotaRequest


def _metric_lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name)]


SCRAPE = {"HTTP_AUTHORIZATION": "Bearer scrape-secret"}


@pytest.mark.slow
def test_metrics_cover_the_fleet(client, live_demo, admin_user, settings) -> None:
    settings.PORTAL_METRICS_TOKEN = "scrape-secret"
    client.force_login(admin_user)
    client.get("/catalog/")  # one request to time
    text = client.get("/metrics", **SCRAPE).content.decode()
    assert _metric_lines(text, 'portal_http_request_duration_seconds_count{method="GET",route="catalog/"')
    lag = _metric_lines(text, 'portal_sync_lag_seconds{cluster="demo",kind="pods"}')
    assert lag
    assert float(lag[0].split()[-1]) >= 0
    assert _metric_lines(text, 'portal_objects{cluster="demo",kind="nodes"} 18.0')
    assert _metric_lines(text, 'portal_sync_relists_total{cluster="demo",kind="nodes"}')
    assert _metric_lines(text, 'portal_pending_accelerator_pods{cluster="demo"')  # the demo has pending pods
    assert _metric_lines(text, 'portal_unhealthy_devices{cluster="demo"}')
    assert _metric_lines(text, 'portal_claim_allocation_latency_seconds_count{cluster="demo"}')
    for name in ("portal_quota_requests", "portal_grants", "portal_open_violations", "portal_webhook_deliveries"):
        assert f"# TYPE {name} gauge" in text


def test_metrics_token(client, settings, db) -> None:
    settings.PORTAL_METRICS_TOKEN = "scrape-secret"
    refused = client.get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret-and-more").status_code == 401
    assert client.get("/metrics", **SCRAPE).status_code == 200


def test_metrics_are_closed_without_a_configured_token(client, settings, admin_user) -> None:
    settings.PORTAL_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403
    client.force_login(admin_user)  # not even for a signed-in admin: metrics are for the scraper
    refused = client.get("/metrics")
    assert refused.status_code == 403
    assert b"PORTAL_METRICS_TOKEN" in refused.content


def test_health_and_readiness(client, db) -> None:
    assert client.get("/healthz").content == b"ok\n"
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["database"] == "ok"
    assert ready.json()["redis"] == "ok"
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing listens there
        down = client.get("/readyz")
    assert down.status_code == 503
    assert down.json()["redis"] != "ok"


def test_readiness_reports_stale_clusters_and_fails_when_strict(client, db) -> None:
    cluster_register(name="quiet", kubeconfig=_kubeconfig("unused"))  # never synced: not fresh
    body = client.get("/readyz").json()
    assert body["clusters"] == {"quiet": {"age_seconds": None, "fresh": False}}
    assert client.get("/readyz").status_code == 200  # the web still serves what it has
    assert client.get("/readyz", {"strict": "1"}).status_code == 503


def _kubeconfig(token: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    })


def test_json_logs_carry_the_request_id_and_never_a_secret(client, db, admin_user) -> None:
    from django.conf import settings as django_settings

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    formatter_config = django_settings.LOGGING["formatters"]["json"]
    from pythonjsonlogger.json import JsonFormatter

    handler.setFormatter(JsonFormatter(formatter_config["format"]))
    # The filters exactly as the console handler is configured (request id, secrets).
    from django.utils.module_loading import import_string

    for name in django_settings.LOGGING["handlers"]["console"]["filters"]:
        handler.addFilter(import_string(django_settings.LOGGING["filters"][name]["()"])())
    assert {type(f).__name__ for f in handler.filters} == {"RequestIdFilter", "ClientErrorFilter",
                                                            "RedactSecretsFilter"}
    root = logging.getLogger()
    root.handlers.insert(0, handler)  # first: nothing else has touched the records it sees
    previous = root.level
    root.setLevel(logging.DEBUG)
    secret = "sekret-bearer-0123456789"
    try:
        cluster = cluster_register(name="remote", kubeconfig=_kubeconfig(secret))
        from inventory.services.clients import client_for

        kube = client_for(cluster)
        try:
            with pytest.raises(Exception):  # noqa: B017, PT011 - unreachable: whatever the client raises
                kube.server_version()
        finally:
            kube.close()
        client.force_login(admin_user)
        client.get("/api/v1/clusters/", HTTP_X_REQUEST_ID="req-test-42")
        logging.getLogger("portal.test").warning("kubeconfig was %s", _kubeconfig(secret))
        QuotaRequest.objects.count()
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
    output = stream.getvalue()
    assert output
    assert secret not in output
    records = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert all("request_id" in r and "levelname" in r for r in records)
    assert any(r["request_id"] == "req-test-42" for r in records)


def test_a_refused_request_logs_one_line_and_a_server_error_its_traceback() -> None:
    """Django logs PermissionDenied with its traceback; the console handler keeps the line and drops the traceback
    for client errors (4xx), and keeps it for server errors."""
    from portal.observability import ClientErrorFilter

    def record(name: str, status: int) -> logging.LogRecord:
        try:
            raise PermissionError("denied")
        except PermissionError:
            import sys

            return logging.LogRecord(name, logging.WARNING, __file__, 1, "Forbidden (Permission denied): %s",
                                     ("/audit/",), sys.exc_info())

    forbidden = record("django.request", 403)
    forbidden.status_code = 403
    crashed = record("django.request", 500)
    crashed.status_code = 500
    other = record("portal.quota", 403)
    other.status_code = 403
    for item in (forbidden, crashed, other):
        assert ClientErrorFilter().filter(item)
    assert forbidden.exc_info is None
    assert "Traceback" not in logging.Formatter().format(forbidden)
    assert crashed.exc_info is not None
    assert other.exc_info is not None  # only Django's request/security loggers are touched
