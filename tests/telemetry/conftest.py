"""Telemetry fixtures: two hours of the demo's dcgm-exporter history (rendered once per session) backfilled into a
real Prometheus next to the synced demo cluster."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubesim import Simulator
from kubesim.prometheus import openmetrics_history

# The two hours before the current one: in the first the small fine-tune is idle, in the second busy.
NOW = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
IDLE_HOUR = NOW - dt.timedelta(hours=2)
BUSY_HOUR = NOW - dt.timedelta(hours=1)
IDLE_POD_PREFIX = "llm-finetune-small-"


@pytest.fixture(scope="session")
def demo_history(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """OpenMetrics files of the demo scenario's exporters for IDLE_HOUR (as the scenario says) and BUSY_HOUR (the
    idle fine-tune working), at the 15 s scrape interval, cluster label `demo`."""
    out = tmp_path_factory.mktemp("dcgm-history")
    with Simulator("demo") as sim:
        first = out / "idle.om"
        openmetrics_history(sim, IDLE_HOUR.timestamp(), BUSY_HOUR.timestamp(), 15, first, cluster="demo")
        sim.telemetry.config.idle_pods.clear()
        sim.telemetry.config.busy_pods.update(
            p["metadata"]["name"] for p in sim.store.objects("pods") if p["metadata"]["name"].startswith(IDLE_POD_PREFIX))
        second = out / "busy.om"
        openmetrics_history(sim, BUSY_HOUR.timestamp(), NOW.timestamp(), 15, second, cluster="demo")
        return [first, second]


@pytest.fixture
def demo_telemetry(transactional_db: None, prometheus: Any, demo_history: list[Path], settings: Any
                   ) -> Iterator[tuple[Any, Any, Any]]:
    """(simulator, cluster, prometheus): the demo synced, its history in a real Prometheus configured as the
    cluster's telemetry source, tenants owning the demo's namespaces."""
    from portal.models import TelemetrySource
    from tests.conftest import live_cluster, make_user
    from tests.portal.factories import give_namespaces

    with live_cluster("demo", name="demo") as (sim, cluster):
        for ns in ("ml-research", "ml-inference", "vision-team", "batch-jobs"):
            give_namespaces(make_user(f"{ns}-member"), cluster, ns, tenant_slug=ns)
        prom = prometheus(backfill=demo_history)
        TelemetrySource.objects.create(cluster=cluster, prometheus_url=prom.url)
        yield sim, cluster, prom


def refresh_from_idle_hour(cluster: Any, now: dt.datetime) -> dict[str, Any]:
    """The telemetry refresh at `now`, rolling up from IDLE_HOUR (the first hour of the backfilled history)."""
    from portal.models import TelemetrySource
    from portal.telemetry.services import telemetry_refresh_cluster

    source = TelemetrySource.objects.get(cluster=cluster)
    if source.rolled_up_to is None:
        source.rolled_up_to = IDLE_HOUR
        source.save(update_fields=["rolled_up_to"])
    return telemetry_refresh_cluster(cluster, now=now)
