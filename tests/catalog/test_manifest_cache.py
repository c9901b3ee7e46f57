"""The per-cluster snapshot/context cache: fresh values reused, expired ones served while one thread rebuilds."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from catalog.services import manifests


def test_stale_value_is_served_while_a_single_rebuild_runs(settings) -> None:
    settings.PORTAL_FEASIBILITY_SNAPSHOT_SECONDS = 3600
    store: dict = {}
    cluster = SimpleNamespace(pk=4242)
    release = threading.Event()
    builds = []

    def build(_cluster):
        builds.append(time.monotonic())
        if len(builds) > 1:
            release.wait(5)
        return len(builds)

    assert manifests._cached(store, cluster, build) == 1
    assert manifests._cached(store, cluster, build) == 1  # fresh: no rebuild
    assert len(builds) == 1
    settings.PORTAL_FEASIBILITY_SNAPSHOT_SECONDS = 0
    assert manifests._cached(store, cluster, build) == 1  # expired: served stale, rebuild started
    assert manifests._cached(store, cluster, build) == 1  # still stale; no second rebuild
    release.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and store[cluster.pk][1] != 2:
        time.sleep(0.01)
    assert store[cluster.pk][1] == 2
    assert len(builds) == 2
