"""Gunicorn configuration for the web: prometheus_client's multiprocess mode across gunicorn's worker processes.

Used as `gunicorn portal.wsgi --config python:portal.gunicorn_conf --env PROMETHEUS_MULTIPROC_DIR=<dir> ...` (the
Dockerfile, deploy/kustomize/base/web.yaml, docker-compose.yml and `make run`). It only adds server hooks: bind,
workers, threads and timeouts stay on the command line, which gunicorn applies after this module anyway.

With PROMETHEUS_MULTIPROC_DIR set, every worker writes its samples to its own files in that directory and /metrics
sums them (portal/observability.py). `--env` puts the variable into the master's environment before `on_starting`
and before any worker imports the application, which is when prometheus_client chooses multiprocess mode (at its
import). So this module must not import prometheus_client at module level: it is loaded before `--env` applies.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def _multiproc_dir() -> str:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def on_starting(server: Any) -> None:
    """In the master, before the first worker forks: create the directory, or empty it of a previous run's files
    (their pids may be reused, and a dead run's counters must not be added to this one's)."""
    path = _multiproc_dir()
    if not path:
        return
    values = sys.modules.get("prometheus_client.values")
    if values is not None and values.ValueClass is values.MutexValue:
        raise RuntimeError("prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR was set: the workers "
                           "would report only their own samples")
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):  # only prometheus_client's files, whatever else shares the directory
        stale.unlink(missing_ok=True)
    server.log.info("Prometheus multiprocess metrics in %s", directory)


def child_exit(server: Any, worker: Any) -> None:
    """In the master, after a worker exited: drop its live gauges (its counters and histograms stay summed)."""
    if not _multiproc_dir():
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
