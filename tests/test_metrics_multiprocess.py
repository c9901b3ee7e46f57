"""/metrics under a real gunicorn with several workers, started the way production starts it (portal/gunicorn_conf.py,
PROMETHEUS_MULTIPROC_DIR given with `--env`): the request-latency samples of every worker are summed; an exited
worker's samples stay in the sum; gunicorn's `child_exit` drops an exited worker's live gauges (what
prometheus_client's `mark_process_dead` guarantees). The server reads the pytest-django test database."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from django.conf import settings
from django.db import connection
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = Path(sys.executable).parent / "gunicorn"
WORKERS = 3
SCRAPE_TOKEN = "multiprocess-scrape-token"
BATCH = 30  # concurrent requests per batch: a sync worker serves one at a time, so they spread over the workers
LATENCY = "portal_http_request_duration_seconds"
LOGIN = {"method": "GET", "route": "login/", "status": "200"}  # timed by RequestMetricsMiddleware (/healthz is not)


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    multiproc: Path
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def workers(self) -> set[int]:
        """The master's child processes, from /proc."""
        children = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.process.pid:
                children.add(int(stat.parent.name))
        return children

    def pids_with(self, prefix: str) -> set[int]:
        """Processes that wrote `<prefix>_<pid>.db` (a histogram file: the worker timed a request)."""
        return {int(path.stem.rsplit("_", 1)[1]) for path in self.multiproc.glob(f"{prefix}_*.db")}

    def get(self, path: str, timeout: float = 30) -> requests.Response:
        # A new connection each time (no session), so that any worker may accept it; the scrape token, as
        # Prometheus sends it (/metrics is closed without it).
        headers = {"Connection": "close", "Authorization": f"Bearer {SCRAPE_TOKEN}"}
        return requests.get(f"{self.url}{path}", headers=headers, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _test_database_url() -> str:
    db = connection.settings_dict  # the test database pytest-django created (its NAME is test_…)
    credentials = quote(db["USER"] or "", safe="") + (f":{quote(db['PASSWORD'], safe='')}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def _wait(condition: Callable[[], bool], what: str, server: Server, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert server.process.poll() is None, f"gunicorn exited while waiting for {what}:\n{server.output()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{server.output()}"
        time.sleep(0.2)


@pytest.fixture
def server(transactional_db: None, tmp_path: Path) -> Iterator[Server]:
    """gunicorn with the production hooks, on a free loopback port. `transactional_db`: the test database with no
    transaction held open by the test, so that the server's connections see it (and it is stopped before the
    database is flushed)."""
    multiproc = tmp_path / "prometheus-multiproc"
    multiproc.mkdir()
    (multiproc / "counter_999999.db").write_bytes(b"a previous run's file, unreadable")  # on_starting removes it
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings.test", DATABASE_URL=_test_database_url(),
               REDIS_URL=settings.REDIS_URL, PYTHONUNBUFFERED="1", PORTAL_METRICS_TOKEN=SCRAPE_TOKEN)
    port = _free_port()
    log = tmp_path / "gunicorn.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(GUNICORN), "portal.wsgi", "--config", "python:portal.gunicorn_conf",
             "--env", f"PROMETHEUS_MULTIPROC_DIR={multiproc}", "--bind", f"127.0.0.1:{port}",
             "--workers", str(WORKERS), "--timeout", "60", "--graceful-timeout", "5", "--no-control-socket"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(process, f"http://127.0.0.1:{port}", multiproc, log)
    try:
        def answers() -> bool:
            try:
                return server.get("/healthz", timeout=5).status_code == 200
            except requests.RequestException:  # not listening yet, or no worker has loaded the application yet
                return False

        _wait(answers, "/healthz", server)
        _wait(lambda: len(server.workers()) == WORKERS, f"{WORKERS} workers", server)
        yield server
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _login_count(server: Server) -> float:
    response = server.get("/metrics")
    assert response.status_code == 200, response.text[:2000]
    counts = [sample.value for family in text_string_to_metric_families(response.text) if family.name == LATENCY
              for sample in family.samples if sample.name == f"{LATENCY}_count" and sample.labels == LOGIN]
    assert len(counts) == 1, response.text[:4000]
    return counts[0]


def _scrape(server: Server, times: int = 6) -> list[float]:
    """Several scrapes on new connections: whichever worker answers, the sum is the same."""
    return [_login_count(server) for _ in range(times)]


def test_metrics_sum_every_gunicorn_workers_samples_and_keep_an_exited_workers(server: Server) -> None:
    assert not (server.multiproc / "counter_999999.db").exists(), "on_starting empties the directory"

    # Concurrent batches of login pages until at least two workers have served some (usually the first batch).
    sent = 0
    with ThreadPoolExecutor(max_workers=8) as pool:
        while len(server.pids_with("histogram")) < 2 and sent < 10 * BATCH:
            statuses = list(pool.map(lambda _: server.get("/login/").status_code, range(BATCH)))
            assert statuses == [200] * BATCH
            sent += BATCH
    served = server.pids_with("histogram")  # before any scrape: only the login pages were timed
    assert len(served) >= 2, f"the requests never reached a second worker: {served}"
    assert served <= server.workers()

    assert _scrape(server) == [sent] * 6

    # A live gauge of one worker, as a `Gauge(..., multiprocess_mode="livesum")` in that worker would write it.
    victim = min(served)
    gauge = MmapedDict(str(server.multiproc / f"gauge_livesum_{victim}.db"))
    gauge.write_value(mmap_key("portal_test_live", "portal_test_live", [], [], "A live gauge."), 1.0, 0.0)
    gauge.close()
    assert "portal_test_live 1.0" in server.get("/metrics").text

    # The worker exits; gunicorn replaces it and its child_exit hook drops the worker's live gauges.
    os.kill(victim, signal.SIGTERM)
    _wait(lambda: victim not in server.workers() and len(server.workers()) == WORKERS, "a replacement worker",
          server)
    _wait(lambda: not (server.multiproc / f"gauge_livesum_{victim}.db").exists(), "child_exit", server, 10)
    assert (server.multiproc / f"histogram_{victim}.db").exists(), "an exited worker's samples are kept"
    assert "portal_test_live" not in server.get("/metrics").text
    assert _scrape(server) == [sent] * 6
