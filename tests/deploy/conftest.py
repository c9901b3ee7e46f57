"""Rendered deployment manifests for the deploy tests: `kubectl kustomize` of every kustomization under deploy/.

kubectl is required by the suite (`make test` checks for it, scripts/test-prereqs); these tests fail without it.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.tools import require_tool

ROOT = Path(__file__).resolve().parent.parent.parent
KUSTOMIZE = ROOT / "deploy" / "kustomize"
NAMESPACE = "accelerator-portal"
SYSTEM_NAMESPACE = "accelerator-portal-system"
TMP = "/tmp"  # noqa: S108 - the containers' writable path, not a temporary file of the tests

Doc = dict[str, Any]


def kubectl() -> str:
    return require_tool("kubectl")  # it renders the kustomizations


def render(directory: Path) -> list[Doc]:
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="session")
def base() -> list[Doc]:
    return render(KUSTOMIZE / "base")


@pytest.fixture(scope="session")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> list[Doc]:
    """The example overlay, rendered from a copy with each secrets file made from its *.env.example (as an operator
    would), so no secrets file is needed in the repository."""
    copy = tmp_path_factory.mktemp("deploy") / "kustomize"
    shutil.copytree(KUSTOMIZE, copy)
    example = copy / "overlays" / "example"
    for template in example.glob("*.env.example"):
        (example / template.name.removesuffix(".example")).write_text(template.read_text())
    return render(example)


@pytest.fixture(scope="session")
def managed_cluster() -> list[Doc]:
    return render(KUSTOMIZE / "managed-cluster")


@pytest.fixture(scope="session")
def admission_guards() -> list[Doc]:
    return render(KUSTOMIZE / "components" / "admission-guards")


# ------------------------------------------------------------------------------------------------ helpers


def of_kind(docs: list[Doc], *kinds: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] in kinds]


def named(docs: list[Doc], kind: str, name: str, namespace: str | None = None) -> Doc:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name
             and (namespace is None or d["metadata"].get("namespace") == namespace)]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def workloads(docs: list[Doc]) -> list[Doc]:
    """Deployments and Jobs: everything with a pod template."""
    return of_kind(docs, "Deployment", "Job")


def pod_spec(workload: Doc) -> Doc:
    return workload["spec"]["template"]["spec"]


def container(workload: Doc) -> Doc:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, f"{workload['metadata']['name']}: one container per pod"
    return containers[0]


def command(workload: Doc) -> list[str]:
    c = container(workload)
    return [*c.get("command", []), *c.get("args", [])]


def option(argv: list[str], *flags: str) -> str:
    """The value after a command-line flag (`-Q watch`)."""
    for flag in flags:
        if flag in argv:
            return argv[argv.index(flag) + 1]
    raise AssertionError(f"none of {flags} in {argv}")


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """Label selector semantics (matchLabels and matchExpressions)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def template_labels(workload: Doc) -> dict[str, str]:
    return workload["spec"]["template"]["metadata"]["labels"]


def applied_documents(monkeypatch: pytest.MonkeyPatch, tenant: str) -> list[Doc]:
    """Every document portal/quota/services.py, portal/quota/kueue.py and portal/enforcement/services.py server-side
    apply, for one tenant namespace (its ClusterQueue at each Kueue version the portal writes); the
    database reads they make are replaced by fixed answers (the shapes do not depend on them)."""
    from portal.enforcement import services as enforcement
    from portal.quota import kueue
    from portal.quota import services as quota

    monkeypatch.setattr(quota, "desired_hard", lambda cluster_id, namespace: {"requests.nvidia.com/gpu": "4"})
    monkeypatch.setattr(enforcement, "exception_entries", lambda cluster_id, now: {f"{tenant}_runner": "grant=1"})
    monkeypatch.setattr(enforcement, "exempt_namespaces", lambda cluster_id: ["kube-system"])
    grants = SimpleNamespace(filter=lambda *a, **k: SimpleNamespace(exists=lambda: True))
    monkeypatch.setattr(enforcement, "Grant", SimpleNamespace(objects=grants))
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    return [quota.quota_document(1, tenant), quota.quota_document(1, tenant, name=f"{tenant}-gpus", hard={}),
            enforcement.admin_namespace_document(1, tenant, now),
            *enforcement.privileged_documents(1, now, include_policy=True),
            *(kueue.queue_document(f"kueue.x-k8s.io/{version}", f"{tenant}-queue", [], resource_version="1")
              for version in ("v1beta2", "v1beta1"))]
