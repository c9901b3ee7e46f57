"""Fixtures for the kubesim suite: a small inline scenario, a running simulator, raw HTTP helpers, a kubectl runner."""

from __future__ import annotations

import http.client
import json
import subprocess

import pytest

from kubesim import Simulator


def small_scenario() -> list[dict]:
    objs: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": {"team": n}}}
        for n in ("default", "team-a", "team-b")
    ]
    for i in range(3):
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"gpu-node-{i}", "labels": {"gpu": "true", "zone": f"z{i % 2}"}},
                "spec": {},
                "status": {
                    "capacity": {"cpu": "32", "nvidia.com/gpu": "8"},
                    "allocatable": {"cpu": "32", "nvidia.com/gpu": "8"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "nodeInfo": {
                        "kubeletVersion": "v1.35.0",
                        "kubeProxyVersion": "",
                        "architecture": "amd64",
                        "bootID": "b",
                        "containerRuntimeVersion": "containerd://2.0.0",
                        "kernelVersion": "6.8.0",
                        "machineID": "m",
                        "operatingSystem": "linux",
                        "osImage": "Ubuntu 24.04",
                        "systemUUID": "u",
                    },
                },
            }
        )
        objs.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"gpu-node-{i}-gpu.nvidia.com"},
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": f"gpu-node-{i}",
                    "pool": {"name": f"gpu-node-{i}", "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"gpu-{d}", "attributes": {"model": {"string": "H100"}}} for d in range(2)],
                },
            }
        )
    for i in range(6):
        ns = "team-a" if i < 4 else "team-b"
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"train-{i}",
                    "namespace": ns,
                    "labels": {"app": "train" if i % 2 else "infer", "idx": str(i)},
                },
                "spec": {"nodeName": f"gpu-node-{i % 3}", "containers": [{"name": "main", "image": "busybox"}]},
                "status": {"phase": "Running" if i < 5 else "Pending"},
            }
        )
    objs.append(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        }
    )
    objs.append(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "claim-1", "namespace": "team-a"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        }
    )
    objs.append(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu", "namespace": "team-a"},
            "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
        }
    )
    return objs


@pytest.fixture(scope="module")
def sim():
    s = Simulator(scenario=small_scenario(), port=0).start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def api_client(sim):
    import kubernetes

    client = kubernetes.config.new_client_from_config_dict(sim.kubeconfig())
    yield client
    client.close()


class Resp:
    def __init__(self, status: int, headers, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)


def request(sim, method: str, path: str, body=None, headers: dict | None = None, timeout: float = 10) -> Resp:
    """One raw HTTP request to the simulator."""
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=timeout)
    hdrs = {"Accept": "application/json", **(headers or {})}
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse()
        return Resp(r.status, r.headers, r.read())
    finally:
        conn.close()


def watch_lines(sim, path: str, timeout: float = 10, on_open=None) -> list[dict]:
    """Run a watch request to completion and return its decoded events."""
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Accept": "application/json"})
        r = conn.getresponse()
        assert r.status == 200
        if on_open:
            on_open()
        return [json.loads(line) for line in r.read().splitlines() if line.strip()]
    finally:
        conn.close()


def kubectl_runner(kubeconfig: str):
    """`run(*args, check=True, stdin=None)`: the real kubectl against the simulator, failing the test on errors."""

    def run(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
        p = subprocess.run(
            ["kubectl", "--kubeconfig", kubeconfig, "--request-timeout=20s", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {p.stderr}")
        return p

    return run
