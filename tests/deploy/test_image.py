"""The Dockerfile and .dockerignore: multi-stage, non-root with a fixed uid, no secrets, no HEALTHCHECK, the web
command of the deployment. (No Docker engine on these machines: the file is checked, not built.)"""

from __future__ import annotations

import re

from .conftest import ROOT, Doc, command, named

DOCKERFILE = (ROOT / "Dockerfile").read_text()
INSTRUCTIONS = [line for line in re.sub(r"\\\n", " ", DOCKERFILE).splitlines()
                if line.strip() and not line.lstrip().startswith("#")]


def _instructions(keyword: str) -> list[str]:
    return [line for line in INSTRUCTIONS if line.split()[0].upper() == keyword]


def test_the_image_is_built_in_stages_and_runs_as_a_fixed_non_root_user() -> None:
    stages = _instructions("FROM")
    assert len(stages) == 2
    assert stages[0].endswith("AS build")
    assert stages[1].endswith("AS runtime")
    assert _instructions("USER") == ["USER ${PORTAL_UID}:${PORTAL_UID}"]
    assert re.search(r"^ARG PORTAL_UID=\d+$", DOCKERFILE, re.MULTILINE)
    assert "useradd --system --uid ${PORTAL_UID}" in DOCKERFILE
    assert not _instructions("HEALTHCHECK"), "Kubernetes probes and compose decide health"
    assert "--mount=type=bind,from=build,source=/wheels" in DOCKERFILE, "wheels never become a runtime layer"


def test_no_secret_is_baked_into_the_image() -> None:
    env = " ".join(_instructions("ENV") + _instructions("ARG"))
    assert not re.search(r"SECRET|PASSWORD|TOKEN|DATABASE_URL|REDIS_URL|_KEY", env)
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    # collectstatic's throwaway values live in the build stage only, in the one RUN that needs them.
    runtime = DOCKERFILE.split("AS runtime", 1)[1]
    assert "DJANGO_SECRET_KEY" not in runtime
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert {".env", ".venv", ".git", "var", "tests", "bench/results", ".pytest_cache"} <= set(ignored)


def test_the_default_command_is_the_web_deployments(base: list[Doc]) -> None:
    cmd = _instructions("CMD")
    assert len(cmd) == 1
    argv = re.findall(r'"([^"]*)"', cmd[0])
    assert argv == command(named(base, "Deployment", "web"))
