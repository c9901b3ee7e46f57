"""What the web's probes (deploy/kustomize/base/web.yaml) need from the application: /healthz and /readyz answer 200
to the kubelet's request as it is sent — plain HTTP, `Host: <pod IP>:8000`, no X-Forwarded-Proto — under production
settings (ALLOWED_HOSTS the public name only, SSL redirect on). A health view behind the host check or the HTTPS
redirect would answer 400 or 301 and keep every pod out of service (portal.observability.ProbeMiddleware answers
them first)."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

PRODUCTION = {"ALLOWED_HOSTS": ["portal.example.com"], "SECURE_SSL_REDIRECT": True, "DEBUG": False}


@pytest.mark.django_db  # /readyz checks the database
@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probe_endpoints_answer_the_kubelet(path: str) -> None:
    with override_settings(**PRODUCTION):
        client = Client()
        through_ingress = client.get(path, HTTP_HOST="portal.example.com", HTTP_X_FORWARDED_PROTO="https")
        assert through_ingress.status_code == 200
        other = client.get("/catalog/", HTTP_HOST="10.244.1.17:8000")
        assert other.status_code == 400  # only the probes bypass the host check
        kubelet = client.get(path, HTTP_HOST="10.244.1.17:8000", HTTP_USER_AGENT="kube-probe/1.34")
        assert kubelet.status_code == 200, f"{path}: {kubelet.status_code} {kubelet.get('Location', '')}"



@pytest.mark.django_db
def test_metrics_answer_the_scraper_only() -> None:
    """/metrics answers the pod-IP request a Prometheus scrape job sends (like the probes), but only with the Secret's
    token; through the Ingress (which routes every path to the web) it is refused like anywhere else."""
    with override_settings(**PRODUCTION, PORTAL_METRICS_TOKEN="from-the-secret"):
        client = Client()
        public = client.get("/metrics", HTTP_HOST="portal.example.com", HTTP_X_FORWARDED_PROTO="https")
        assert public.status_code == 401
        scrape = client.get("/metrics", HTTP_HOST="10.244.1.17:8000", HTTP_AUTHORIZATION="Bearer from-the-secret")
        assert scrape.status_code == 200, scrape.status_code
    with override_settings(**PRODUCTION, PORTAL_METRICS_TOKEN=""):
        assert Client().get("/metrics", HTTP_HOST="10.244.1.17:8000").status_code == 403  # no token: closed
