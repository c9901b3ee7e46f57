"""docker-compose.yml runs the same stack as the Kubernetes deployment: same image, same commands and queues, same
environment variable names, the same hardening. Compared on `docker-compose config` (anchors and merges resolved)
and the rendered base kustomization."""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.tools import require_tool

from .conftest import KUSTOMIZE, ROOT, TMP, Doc, command, container, of_kind, workloads

COMPOSE_ONLY = {"postgres", "redis", "kubesim", "setup"}  # the datastores, the simulator, and its registration
# Variables read by Django or a library rather than by portal/settings. (PROMETHEUS_MULTIPROC_DIR is not one: the web
# sets it on gunicorn's command line, so the workers sharing this environment stay out of multiprocess mode.)
NOT_SETTINGS = {"DJANGO_SETTINGS_MODULE"}


def _compose(*args: str, secret: bool = True) -> subprocess.CompletedProcess[str]:
    compose = require_tool("docker-compose")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PORTAL_", "POSTGRES_"))}
    if secret:
        env["DJANGO_SECRET_KEY"] = "compose-check"
    return subprocess.run([compose, "-f", "docker-compose.yml", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    result = _compose("config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)["services"]


@pytest.fixture(scope="module")
def portal_services(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if name not in COMPOSE_ONLY}


def test_compose_file_is_valid_and_needs_a_secret_key() -> None:
    result = _compose("config", "-q")
    assert result.returncode == 0, result.stderr
    missing = _compose("config", "-q", secret=False)
    assert missing.returncode != 0, "no default secret key, ever"
    assert "DJANGO_SECRET_KEY" in missing.stderr


def test_compose_runs_every_workload_of_the_deployment_with_the_same_image_and_command(
    base: list[Doc], portal_services: dict[str, Any]
) -> None:
    deployed = {w["metadata"]["name"]: w for w in workloads(base)}
    assert set(portal_services) == set(deployed)
    for name, workload in deployed.items():
        service = portal_services[name]
        assert service["command"] == command(workload), name
        assert service["image"] == container(workload)["image"], name


def test_compose_workers_consume_the_same_queues(base: list[Doc], portal_services: dict[str, Any]) -> None:
    def queues(argv: list[str]) -> list[str]:
        return argv[argv.index("-Q") + 1].split(",") if "-Q" in argv else []

    compose_queues = sorted(q for s in portal_services.values() for q in queues(s["command"]))
    deployed_queues = sorted(q for d in of_kind(base, "Deployment") for q in queues(command(d)))
    assert compose_queues == deployed_queues == ["default", "watch", "webhooks"]


def _settings_env_names() -> set[str]:
    """Every environment variable portal/settings reads (env("X"), env.int("X", ...), Env().str("X", ...))."""
    names: set[str] = set()
    for path in (ROOT / "portal" / "settings").glob("*.py"):
        names |= set(re.findall(r'(?:env|Env\(\))(?:\.\w+)?\(\s*"([A-Z][A-Z0-9_]*)"', path.read_text()))
    return names


def test_compose_and_kubernetes_set_the_same_environment_variables(
    base: list[Doc], portal_services: dict[str, Any]
) -> None:
    config = of_kind(base, "ConfigMap")[0]["data"]
    secrets_example = (KUSTOMIZE / "overlays" / "example" / "secrets.env.example").read_text()
    secret_names = {line.split("=", 1)[0] for line in secrets_example.splitlines() if line and not line.startswith("#")}
    deployed = set(config) | secret_names
    assert not set(config) & secret_names, "a variable is either a setting or a secret"
    for name, service in portal_services.items():
        assert set(service["environment"]) == deployed, name
    # Every name is one the settings actually read (a typo would be silently ignored at run time).
    assert deployed - _settings_env_names() == NOT_SETTINGS
    assert {"DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL"} <= secret_names
    assert config["DJANGO_SETTINGS_MODULE"] == "portal.settings.base"


def test_compose_containers_are_hardened_like_the_pods(base: list[Doc], portal_services: dict[str, Any]) -> None:
    pod = workloads(base)[0]["spec"]["template"]["spec"]["securityContext"]
    for name, service in portal_services.items():
        assert service["user"] == f"{pod['runAsUser']}:{pod['runAsGroup']}", name
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert TMP in service["tmpfs"], name
        assert "no-new-privileges:true" in service["security_opt"], name


def test_migrations_run_before_everything_else(portal_services: dict[str, Any], services: dict[str, Any]) -> None:
    migrate = portal_services["migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name, service in portal_services.items():
        if name != "migrate":
            assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
    assert services["setup"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "--maxmemory-policy" in services["redis"]["command"], "a broker must never evict (docs/deploy.md)"


def test_only_the_migration_connects_as_the_table_owner(portal_services: dict[str, Any],
                                                         services: dict[str, Any]) -> None:
    """Like the Kubernetes deployment: the migrate service connects as the owner (the postgres image's user), every
    other process as the application role the init script creates, which owns no table."""
    owner = services["postgres"]["environment"]["POSTGRES_USER"]
    for name, service in portal_services.items():
        user = urlsplit(service["environment"]["DATABASE_URL"]).username
        expected = owner if name == "migrate" else service["environment"]["PORTAL_DATABASE_APP_ROLE"]
        assert user == expected, name
    assert owner != portal_services["web"]["environment"]["PORTAL_DATABASE_APP_ROLE"]
    init = [volume for volume in services["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in str(volume)]
    assert len(init) == 1
    script = (ROOT / "deploy" / "compose" / "postgres-app-role.sh").read_text()
    assert f"CREATE ROLE {portal_services['web']['environment']['PORTAL_DATABASE_APP_ROLE']} LOGIN" in script
