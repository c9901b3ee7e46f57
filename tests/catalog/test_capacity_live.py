"""End to end on real Celery: a sync batch that changes devices triggers the (debounced) capacity recomputation."""

from __future__ import annotations

import copy
import time

import pytest

from catalog.models import CapacitySample, OfferingCapacity
from tests.catalog.factories import OfferingFactory
from tests.inventory.conftest import (  # noqa: F401 - fixtures
    clean_redis,
    cluster,
    sim,
    spawn,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def fast_debounce(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORTAL_CAPACITY_DEBOUNCE_SECONDS", "1")
    monkeypatch.setenv("PORTAL_CAPACITY_REFRESH_SECONDS", "3600")  # only the sync trigger may recompute


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_capacity_follows_the_cluster(sim, cluster, fast_debounce, spawn) -> None:  # noqa: F811
    offering = OfferingFactory(slug="t4", unit_kind="time-slicing", resource_name="nvidia.com/gpu",
                               node_selector={"nvidia.com/gpu.product": "Tesla-T4-SHARED"})
    spawn("worker", "w1")
    spawn("beat", "beat")

    def figures() -> OfferingCapacity | None:
        return OfferingCapacity.objects.filter(offering=offering, cluster=cluster).first()

    initial = _wait_for(figures, 90, "the first capacity figures")
    assert (initial.total_units, initial.held) == (32, 7)

    # A new pod takes one replica on the empty T4 node.
    template = next(p for p in sim.store.objects("pods") if p["metadata"]["name"].startswith("triton-t4"))
    pod = copy.deepcopy(template)
    pod["metadata"] = {"name": "triton-t4-extra", "namespace": template["metadata"]["namespace"]}
    pod["spec"]["nodeName"] = "t4-shared-001"
    sim.store.create("pods", pod)

    updated = _wait_for(lambda: (f := figures()) and f.held == 8 and f, 60, "held to become 8")
    assert updated.free == 24
    assert updated.computed_at > initial.computed_at
    assert CapacitySample.objects.filter(offering=offering, cluster=cluster).count() == 1
