"""Observability: Prometheus `/metrics`, `/healthz`, `/readyz`, and JSON logs that carry the request id.

Metrics come from two places. Request latency is measured in-process by `RequestMetricsMiddleware`; under gunicorn
the web sets PROMETHEUS_MULTIPROC_DIR (portal/gunicorn_conf.py), each worker writes its samples to files there, and
/metrics sums those of every worker, live or exited. Everything about the fleet is read from the database at scrape
time by `PortalCollector` — a handful of aggregate queries — so every web replica reports the same numbers whichever
process did the work:

- sync lag per cluster and kind (now minus the last watch event or bookmark), relists and events applied (counters);
- mirrored objects per kind; pending accelerator pods by reason; claim allocation latency (creation → allocation,
  recent live claims); unhealthy devices;
- quota requests and grants by state; open violations by kind; webhook deliveries by status.

`/healthz` answers 200 while the process serves requests (liveness: no dependency checked). `/readyz` checks the
database and Redis and reports each cluster's sync freshness; it fails (503) when the database or Redis is down,
and with `?strict=1` also when a cluster's sync is stale.
"""

from __future__ import annotations

import datetime as dt
import hmac
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import REGISTRY, Collector

logger = logging.getLogger(__name__)

REQUEST_LATENCY = Histogram(
    "portal_http_request_duration_seconds", "Time to answer an HTTP request.", ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
LATENCY_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


access_logger = logging.getLogger("portal.access")


class RequestMetricsMiddleware:
    """Times every request (labelled by the matched route, never the raw path: unbounded cardinality) and writes one
    access log line with the request id (placed inside AuditContextMiddleware, which sets it)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = match.route if match is not None and match.route else "unmatched"
        seconds = time.perf_counter() - started
        REQUEST_LATENCY.labels(request.method or "", route[:100], str(response.status_code)).observe(seconds)
        access_logger.info("%s %s %s %.1fms", request.method, route[:100], response.status_code, seconds * 1000)
        return response


class PortalCollector(Collector):
    """Fleet metrics read from the database at scrape time."""

    def collect(self) -> Iterator[Any]:
        from inventory.kinds import MODELS
        from inventory.models import Device, Pod, SyncState
        from portal.models import Grant, QuotaRequest, Violation

        now = timezone.now()
        lag = GaugeMetricFamily("portal_sync_lag_seconds", "Seconds since the last watch event or bookmark applied.",
                                labels=["cluster", "kind"])
        relists = CounterMetricFamily("portal_sync_relists", "Full listings (initial, 410 Gone, restarts).",
                                      labels=["cluster", "kind"])
        events = CounterMetricFamily("portal_sync_events_applied", "Watch events applied.", labels=["cluster", "kind"])
        errors = GaugeMetricFamily("portal_sync_error", "1 while the (cluster, kind) sync is in error.",
                                   labels=["cluster", "kind"])
        for state in SyncState.objects.select_related("cluster").only(
                "kind", "last_event_at", "last_success_at", "relists", "events_applied", "phase", "cluster__name"):
            labels = [state.cluster.name, state.kind]
            seen = state.last_event_at or state.last_success_at
            if seen is not None:
                lag.add_metric(labels, max((now - seen).total_seconds(), 0.0))
            relists.add_metric(labels, state.relists)
            events.add_metric(labels, state.events_applied)
            errors.add_metric(labels, 1.0 if state.phase == SyncState.Phase.ERROR else 0.0)
        yield from (lag, relists, events, errors)

        objects = GaugeMetricFamily("portal_objects", "Live mirrored objects per kind.", labels=["cluster", "kind"])
        for kind, model in MODELS.items():
            for cluster_name, count in model.objects.live().values_list("cluster__name").annotate(n=Count("pk")):
                objects.add_metric([cluster_name, kind], count)
        yield objects

        pending = GaugeMetricFamily("portal_pending_accelerator_pods", "Accelerator pods waiting to be scheduled, "
                                    "by the layer that blocks them.", labels=["cluster", "reason"])
        for cluster_name, reason, count in Pod.objects.live().filter(
                accelerator=True, stage="pending-unscheduled").values_list("cluster__name", "stage_layer").annotate(
                n=Count("pk")):
            pending.add_metric([cluster_name, reason or "unknown"], count)
        yield pending

        unhealthy = GaugeMetricFamily("portal_unhealthy_devices", "Unhealthy accelerator units.", labels=["cluster"])
        for cluster_name, count in Device.objects.values_list("cluster__name").annotate(n=Sum("unhealthy")):
            unhealthy.add_metric([cluster_name], count or 0)
        yield unhealthy

        yield self._allocation_latency(now)

        quota = GaugeMetricFamily("portal_quota_requests", "Quota requests by state.", labels=["state"])
        for state, count in QuotaRequest.objects.values_list("state").annotate(n=Count("pk")):
            quota.add_metric([state], count)
        grants = GaugeMetricFamily("portal_grants", "Exception grants by kind and state.", labels=["kind", "state"])
        for kind, state, count in Grant.objects.values_list("kind", "state").annotate(n=Count("pk")):
            grants.add_metric([kind, state], count)
        violations = GaugeMetricFamily("portal_open_violations", "Open security violations by kind.",
                                       labels=["kind"])
        for kind, count in Violation.objects.filter(resolved_at__isnull=True).values_list("kind").annotate(
                n=Count("pk")):
            violations.add_metric([kind], count)
        yield from (quota, grants, violations)
        yield self._idle_units()
        yield from self._webhooks()

    @staticmethod
    def _idle_units() -> GaugeMetricFamily:
        """Allocated-but-idle DCGM entities (cards or MIG instances) right now, from the telemetry findings."""
        from portal.models import TelemetryFinding

        family = GaugeMetricFamily("portal_idle_allocated_units", "Allocated accelerator units (cards or MIG "
                                   "instances) idle per the telemetry findings.", labels=["tenant", "offering"])
        for tenant, offering, count in TelemetryFinding.objects.filter(kind=TelemetryFinding.Kind.IDLE).values_list(
                "tenant__slug", "offering__slug").annotate(n=Count("pk")):
            family.add_metric([tenant or "", offering or ""], count)
        return family

    @staticmethod
    def _allocation_latency(now: dt.datetime) -> HistogramMetricFamily:
        """Creation → allocationTimestamp of the (at most 5,000) most recently created allocated claims."""
        from inventory.models import ResourceClaim

        family = HistogramMetricFamily("portal_claim_allocation_latency_seconds",
                                       "Seconds from a claim's creation to its allocation (recent live claims).",
                                       labels=["cluster"])
        samples: dict[str, list[float]] = {}
        rows = ResourceClaim.objects.live().filter(allocated=True, k8s_created_at__isnull=False).order_by(
            "-k8s_created_at").values_list("cluster__name", "k8s_created_at", "raw__status")[:5000]
        for cluster_name, created, raw_status in rows:
            allocated = ((raw_status or {}).get("allocation") or {}).get("allocationTimestamp") \
                if isinstance(raw_status, dict) else None
            parsed = _parse_time(allocated)
            if parsed is not None and created is not None:
                samples.setdefault(cluster_name, []).append(max((parsed - created).total_seconds(), 0.0))
        for cluster_name, values in samples.items():
            buckets, running = [], 0
            for bound in LATENCY_BUCKETS:
                running = sum(1 for v in values if v <= bound)
                buckets.append((str(float(bound)), running))
            buckets.append(("+Inf", len(values)))
            family.add_metric([cluster_name], buckets, sum(values))
        return family

    @staticmethod
    def _webhooks() -> Iterator[Any]:
        try:
            from integrations.models import WebhookDelivery
        except ImportError:  # the integrations app is optional in a stripped-down deployment
            return
        family = GaugeMetricFamily("portal_webhook_deliveries", "Webhook deliveries by status.", labels=["status"])
        for status, count in WebhookDelivery.objects.values_list("status").annotate(n=Count("pk")):
            family.add_metric([status], count)
        yield family


def _parse_time(value: Any) -> dt.datetime | None:
    from django.utils.dateparse import parse_datetime

    return parse_datetime(value) if isinstance(value, str) else None


_registry: CollectorRegistry | None = None
_registry_lock = threading.Lock()


def registry() -> CollectorRegistry:
    """What /metrics exports. With PROMETHEUS_MULTIPROC_DIR set (gunicorn's workers, portal/gunicorn_conf.py): the
    samples of every process that wrote to that directory, summed, plus the fleet metrics once. Otherwise this
    process's default registry plus the fleet metrics."""
    global _registry
    with _registry_lock:
        if _registry is None:
            if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                _registry = CollectorRegistry()
                multiprocess.MultiProcessCollector(_registry)
            else:
                _registry = REGISTRY
            _registry.register(PortalCollector())
        return _registry


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format, for scrapers that send `Authorization: Bearer <PORTAL_METRICS_TOKEN>`.

    Closed by default: without a configured token /metrics answers 403 to everybody (the fleet's metrics name
    clusters, tenants' pending pods and open violations, and the endpoint is on the same listener as the pages)."""
    token = getattr(settings, "PORTAL_METRICS_TOKEN", "") or ""
    if not token:
        return HttpResponse("metrics are off: set PORTAL_METRICS_TOKEN and scrape with it (docs/observability.md)\n",
                            status=403, content_type="text/plain")
    sent = request.headers.get("Authorization", "")
    if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        response = HttpResponse("metrics need the scrape token\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)


def healthz_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok\n", content_type="text/plain")


def _database_ok() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return ""
    except Exception as exc:  # noqa: BLE001 - any failure makes the replica unready
        return f"{type(exc).__name__}"


def _redis_ok() -> str:
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        return ""
    try:
        import redis

        client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
        return ""
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}"


def sync_freshness(now: dt.datetime | None = None) -> dict[str, dict[str, Any]]:
    """Per enabled cluster: the stalest kind's age and whether it is within PORTAL_SYNC_STALE_SECONDS."""
    from inventory.models import Cluster, SyncState

    now = now or timezone.now()
    limit = getattr(settings, "PORTAL_SYNC_STALE_SECONDS", 300)
    stalest: dict[str, float | None] = dict.fromkeys(Cluster.objects.enabled().values_list("name", flat=True))
    for name, event, success in SyncState.objects.filter(cluster__sync_enabled=True).values_list(
            "cluster__name", "last_event_at", "last_success_at"):
        moments = [m for m in (event, success) if m is not None]
        age = (now - max(moments)).total_seconds() if moments else float("inf")
        stalest[name] = age if stalest.get(name) is None else max(stalest[name] or 0.0, age)
    return {name: {"age_seconds": round(age, 1) if age is not None and age != float("inf") else None,
                   "fresh": age is not None and age <= limit} for name, age in stalest.items()}


def readyz_view(request: HttpRequest) -> JsonResponse:
    database, redis_error = _database_ok(), _redis_ok()
    body: dict[str, Any] = {"database": database or "ok", "redis": redis_error or "ok"}
    ready = not database and not redis_error
    if not database:
        body["clusters"] = sync_freshness()
        if request.GET.get("strict") == "1" and not all(c["fresh"] for c in body["clusters"].values()):
            ready = False
    if not ready:
        logger.warning("not ready: database=%s redis=%s", body["database"], body["redis"])
    return JsonResponse({"ready": ready, **body}, status=200 if ready else 503)


class ProbeMiddleware:
    """Answers /healthz, /readyz and /metrics before anything else runs: the kubelet probes, and Prometheus scrapes,
    the pod IP over plain HTTP, which the host check (ALLOWED_HOSTS) and the HTTPS redirect would otherwise refuse.
    /metrics still wants its token (metrics_view). Must be first in MIDDLEWARE."""

    PATHS = {"/healthz": healthz_view, "/readyz": readyz_view, "/metrics": metrics_view}

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = self.PATHS.get(request.path_info.rstrip("/") or "/")
        if view is not None and request.method in ("GET", "HEAD"):
            return view(request)
        return self.get_response(request)


class RequestIdFilter(logging.Filter):
    """Adds the current request id (X-Request-ID, audit/context.py) to every log record."""

    def filter(self, record: logging.LogRecord) -> bool:
        from audit.context import current_context

        record.request_id = current_context().request_id or "-"
        return True


_SECRET_PATTERNS = [
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}"), r"\1[redacted]"),
    (re.compile(r"(?i)((?:token|password|passwd|secret|client-key-data|client-certificate-data|"
                r"certificate-authority-data|authorization)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"), r"\1[redacted]"),
    (re.compile(r"\bap_[A-Za-z0-9]{8}_[A-Za-z0-9_-]{16,}"), "ap_[redacted]"),
]


def redact_secrets(text: str) -> str:
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class ClientErrorFilter(logging.Filter):
    """Django logs a refused request (403 PermissionDenied, 400 SuspiciousOperation) with the exception's traceback:
    a line is enough for what a client did wrong; a traceback is for server errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.name.startswith(("django.request", "django.security")) and isinstance(status, int) and status < 500:
            record.exc_info, record.exc_text = None, None
        return True


class RedactSecretsFilter(logging.Filter):
    """Defence in depth: the code never logs kubeconfigs or tokens, and this filter removes bearer tokens, API
    tokens and kubeconfig credentials from any message (and exception text) that would carry one anyway."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string must not lose the record
            message = str(record.msg)
        cleaned = redact_secrets(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact_secrets(text)
        return True
