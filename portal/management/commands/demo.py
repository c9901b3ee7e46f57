"""`manage.py demo`: the simulator, a Celery worker and beat, and the web server, wired together.

Started by `make demo` under portal.settings.demo (SQLite under var/, filesystem broker) unless DATABASE_URL /
REDIS_URL point at real services. Ctrl-C stops every process this command started.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from inventory.leases import leases_break
from inventory.models import SyncState

RESTART_LIMIT = 10


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.3)
        return sock.connect_ex((host, port)) == 0


def banner(web_port: int, sim_port: int, kubeconfig: Path) -> str:
    """What a newcomer needs, printed last: where the portal is, every login and where each one starts."""
    from portal.management.commands.demo_users import DEMO_PURPOSE

    width = max(len(name) for name in DEMO_PURPOSE)
    logins = "\n".join(f"  {name:<{width}}  {what}" for name, what in DEMO_PURPOSE.items())
    return (f"\nAccelerator Portal demo: http://127.0.0.1:{web_port}/\n"
            f"Logins (password 'demo'):\n{logins}\n"
            f"Simulator: http://127.0.0.1:{sim_port} (kubectl --kubeconfig {kubeconfig} get nodes)\n"
            "Ctrl-C stops everything.\n")


def _demo_telemetry(var: Path, scenario: str, sim_port: int) -> tuple[Any, str]:
    """Debian's Prometheus scraping the simulator's dcgm-exporter endpoints, with the hour before this one (and
    this one so far) backfilled from the same scenario so the first rollup has a full hour; (None, why) without it."""
    import json
    import shutil
    import urllib.request

    from kubesim import Simulator
    from kubesim.prometheus import Prometheus, installed, openmetrics_history

    if not installed():
        return None, "prometheus is not installed (apt-get install prometheus): this demo runs without telemetry"
    workdir = var / "prometheus"
    shutil.rmtree(workdir, ignore_errors=True)
    prom = Prometheus(workdir)
    now = time.time()
    with Simulator(scenario) as history_sim:
        openmetrics_history(history_sim, (now // 3600 - 1) * 3600, now, 15, workdir / "history.om", cluster="demo",
                            instance=f"127.0.0.1:{sim_port}")
    prom.backfill(workdir / "history.om")
    (workdir / "history.om").unlink()
    with urllib.request.urlopen(f"http://127.0.0.1:{sim_port}/dcgm/targets", timeout=10) as response:
        prom.write_targets(json.loads(response.read()), "demo")
    return prom.start(), ""


class Command(BaseCommand):
    help = "Run the demo: simulator + Celery worker + beat + web server on http://127.0.0.1:8000."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--scenario", default="demo")
        parser.add_argument("--sim-port", type=int, default=int(os.environ.get("KUBESIM_PORT", "6443")))
        parser.add_argument("--web-port", type=int, default=int(os.environ.get("PORTAL_PORT", "8000")))
        parser.add_argument("--churn", default=os.environ.get("KUBESIM_CHURN", "0.5"))

    def _supervise(self, procs: list[subprocess.Popen[bytes]], env: dict[str, str]) -> None:
        """Restart any demo process that exits (a worker that lost Redis, a killed beat), like a service manager
        would; give up when they keep dying (RESTART_LIMIT exits within a minute)."""
        exits: list[float] = []
        while True:
            time.sleep(0.5)
            for i, proc in enumerate(procs):
                code = proc.poll()
                if code is None:
                    continue
                now = time.monotonic()
                exits = [t for t in exits if now - t < 60] + [now]
                if len(exits) > RESTART_LIMIT:
                    raise CommandError(f"demo processes keep exiting ({len(exits)} in a minute); last: {proc.args!r}")
                args = [str(a) for a in proc.args] if isinstance(proc.args, list) else [str(proc.args)]
                self.stderr.write(f"demo: {' '.join(args[:6])} … exited ({code}); restarting it")
                procs[i] = subprocess.Popen(proc.args, env=env, start_new_session=True)
    def _telemetry(self, var: Path, scenario: str, sim_port: int) -> Any:
        """Start Prometheus for the demo cluster and roll the backfilled hour up once (beat does it from then on)."""
        from inventory.models import Cluster
        from portal.models import TelemetrySource
        from portal.telemetry.services import telemetry_refresh_cluster

        try:
            prom, why = _demo_telemetry(var, scenario, sim_port)
        except Exception as exc:  # noqa: BLE001 - the demo runs on without telemetry, saying why
            prom, why = None, f"telemetry unavailable: {exc}"
        cluster = Cluster.objects.get(name="demo")
        if prom is None:
            self.stdout.write(self.style.WARNING(f"Telemetry: {why}."))
            TelemetrySource.objects.update_or_create(cluster=cluster, defaults={
                "prometheus_url": "", "state": TelemetrySource.State.UNCONFIGURED, "message": why})
            return None
        TelemetrySource.objects.update_or_create(cluster=cluster, defaults={"prometheus_url": prom.url,
                                                                            "rolled_up_to": None})
        result = telemetry_refresh_cluster(cluster)
        self.stdout.write(f"Telemetry: Prometheus {prom.url} scraping the simulator's dcgm-exporter endpoints; "
                          f"{result.get('hours', 0)} hour(s) rolled up, state {result['state']}.")
        return prom

    def handle(self, *args: Any, **options: Any) -> None:
        var = Path(settings.VAR_DIR)
        for sub in ("celery-broker", "celery-broker/processed", "celery-broker/control"):
            (var / sub).mkdir(parents=True, exist_ok=True)
        for port in (options["sim_port"], options["web_port"]):
            if _port_open("127.0.0.1", port):
                raise CommandError(f"port {port} is already in use (another demo running?)")
        kubeconfig = var / "kubesim.kubeconfig"
        kubeconfig.unlink(missing_ok=True)
        python, manage = sys.executable, str(Path(settings.BASE_DIR) / "manage.py")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        procs: list[subprocess.Popen[bytes]] = []

        def spawn(*cmd: str) -> None:
            procs.append(subprocess.Popen(cmd, env=env, start_new_session=True))

        def stop_all(*_: object) -> None:
            for proc in reversed(procs):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            for proc in procs:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)

        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        prometheus = None
        try:
            spawn(python, manage, "kubesim", "--scenario", options["scenario"], "--port", str(options["sim_port"]),
                  "--write-kubeconfig", str(kubeconfig), "--churn", str(options["churn"]))
            deadline = time.monotonic() + 60
            while not (kubeconfig.exists() and _port_open("127.0.0.1", options["sim_port"])):
                if time.monotonic() > deadline or procs[0].poll() is not None:
                    raise CommandError("the simulator did not start")
                time.sleep(0.2)
            call_command("demo_users")
            call_command("cluster_add", "demo", "--kubeconfig", str(kubeconfig), "--description", "kubesim demo")
            # A previous demo stopped hard (kill, closed terminal) can leave its watchers' leases behind; no watcher
            # of this demo runs yet and no other demo is up (the ports were free), so they are stale.
            leases_break(SyncState.objects.filter(cluster__name="demo"))
            call_command("sync", "--cluster", "demo", "--once")
            call_command("demo_tenants")  # tenants mapped by the demo's namespace label, member/lead in ml-research
            call_command("catalog_seed")  # curated demo offerings with prices (idempotent)
            call_command("catalog_refresh", "--discover")  # proposals for the rest, and live capacity
            call_command("demo_history")  # 14 days of hourly capacity samples, so the charts show a curve
            prometheus = self._telemetry(var, options["scenario"], options["sim_port"])
            celery = [python, "-m", "celery", "-A", "portal"]
            # Demo machines often run everything as root; Celery's warning about it would bury the banner.
            env["PYTHONWARNINGS"] = "ignore:You're running the worker with superuser privileges"
            # --quiet: no banners, so that the portal's own banner below stays the last thing on the screen
            spawn(*celery, "--quiet", "worker", "-Q", "watch,default,webhooks", "-P", "threads", "-c", "16",
                  "--loglevel", "WARNING", "-n", "demo@%h")
            spawn(*celery, "--quiet", "beat", "--loglevel", "WARNING", "-s", str(var / "celerybeat-schedule"))
            spawn(python, manage, "runserver", f"127.0.0.1:{options['web_port']}", "--noreload", "--skip-checks")
            deadline = time.monotonic() + 60
            while not _port_open("127.0.0.1", options["web_port"]):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise CommandError("the web server did not start")
                time.sleep(0.2)
            self.stdout.write(self.style.SUCCESS(banner(options["web_port"], options["sim_port"], kubeconfig)))
            self._supervise(procs, env)
        except KeyboardInterrupt:
            self.stdout.write("\nstopping…")
        finally:
            stop_all()
            if prometheus is not None:
                prometheus.stop()
