"""A resourceVersion ahead of the server (the API server's "Too large resource version") and a simulated etcd restore."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from kubesim import Simulator
from tests.tools import require_tool

from .conftest import request, small_scenario, watch_lines


@pytest.fixture
def rsim():
    s = Simulator(scenario=small_scenario(), port=0).start()
    yield s
    s.stop()


def _too_large(requested: int, current: int) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"Timeout: Too large resource version: {requested}, current: {current}",
        "reason": "Timeout",
        "details": {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        "code": 504,
    }


def test_list_ahead_of_the_server_is_refused_with_the_api_server_status(rsim):
    current = rsim.store.resource_version
    r = request(rsim, "GET", f"/api/v1/pods?resourceVersion={current + 5}")
    assert r.status == 504
    assert r.json() == _too_large(current + 5, current)
    # the current one, "0" and none are fine; a malformed one is a 400
    assert request(rsim, "GET", f"/api/v1/pods?resourceVersion={current}").status == 200
    assert request(rsim, "GET", "/api/v1/pods?resourceVersion=0").status == 200
    assert request(rsim, "GET", "/api/v1/pods?resourceVersion=x").status == 400


def test_watch_ahead_of_the_server_ends_with_an_error_event(rsim):
    current = rsim.store.resource_version
    events = watch_lines(rsim, f"/api/v1/pods?watch=true&resourceVersion={current + 1}&timeoutSeconds=2")
    assert events == [{"type": "ERROR", "object": _too_large(current + 1, current)}]


def test_official_client_sees_the_timeout_with_its_cause(rsim):
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config_dict(rsim.kubeconfig()))
    with pytest.raises(ApiException) as exc:
        api.list_node(resource_version=str(rsim.store.resource_version + 100))
    assert exc.value.status == 504
    assert json.loads(exc.value.body)["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_restore_resets_store_counter_and_uids_and_drops_watches(rsim):
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in rsim.store.objects("pods")}
    for i in range(20):  # history moves on past the backup
        rsim.store.create("configmaps", {"metadata": {"name": f"cm-{i}", "namespace": "team-a"}})
    saved = rsim.store.resource_version
    opened = threading.Event()
    outcome: list[object] = []

    def watch() -> None:
        try:
            outcome.extend(watch_lines(rsim, f"/api/v1/pods?watch=true&resourceVersion={saved}&timeoutSeconds=30",
                                       on_open=opened.set))
        except http.client.IncompleteRead:
            outcome.append("dropped")

    watching = threading.Thread(target=watch)
    watching.start()
    assert opened.wait(5)
    r = request(rsim, "POST", "/kubesim/restore")
    assert r.status == 200
    watching.join(10)
    assert not watching.is_alive()  # the restore ended the open watch
    assert outcome == ["dropped"]  # cut like a restarting API server, no ERROR event
    assert r.json()["resourceVersion"] == str(rsim.store.resource_version)
    assert rsim.store.resource_version < saved
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in rsim.store.objects("pods")}
    assert set(after) == set(before)
    assert not set(after.values()) & set(before.values())
    assert rsim.store.objects("configmaps") == []
    assert request(rsim, "GET", f"/api/v1/pods?resourceVersion={saved}").json()["reason"] == "Timeout"
    assert request(rsim, "GET", "/kubesim/restore").status == 405


def test_restore_from_the_command_line(rsim):
    for i in range(5):
        rsim.store.create("configmaps", {"metadata": {"name": f"cm-{i}", "namespace": "team-a"}})
    saved = rsim.store.resource_version
    p = subprocess.run(
        [sys.executable, "-m", "kubesim", "--restore", "--host", rsim.host, "--port", str(rsim.port)],
        capture_output=True, text=True, timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["resourceVersion"] == str(rsim.store.resource_version)
    assert rsim.store.resource_version < saved
    down = subprocess.run([sys.executable, "-m", "kubesim", "--restore", "--port", "1"], capture_output=True,
                          text=True, timeout=60)
    assert down.returncode == 1
    assert "cannot reach" in down.stderr


@pytest.mark.slow  # runs kubectl itself (tests/conftest.py's hook marks only tests whose fixtures do)
def test_kubectl_shows_the_too_large_error(rsim, tmp_path):
    kubeconfig = str(rsim.write_kubeconfig(tmp_path / "config"))

    def kubectl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([require_tool("kubectl"), "--kubeconfig", kubeconfig, "--request-timeout=20s", *args],
                              capture_output=True, text=True, timeout=60)

    current = rsim.store.resource_version
    p = kubectl("get", "--raw", f"/api/v1/namespaces/team-a/pods?resourceVersion={current + 7}")
    assert p.returncode != 0
    assert f"Error from server (Timeout): Timeout: Too large resource version: {current + 7}, current: {current}" in (
        p.stderr
    )
    ok = kubectl("get", "--raw", f"/api/v1/namespaces/team-a/pods?resourceVersion={current}")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["metadata"]["resourceVersion"] == str(current)
