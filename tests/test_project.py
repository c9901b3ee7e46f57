"""Project-level guarantees: fail-fast settings, deploy checks, compose file, secrets never logged, the demo."""

from __future__ import annotations

import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml
from cryptography.fernet import Fernet

from inventory.errors import ClusterConfigError
from inventory.leases import lease_backend
from inventory.models import Cluster, Node
from inventory.services.clients import client_for
from inventory.services.clusters import cluster_register
from inventory.services.sync import cluster_sync_once
from tests.tools import require_tool

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def _env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in {"DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE", "DJANGO_SECURE",
                        "DJANGO_ALLOW_ASYNC_UNSAFE"}}
    env.update(overrides)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_settings_fail_fast_without_a_secret() -> None:
    result = subprocess.run([PY, "manage.py", "check"], cwd=ROOT, capture_output=True, text=True,
                            env=_env(DJANGO_SETTINGS_MODULE="portal.settings.base",
                                     DATABASE_URL="postgres://postgres@127.0.0.1/portal"))
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


@pytest.mark.slow  # Django in a subprocess (about 3 s)
def test_check_deploy_is_clean_under_production_settings() -> None:
    # The audit checkpoint key, the field-encryption keys and the metrics token are part of a production
    # configuration: without them check --deploy warns (audit.W001, inventory.W001, portal.W001;
    # tests/test_deploy_checks.py).
    result = subprocess.run(
        [PY, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT, capture_output=True, text=True,
        env=_env(DJANGO_SETTINGS_MODULE="portal.settings.base", DJANGO_SECRET_KEY=secrets.token_urlsafe(64),
                 DATABASE_URL="postgres://postgres@127.0.0.1/portal", DJANGO_ALLOWED_HOSTS="portal.example.com",
                 PORTAL_AUDIT_CHECKPOINT_KEY=secrets.token_hex(32),
                 PORTAL_FIELD_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
                 PORTAL_METRICS_TOKEN=secrets.token_urlsafe(32)),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_docker_compose_file_is_valid() -> None:
    compose = require_tool("docker-compose")
    result = subprocess.run([compose, "config", "-q"], cwd=ROOT, capture_output=True, text=True,
                            env=_env(DJANGO_SECRET_KEY="compose-check"))
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert {"postgres", "redis", "web", "worker", "beat", "kubesim"} <= set(services)


def test_kubeconfig_secrets_never_reach_the_logs(transactional_db: None, caplog: pytest.LogCaptureFixture) -> None:
    from kubesim import Simulator

    token = "s3cr3t-" + secrets.token_hex(8)
    with Simulator(scenario="demo", port=0) as sim:
        kubeconfig = sim.kubeconfig()
        kubeconfig["users"][0]["user"] = {"token": token}
        caplog.set_level(logging.DEBUG)
        cluster = cluster_register(name="secret", kubeconfig=yaml.safe_dump(kubeconfig))
        client = client_for(cluster)
        backend = lease_backend()
        try:
            cluster_sync_once(cluster_id=cluster.pk, client=client, kinds=("nodes",),
                              lease_for=lambda state: backend.acquire(state, 30))
        finally:
            client.close()
    assert Node.objects.filter(cluster=cluster).exists()
    assert token not in caplog.text
    assert token not in repr(cluster)
    assert token not in str(cluster)
    with pytest.raises(ClusterConfigError) as info:
        cluster_register(name="bad", kubeconfig=f"token: {token}\n: : [")
    assert token not in str(info.value)
    assert not Cluster.objects.filter(name="bad").exists()


def _demo_child(demo_pid: int, role: str) -> int | None:
    """The pid of the demo's Celery `role` (worker or beat) process, if one runs."""
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(demo_pid)], capture_output=True, text=True).stdout
    for line in out.splitlines():
        pid, _, args = line.strip().partition(" ")
        if "celery" in args and f" {role} " in f"{args} ":
            return int(pid)
    return None
def _login(base: str, username: str) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{base}/login/", timeout=10)
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert csrf is not None
    session.post(f"{base}/login/", data={"username": username, "password": "demo",
                                         "csrfmiddlewaretoken": csrf.group(1)},
                 headers={"Referer": f"{base}/login/"}, timeout=10)
    return session


