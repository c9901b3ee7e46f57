"""Drive the simulator with the real kubectl binary."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from tests.kubesim.conftest import kubectl_runner
from tests.tools import require_tool


@pytest.fixture(autouse=True)
def _kubectl() -> None:
    require_tool("kubectl")


QUOTA = """\
apiVersion: v1
kind: ResourceQuota
metadata:
  name: gpu-budget
  namespace: team-a
  labels:
    owner: alice
spec:
  hard:
    requests.nvidia.com/gpu: "{gpus}"
"""


@pytest.fixture(scope="module")
def kubeconfig(sim, tmp_path_factory):
    return str(sim.write_kubeconfig(tmp_path_factory.mktemp("kc") / "config"))


@pytest.fixture
def kubectl(kubeconfig):
    return kubectl_runner(kubeconfig)


def test_get_nodes_table(kubectl):
    out = kubectl("get", "nodes").stdout.splitlines()
    assert out[0].split()[:2] == ["NAME", "STATUS"]
    assert "AGE" in out[0]
    assert [line.split()[0] for line in out[1:]] == ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
    assert all(line.split()[1] == "Ready" for line in out[1:])
    out = kubectl("get", "po", "-n", "team-a").stdout
    assert "train-0" in out
    assert "Running" in out
    wide = kubectl("get", "pods", "-A", "-o", "wide").stdout
    assert "gpu-node-1" in wide
    assert "NAMESPACE" in wide


def test_get_resourceslices_yaml(kubectl):
    doc = yaml.safe_load(kubectl("get", "resourceslices", "-o", "yaml").stdout)
    assert doc["kind"] == "List"
    assert len(doc["items"]) == 3
    assert doc["items"][0]["apiVersion"] == "resource.k8s.io/v1"
    assert doc["items"][0]["spec"]["driver"]
    assert "gpu.nvidia.com" in kubectl("get", "deviceclasses").stdout
    assert "claim-1" in kubectl("get", "resourceclaims", "-A").stdout


def test_get_pods_chunked_json(kubectl, sim):
    doc = json.loads(kubectl("get", "pods", "-A", "-o", "json", "--chunk-size=2").stdout)
    names = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in doc["items"]}
    expected = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in sim.store.objects("pods")}
    assert names == expected
    assert len(doc["items"]) == len(expected)


def test_get_not_found(kubectl):
    p = kubectl("get", "pod", "-n", "team-a", "missing", check=False)
    assert p.returncode != 0
    assert 'pods "missing" not found' in p.stderr


def test_watch_shows_new_pod(kubectl, kubeconfig):
    proc = subprocess.Popen(
        ["kubectl", "--kubeconfig", kubeconfig, "get", "pods", "-A", "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)
        kubectl(
            "create",
            "-f",
            "-",
            stdin=json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "watch-me-2", "namespace": "team-b"},
                    "spec": {"containers": [{"name": "m", "image": "busybox"}]},
                }
            ),
        )
        time.sleep(1.0)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert "train-0" in out
    assert "watch-me-2" in out


def test_server_side_apply_conflicts(kubectl, tmp_path, sim):
    f1 = tmp_path / "q1.yaml"
    f1.write_text(QUOTA.format(gpus=4))
    f2 = tmp_path / "q2.yaml"
    f2.write_text(QUOTA.format(gpus=8))
    assert "serverside-applied" in kubectl("apply", "--server-side", "-f", str(f1)).stdout
    dry = kubectl("apply", "--server-side", "--dry-run=server", "-f", str(f2), "--field-manager=kubectl")
    assert "server dry run" in dry.stdout
    assert sim.store.get("resourcequotas", "team-a", "gpu-budget")["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    p = kubectl("apply", "--server-side", "--field-manager=ops", "-f", str(f2), check=False)
    assert p.returncode != 0
    assert 'conflict with "kubectl": .spec.hard.requests.nvidia.com/gpu' in p.stderr
    kubectl("apply", "--server-side", "--field-manager=ops", "--force-conflicts", "-f", str(f2))
    obj = json.loads(
        kubectl("get", "quota", "-n", "team-a", "gpu-budget", "-o", "json", "--show-managed-fields").stdout
    )
    assert obj["spec"]["hard"]["requests.nvidia.com/gpu"] == "8"
    managers = {m["manager"]: m for m in obj["metadata"]["managedFields"]}
    assert managers["ops"]["operation"] == "Apply"
    assert "f:requests.nvidia.com/gpu" in managers["ops"]["fieldsV1"]["f:spec"]["f:hard"]


def test_create_dry_run_and_delete(kubectl, tmp_path, sim):
    f = tmp_path / "ns.yaml"
    f.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: scratch\n")
    assert "server dry run" in kubectl("create", "--dry-run=server", "-f", str(f)).stdout
    assert sim.store.get("namespaces", None, "scratch") is None
    kubectl("create", "namespace", "scratch")
    assert sim.store.get("namespaces", None, "scratch") is not None
    assert 'namespace "scratch" deleted' in kubectl("delete", "namespace", "scratch", "--wait=false").stdout
    assert sim.store.get("namespaces", None, "scratch") is None


def test_label_and_patch(kubectl, sim):
    kubectl("label", "node", "gpu-node-2", "pool=batch")
    assert sim.store.get("nodes", None, "gpu-node-2")["metadata"]["labels"]["pool"] == "batch"
    kubectl("label", "node", "gpu-node-2", "pool-")
    assert "pool" not in sim.store.get("nodes", None, "gpu-node-2")["metadata"]["labels"]
    kubectl(
        "patch", "pod", "-n", "team-a", "train-1", "--type", "merge", "-p", '{"metadata":{"annotations":{"a":"b"}}}'
    )
    kubectl(
        "patch",
        "pod",
        "-n",
        "team-a",
        "train-1",
        "--type",
        "strategic",
        "-p",
        '{"spec":{"containers":[{"name":"main","image":"busybox:1.37"}]}}',
    )
    kubectl(
        "patch",
        "pod",
        "-n",
        "team-a",
        "train-1",
        "--type",
        "json",
        "-p",
        '[{"op":"add","path":"/metadata/labels/patched","value":"json"}]',
    )
    pod = sim.store.get("pods", "team-a", "train-1")
    assert pod["metadata"]["annotations"] == {"a": "b"}
    assert pod["metadata"]["labels"]["patched"] == "json"
    assert pod["spec"]["containers"] == [{"name": "main", "image": "busybox:1.37"}]
    managers = {m["manager"] for m in pod["metadata"]["managedFields"]}
    assert {"kubectl-patch"} <= managers
    kubectl("delete", "pod", "-n", "team-a", "train-1", "--wait=false")
    assert sim.store.get("pods", "team-a", "train-1") is None


def test_selectors_via_kubectl(kubectl):
    out = kubectl("get", "pods", "-A", "-l", "app in (train)", "-o", "name").stdout.split()
    assert out
    assert all(n.startswith("pod/train-") for n in out)
    out = kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName=gpu-node-0", "-o", "name").stdout.split()
    assert "pod/train-0" in out
