"""The command-line tools run as a newcomer or a tenant's CI pipeline runs them: in a subprocess whose environment
holds PATH only — no secret, no database, no settings module.

- Commands that need configuration stop with one line that names the variables, .env.example and the demo settings.
- validate_manifest (with a snapshot file), explain_pod (with node files), cel_eval and the simulator just work;
  an option that needs the inventory database says so in one line.
- A snapshot file gives the same verdict as the inventory of the same cluster.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from tests.tools import require_tool

pytestmark = pytest.mark.slow  # the command-line tools run in subprocesses

ROOT = Path(__file__).resolve().parent.parent
EMPTY_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}

POD = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                             "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "2", "memory": "8Gi"},
                                           "requests": {"nvidia.com/gpu": "2", "cpu": "2", "memory": "8Gi"}}}]},
}


def _node(name: str, gpus: int) -> dict[str, Any]:
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": resources, "allocatable": resources}}


def _manage(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, capture_output=True, text=True,
                          env=env or EMPTY_ENV, timeout=timeout)


def _no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(POD))
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [_node("gpu-a", 1), _node("gpu-b", 4)]}))
    pods = tmp_path / "pods.json"
    busy = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy", "namespace": "other", "uid": "u1"},
            "spec": {"nodeName": "gpu-b", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "3"}}}]},
            "status": {"phase": "Running"}}
    pods.write_text(json.dumps([busy]))
    device = tmp_path / "device.json"
    device.write_text(json.dumps({"name": "gpu-0", "attributes": {"productName": {"string": "NVIDIA H100"}},
                                  "capacity": {"memory": {"value": "80Gi"}}}))
    return {"pod": pod, "nodes": nodes, "pods": pods, "device": device}


@pytest.mark.parametrize("env", [EMPTY_ENV, {**EMPTY_ENV, "DJANGO_SECRET_KEY": "x" * 50}])
def test_a_command_that_needs_configuration_says_what_to_set_in_one_line(env: dict[str, str]) -> None:
    result = _manage("migrate", env=env)
    assert result.returncode == 2
    _no_traceback(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "DATABASE_URL" in lines[0]
    assert ("DJANGO_SECRET_KEY" in lines[0]) == ("DJANGO_SECRET_KEY" not in env)
    assert ".env.example" in lines[0]
    assert "DJANGO_SETTINGS_MODULE=portal.settings.demo" in lines[0]


def test_cel_eval_needs_nothing(files: dict[str, Path]) -> None:
    expression = 'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H")'
    result = _manage("cel_eval", "--expression", expression, "--driver", "gpu.nvidia.com",
                     "--device", str(files["device"]))
    assert (result.returncode, json.loads(result.stdout)) == (0, {"result": True}), result.stderr
    broken = _manage("cel_eval", "--expression", "device.(", "--driver", "gpu.nvidia.com",
                     "--device", str(files["device"]))
    assert broken.returncode == 1
    assert json.loads(broken.stdout)["error"]["kind"] == "compile"


def test_explain_pod_with_node_and_pod_files_needs_nothing(files: dict[str, Path]) -> None:
    result = _manage("explain_pod", "--pod", str(files["pod"]), "--nodes", str(files["nodes"]),
                     "--pods", str(files["pods"]), "--format", "json")
    assert result.returncode == 0, result.stderr
    explanation = json.loads(result.stdout)
    assert explanation["schedulable"] is False
    assert explanation["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


def test_explain_pod_without_node_files_says_it_needs_the_database(files: dict[str, Path]) -> None:
    result = _manage("explain_pod", "--pod", str(files["pod"]))
    assert result.returncode == 2
    _no_traceback(result)
    assert "reads the inventory database" in result.stderr
    assert "--nodes FILE" in result.stderr


def test_validate_manifest_needs_nothing(files: dict[str, Path]) -> None:
    result = _manage("validate_manifest", str(files["pod"]), "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["ok"] is True


def test_validate_manifest_against_a_snapshot_file_runs_feasibility(files: dict[str, Path], tmp_path: Path) -> None:
    snapshot = tmp_path / "cluster.json"
    objects = json.loads(files["nodes"].read_text())["items"] + json.loads(files["pods"].read_text())
    snapshot.write_text(json.dumps({"kind": "List", "items": objects}))
    result = _manage("validate_manifest", str(files["pod"]), "--snapshot", str(snapshot), "--format", "json")
    assert result.returncode == 1, result.stdout + result.stderr
    unschedulable = [f for f in json.loads(result.stdout)["findings"] if f["code"] == "unschedulable"]
    assert [f["message"] for f in unschedulable] == ["0/2 nodes are available: 2 Insufficient nvidia.com/gpu."]


def test_validate_manifest_with_cluster_says_it_needs_the_database(files: dict[str, Path]) -> None:
    result = _manage("validate_manifest", str(files["pod"]), "--cluster", "prod")
    assert result.returncode == 2
    _no_traceback(result)
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--cluster reads the inventory database" in result.stderr
    assert "--snapshot FILE" in result.stderr


@pytest.mark.slow  # starts a kubesim server process itself (tests/conftest.py's hook marks only fixtures')
@pytest.mark.parametrize("command", [["-m", "kubesim"], [str(ROOT / "manage.py"), "kubesim"]],
                         ids=["python -m kubesim", "manage.py kubesim"])
def test_the_simulator_needs_nothing(command: list[str]) -> None:
    process = subprocess.Popen([sys.executable, *command, "--scenario", "demo", "--port", "0"], cwd=ROOT,
                               env=EMPTY_ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("kubesim serving http://127.0.0.1:"), line + (process.stderr.read() if process.stderr
                                                                             else "")
        url = line.split()[2]
        with urllib.request.urlopen(f"{url}/version", timeout=10) as response:  # noqa: S310 - the local simulator
            assert json.load(response)["major"] == "1"
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.mark.slow
def test_a_snapshot_file_gives_the_same_verdict_as_the_inventory(live_demo: Any, tmp_path: Path) -> None:
    """kubectl's dump of the demo cluster, validated offline, equals the validation against the synced inventory."""
    kubectl = require_tool("kubectl")
    sim, cluster = live_demo
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    dump = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "get",
         "namespaces,nodes,pods,resourcequotas,deviceclasses,resourceslices,resourceclaims,localqueues,clusterqueues",
         "-A", "-o", "json"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    snapshot = tmp_path / "cluster.json"
    snapshot.write_text(dump)
    manifests = {
        "fits": {**POD, "metadata": {"name": "small", "namespace": "ml-research"}},
        "too-big": {**POD, "metadata": {"name": "big", "namespace": "ml-research"},
                    "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                                             "resources": {"limits": {"nvidia.com/gpu": "64"}}}]}},
        "unknown-namespace": {**POD, "metadata": {"name": "x", "namespace": "nowhere"}},
        # Two MPS shares in one container: the node labels say MPS, and its device plugin refuses more than one.
        "two-mps-shares": {**POD, "metadata": {"name": "mps", "namespace": "ml-inference"},
                           "spec": {**POD["spec"], "nodeSelector": {"nvidia.com/gpu.sharing-strategy": "mps"}}},
    }
    for name, manifest in manifests.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(manifest))
        offline = _manage("validate_manifest", str(path), "--snapshot", str(snapshot), "--format", "json",
                          "--kubernetes-version", "1.35")
        _no_traceback(offline)
        out = io.StringIO()
        with contextlib.suppress(SystemExit):  # exit 1 when the manifest has errors
            call_command("validate_manifest", str(path), "--cluster", cluster.name, "--format", "json",
                         "--kubernetes-version", "1.35", stdout=out)
        assert json.loads(offline.stdout) == json.loads(out.getvalue()), name
        if name == "two-mps-shares":
            assert "shared-request-refused" in {f["code"] for f in json.loads(offline.stdout)["findings"]}