@pytest.mark.slow
def test_demo_starts_and_serves_the_node_list(tmp_path: Path) -> None:
    """`manage.py demo` on embedded defaults (SQLite, filesystem broker): the node list shows the demo fleet."""
    env = _env(DJANGO_SETTINGS_MODULE="portal.settings.demo", PORTAL_VAR_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    sim_port, web_port = _free_port(), _free_port()
    log = (tmp_path / "demo.log").open("wb")
    demo = subprocess.Popen([PY, "manage.py", "demo", "--sim-port", str(sim_port), "--web-port", str(web_port)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{web_port}"
    try:
        session = requests.Session()
        deadline = time.monotonic() + 120
        while True:
            assert demo.poll() is None, (tmp_path / "demo.log").read_text()[-3000:]
            try:
                page = session.get(f"{base}/login/", timeout=5)
                if page.status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):  # not up yet, or slow on a loaded machine
                pass
            assert time.monotonic() < deadline, (tmp_path / "demo.log").read_text()[-3000:]
            time.sleep(0.5)
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert csrf is not None
        session.post(f"{base}/login/", data={"username": "member", "password": "demo",
                                             "csrfmiddlewaretoken": csrf.group(1)},
                     headers={"Referer": f"{base}/login/"}, timeout=10)
        nodes = session.get(f"{base}/inventory/nodes/?extended_resource=nvidia.com/gpu", timeout=10)
        assert nodes.status_code == 200
        from kubesim.scenario import load_scenario

        gpu_nodes = [o["metadata"]["name"] for o in load_scenario("demo") if o["kind"] == "Node"
                     and "nvidia.com/gpu" in o["status"]["capacity"]]
        assert gpu_nodes
        assert all(name in nodes.text for name in gpu_nodes)
        assert "member" in nodes.text  # logged in as the demo user
        output = (tmp_path / "demo.log").read_text()
        assert "Logins (password 'demo')" in output
        # a demo process that dies (the worker here, as a Redis outage once made it) is restarted
        worker = _demo_child(demo.pid, "worker")
        os.killpg(worker, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _demo_child(demo.pid, "worker") in (None, worker):
            assert demo.poll() is None, (tmp_path / "demo.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the killed worker was not restarted"
            time.sleep(0.5)
        assert "exited (-9); restarting it" in (tmp_path / "demo.log").read_text()
        # Telemetry out of the box (Prometheus is a test prerequisite): live utilisation with the idle fine-tune
        # and its idle finding for the member; XID findings for the platform admin.
        assert "Telemetry: Prometheus" in output
        utilization = session.get(f"{base}/utilization/", timeout=30).text
        assert "llm-finetune-small" in utilization
        assert "data-idle" in utilization
        assert 'data-kind="allocated-idle"' in utilization
        admin = _login(base, "admin")
        assert 'data-kind="xid"' in admin.get(f"{base}/utilization/", timeout=30).text
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        log.close()
    # Ctrl-C stopped everything the demo started: both ports close (within seconds on a loaded machine, where the
    # last child may still be exiting when the demo's own process returns).
    deadline = time.monotonic() + 15
    for port in (sim_port, web_port):
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) != 0:
                    break
            assert time.monotonic() < deadline, f"port {port} still open after Ctrl-C"
            time.sleep(0.5)


def test_import_contracts_hold() -> None:
    """.importlinter: layers point one way; only inventory.k8s imports `kubernetes`; kubesim stands alone."""
    result = subprocess.run([str(Path(PY).parent / "lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout


def test_no_missing_migrations() -> None:
    result = subprocess.run([PY, "manage.py", "makemigrations", "--check", "--dry-run"], cwd=ROOT,
                            capture_output=True, text=True, env=_env(DJANGO_SETTINGS_MODULE="portal.settings.test"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_sensitive_data_groups_are_the_platform_roles() -> None:
    from django.conf import settings

    from portal.tenancy.roles import Role

    assert set(settings.PORTAL_SENSITIVE_DATA_GROUPS) == {
        Role.PLATFORM_ADMIN.value, Role.APPROVER.value, Role.SECURITY_APPROVER.value}


def test_readme_first_screen_tells_a_newcomer_everything_and_links_only_inside_the_repository() -> None:
    """The README names the Python the project requires, lists every demo login, and links nothing outside."""
    import tomllib

    from portal.management.commands.demo_users import DEMO_PURPOSE

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = readme[: readme.index("## Layout")]
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    version = re.search(r">=(\d+\.\d+),<", requires)
    assert version is not None
    assert f"Python {version.group(1)}" in first_screen
    missing = [login for login in DEMO_PURPOSE if f"`{login}`" not in first_screen]
    assert not missing, f"demo logins missing from the README's first screen: {missing}"
    for match in re.finditer(r"\]\(([^)#]+)", readme):  # markdown links
        target = match.group(1)
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        resolved = (ROOT / target).resolve()
        assert resolved.is_relative_to(ROOT), f"README links outside the repository: {target}"
        assert resolved.exists(), f"README links to a missing file: {target}"


def test_no_template_has_a_multi_line_comment_tag() -> None:
    """Django's {# #} ends at the line's end: a comment spread over lines is printed into the page."""
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / "templates").rglob("*.html")
                 for line in path.read_text(encoding="utf-8").splitlines() if "{#" in line and "#}" not in line]
    assert not offenders, f"use {{% comment %}} for comments over several lines: {offenders}"
