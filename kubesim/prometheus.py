"""Debian's `prometheus` scraping the simulator's dcgm-exporter endpoints: for tests, the demo and benchmarks.

The config (written to a temporary directory) has one file_sd job, `dcgm-exporter`, whose targets are the
simulator's GPU nodes (`/dcgm/<node>/metrics`), each labelled with the portal cluster name. History can be
backfilled before start with `promtool tsdb create-blocks-from openmetrics` (`backfill`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml


class PrometheusUnavailableError(RuntimeError):
    pass


def installed() -> bool:
    return shutil.which("prometheus") is not None and shutil.which("promtool") is not None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Prometheus:
    """One Prometheus process on an ephemeral port, its data and config under `workdir`."""

    def __init__(self, workdir: str | Path | None = None, *, scrape_interval: str = "15s", host: str = "127.0.0.1",
                 port: int = 0, retention: str = "2d") -> None:
        if not installed():
            raise PrometheusUnavailableError("prometheus/promtool not found: apt-get install prometheus")
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="kubesim-prom-")
        self.workdir = Path(workdir or (self._tmp.name if self._tmp is not None else ""))
        self.data = self.workdir / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.scrape_interval = scrape_interval
        self.host = host
        self.port = port
        self.retention = retention
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def write_targets(self, targets: list[dict[str, Any]], cluster: str) -> None:
        """file_sd targets (e.g. `Simulator.dcgm_targets()`), each labelled `cluster=<cluster>`; Prometheus
        re-reads the file by itself, so a running instance follows node churn."""
        entries = [{"targets": t["targets"], "labels": {**t.get("labels", {}), "cluster": cluster}} for t in targets]
        tmp = self.workdir / "targets.json.tmp"
        tmp.write_text(json.dumps(entries))
        os.replace(tmp, self.workdir / "targets.json")

    def _config(self) -> Path:
        config = {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_interval},
            "scrape_configs": [{
                "job_name": "dcgm-exporter",
                "honor_labels": True,
                "file_sd_configs": [{"files": [str(self.workdir / "targets.json")], "refresh_interval": "5s"}],
            }],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def backfill(self, openmetrics: str | Path) -> None:
        """Turn an OpenMetrics file (samples with timestamps, `# EOF` at the end) into TSDB blocks."""
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(self.data)],
                       check=True, capture_output=True, timeout=1800)

    def start(self, timeout: float = 30.0) -> Prometheus:
        if not (self.workdir / "targets.json").exists():
            self.write_targets([], "")
        self.port = self.port or _free_port(self.host)
        log = open(self.workdir / "prometheus.log", "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self._config()}", f"--storage.tsdb.path={self.data}",
             f"--web.listen-address={self.host}:{self.port}", f"--storage.tsdb.retention.time={self.retention}",
             "--web.enable-lifecycle", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PrometheusUnavailableError(f"prometheus exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:  # noqa: S310 - local URL
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise PrometheusUnavailableError(f"prometheus not ready after {timeout}s: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self.workdir / "prometheus.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def pause(self) -> None:
        """SIGSTOP: the port stays open but nothing answers (a hung Prometheus)."""
        if self.proc:
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc:
            os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def openmetrics_history(sim: Any, start: float, end: float, step: float, path: str | Path,
                        cluster: str, nodes: list[str] | None = None, instance: str | None = None) -> int:
    """Write the simulator's exporter output for [start, end) every `step` seconds as OpenMetrics with timestamps
    and the scrape's target labels (`cluster`, `node`, `job`, `instance`), for `Prometheus.backfill`. Returns the
    number of samples."""
    nodes = sim.telemetry.gpu_nodes() if nodes is None else nodes
    instance = instance or f"{sim.host}:{sim.port}"
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        # OpenMetrics wants each metric family contiguous: one pass per family over all times and nodes
        families: dict[str, list[str]] = {}
        units = {node: sim.telemetry.units(node) for node in nodes}
        t = start
        while t < end:
            for node in nodes:
                extra = f',cluster="{cluster}",node="{node}",job="dcgm-exporter",instance="{instance}"'
                body = sim.telemetry.render(node, t, timestamps=True, units=units[node]) or ""
                for line in body.splitlines():
                    name, _, rest = line.partition("{")
                    families.setdefault(name, []).append(f"{name}{{{rest.replace('}', extra + '}', 1)}")
            t += step
        for name, lines in families.items():
            kind = "counter" if name.endswith(("_TOTAL", "CONSUMPTION")) else "gauge"
            out.write(f"# TYPE {name} {'unknown' if kind == 'counter' else kind}\n")
            out.write("\n".join(lines))
            out.write("\n")
            count += len(lines)
        out.write("# EOF\n")
    return count
