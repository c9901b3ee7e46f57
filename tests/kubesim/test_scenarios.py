"""The bundled scenarios load, deserialize in the official client, and the CLI serves them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import kubernetes
import pytest

from kubesim import Simulator
from tests.tools import require_tool


@pytest.fixture(scope="module")
def demo():
    pytest.importorskip("kubesim.scenario")
    s = Simulator(scenario="demo", port=0).start()
    yield s
    s.stop()


def test_demo_scenario_deserializes_in_official_client(demo):
    c = kubernetes.config.new_client_from_config_dict(demo.kubeconfig())
    core, dra = kubernetes.client.CoreV1Api(c), kubernetes.client.ResourceV1Api(c)
    counts = {
        "namespaces": len(core.list_namespace().items),
        "nodes": len(core.list_node().items),
        "pods": len(core.list_pod_for_all_namespaces().items),
        "resourcequotas": len(core.list_resource_quota_for_all_namespaces().items),
        "events": len(core.list_event_for_all_namespaces().items),
        "resourceslices": len(dra.list_resource_slice().items),
        "deviceclasses": len(dra.list_device_class().items),
        "resourceclaims": len(dra.list_resource_claim_for_all_namespaces().items),
        "resourceclaimtemplates": len(dra.list_resource_claim_template_for_all_namespaces().items),
    }
    assert counts == {p: demo.store.count(p) for p in counts}
    assert counts["nodes"] > 0
    assert counts["pods"] > 0
    c.close()


def test_churn_on_demo_keeps_objects_valid(demo):
    rv = demo.store.resource_version
    demo.churn.start(rate_per_second=100, seed=3)
    time.sleep(1.0)
    demo.churn.stop()
    assert demo.store.resource_version > rv + 20
    c = kubernetes.config.new_client_from_config_dict(demo.kubeconfig())
    w = kubernetes.watch.Watch()
    kinds = set()
    for e in w.stream(
        kubernetes.client.CoreV1Api(c).list_pod_for_all_namespaces, resource_version=str(rv), timeout_seconds=1
    ):
        kinds.add(e["type"])
    assert {"ADDED", "DELETED"} <= kinds
    kubernetes.client.ResourceV1Api(c).list_resource_slice()
    kubernetes.client.CoreV1Api(c).list_node()
    c.close()


@pytest.mark.slow  # runs kubectl itself (tests/conftest.py's hook marks only tests whose fixtures do)
def test_kubectl_on_demo(demo, tmp_path):
    kubectl = require_tool("kubectl")
    kc = demo.write_kubeconfig(tmp_path / "kc")
    for args in (
        ["get", "nodes"],
        ["get", "pods", "-A"],
        ["get", "resourceslices"],
        ["get", "resourceclaims", "-A"],
        ["get", "events", "-A"],
        ["get", "quota", "-A"],
    ):
        p = subprocess.run([kubectl, "--kubeconfig", str(kc), *args], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines()[0].split()[0] in ("NAME", "NAMESPACE")


@pytest.mark.slow  # starts a kubesim server process itself (tests/conftest.py's hook marks only fixtures')
def test_cli_serves_until_sigterm(tmp_path):
    kc = tmp_path / "kc.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "--scenario", "empty", "--port", "0", "--write-kubeconfig", str(kc)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = line.split()[2]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "/version", timeout=5) as r:  # noqa: S310 - http URL we just printed
            assert json.loads(r.read())["gitVersion"] == "v1.35.0"
        assert kc.exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
