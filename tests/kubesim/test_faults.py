"""Fault injection, restart/compaction and churn."""

from __future__ import annotations

import http.client
import json
import threading
import time

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from kubesim import Simulator

from .conftest import request, small_scenario, watch_lines


@pytest.fixture
def fsim():
    s = Simulator(scenario=small_scenario(), port=0).start()
    yield s
    s.stop()


def test_fail_next_requests_500_and_429(fsim):
    fsim.faults.fail_next_requests(2, status=500)
    for _ in range(2):
        r = request(fsim, "GET", "/api/v1/nodes")
        assert r.status == 500
        assert r.json()["kind"] == "Status"
        assert r.json()["code"] == 500
    assert request(fsim, "GET", "/api/v1/nodes").status == 200
    fsim.faults.fail_next_requests(1, status=429, retry_after=3)
    r = request(fsim, "GET", "/api/v1/namespaces/team-a/pods/train-0")
    assert r.status == 429
    assert r.headers["Retry-After"] == "3"
    assert r.json()["reason"] == "TooManyRequests"
    assert request(fsim, "GET", "/api/v1/namespaces/team-a/pods/train-0").status == 200
    # discovery is never failed
    fsim.faults.fail_next_requests(1, status=500)
    assert request(fsim, "GET", "/version").status == 200
    fsim.faults.reset()
    assert request(fsim, "GET", "/api/v1/nodes").status == 200


def test_client_sees_injected_error(fsim):
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config_dict(fsim.kubeconfig()))
    fsim.faults.fail_next_requests(1, status=500)
    with pytest.raises(ApiException) as exc:
        api.list_node()
    assert exc.value.status == 500
    assert json.loads(exc.value.body)["reason"] == "InternalError"
    assert len(api.list_node().items) == 3
    # 503 + Retry-After: the official client (urllib3) retries transparently, honouring Retry-After
    fsim.faults.fail_next_requests(1, status=503, retry_after=1)
    t0 = time.monotonic()
    assert len(api.list_node().items) == 3
    assert time.monotonic() - t0 >= 0.9


def test_slow_requests(fsim):
    fsim.faults.slow_next_requests(1, 0.5)
    t0 = time.monotonic()
    assert request(fsim, "GET", "/api/v1/nodes").status == 200
    assert time.monotonic() - t0 >= 0.5
    t0 = time.monotonic()
    request(fsim, "GET", "/api/v1/nodes")
    assert time.monotonic() - t0 < 0.4


def test_slow_request_does_not_block_others(fsim):
    fsim.faults.slow_next_requests(1, 1.0)
    t = threading.Thread(target=request, args=(fsim, "GET", "/api/v1/nodes"))
    t.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    assert request(fsim, "GET", "/api/v1/pods").status == 200
    assert time.monotonic() - t0 < 0.5
    t.join()


def test_drop_watches(fsim):
    conn = http.client.HTTPConnection(fsim.host, fsim.port, timeout=5)
    conn.request("GET", f"/api/v1/pods?watch=true&resourceVersion={fsim.store.resource_version}")
    resp = conn.getresponse()
    assert resp.status == 200
    deadline = time.monotonic() + 2
    while not fsim._active_watch_handlers() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert fsim.faults.drop_watches() == 1
    with pytest.raises((http.client.IncompleteRead, ConnectionError, OSError)):
        resp.read()
    conn.close()
    # server is still healthy afterwards
    assert request(fsim, "GET", "/api/v1/pods").status == 200


def test_expire_next_watches(fsim):
    fsim.faults.expire_next_watches(1)
    rv = fsim.store.resource_version
    events = watch_lines(fsim, f"/api/v1/nodes?watch=true&resourceVersion={rv}&timeoutSeconds=1")
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410
    events = watch_lines(fsim, f"/api/v1/nodes?watch=true&resourceVersion={rv}&timeoutSeconds=1")
    assert all(e["type"] != "ERROR" for e in events)


def test_restart_keeps_data_and_expires_history(fsim):
    api_client = kubernetes.config.new_client_from_config_dict(fsim.kubeconfig())
    core = kubernetes.client.CoreV1Api(api_client)
    core.create_namespaced_pod(
        "team-a", {"metadata": {"name": "survivor"}, "spec": {"containers": [{"name": "m", "image": "x"}]}}
    )
    old_rv = fsim.store.resource_version - 1
    port = fsim.port
    # a watch open across the restart gets cut
    holder: dict = {}

    def watcher():
        try:
            holder["events"] = watch_lines(fsim, f"/api/v1/pods?watch=true&resourceVersion={old_rv}", timeout=5)
        except (http.client.HTTPException, OSError) as e:
            holder["error"] = e

    t = threading.Thread(target=watcher)
    t.start()
    time.sleep(0.3)
    fsim.restart(compact=True)
    t.join(timeout=5)
    assert not t.is_alive()
    assert "error" in holder
    assert fsim.port == port
    assert fsim.store.get("pods", "team-a", "survivor") is not None
    assert len(core.list_namespaced_pod("team-a").items) == 5
    events = watch_lines(fsim, f"/api/v1/pods?watch=true&resourceVersion={old_rv}&timeoutSeconds=1")
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"]["reason"] == "Expired"
    api_client.close()


@pytest.mark.slow  # about 4 s
def test_churn_produces_events(fsim):
    rv = fsim.store.resource_version
    fsim.churn.start(rate_per_second=40, seed=1)
    time.sleep(1.0)
    fsim.churn.stop()
    events = watch_lines(fsim, f"/api/v1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=1")
    types = {e["type"] for e in events}
    assert {"ADDED", "DELETED"} <= types
    node_events = watch_lines(fsim, f"/api/v1/nodes?watch=true&resourceVersion={rv}&timeoutSeconds=1")
    slice_events = watch_lines(
        fsim, f"/apis/resource.k8s.io/v1/resourceslices?watch=true&resourceVersion={rv}&timeoutSeconds=1"
    )
    assert node_events or slice_events
    assert all(e["type"] == "MODIFIED" for e in node_events + slice_events)
    assert fsim.churn.changes >= 10
    # every pod in the store is still a valid object for the official client
    api = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config_dict(fsim.kubeconfig()))
    assert len(api.list_pod_for_all_namespaces().items) == 6
    json.dumps(fsim.store.objects("pods"))


def test_kubeconfig_roundtrip(fsim, tmp_path):
    path = fsim.write_kubeconfig(tmp_path / "kc.yaml")
    cfg = kubernetes.config.kube_config.KubeConfigLoader(config_dict=__import__("yaml").safe_load(path.read_text()))
    assert cfg.current_context["name"] == "kubesim"
    assert fsim.kubeconfig()["clusters"][0]["cluster"]["server"] == fsim.url
