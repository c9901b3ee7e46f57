"""The hourly rollup against a real Prometheus holding the demo's dcgm-exporter history: the join for every unit
kind, the findings (idle appears and clears, XID with meaning, missing telemetry, plugin-healthy but DCGM
failing), and Prometheus down, slow, partial or NaN as a visible state that writes nothing."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from typing import Any

import pytest

from portal.models import TelemetryFinding, TelemetrySource, UtilizationRollup
from portal.telemetry.services import PrometheusClient, telemetry_refresh_cluster
from tests.telemetry.conftest import BUSY_HOUR, IDLE_HOUR, IDLE_POD_PREFIX, NOW, refresh_from_idle_hour

pytestmark = pytest.mark.django_db(transaction=True)
MINUTE = dt.timedelta(minutes=1)


def test_join_for_every_unit_kind(demo_telemetry) -> None:
    _sim, cluster, _prom = demo_telemetry
    result = refresh_from_idle_hour(cluster, BUSY_HOUR + MINUTE)
    assert result["state"] in ("ok", "partial")
    assert result["hours"] == 1
    rows = list(UtilizationRollup.objects.filter(cluster=cluster, hour=IDLE_HOUR))
    held = [r for r in rows if r.holder_uid]
    kinds = {r.unit_kind for r in held}
    assert {"whole", "mig", "time-slicing", "mps", "dra-device", "dra-partition"} <= kinds

    def of(prefix: str) -> list[UtilizationRollup]:
        return [r for r in held if r.pod_name.startswith(prefix)]

    idle = of(IDLE_POD_PREFIX)
    assert len(idle) == 4
    assert {(r.unit_kind, r.holder_kind, r.namespace, r.resource) for r in idle} == {
        ("whole", "pod", "ml-research", "nvidia.com/gpu")}
    assert all(r.tenant.slug == "ml-research" and r.util_mean < 0.05 and r.coverage > 0.95 for r in idle)
    mixed = of("embed-mig-")
    assert {(r.unit_kind, r.resource, r.gpu_profile) for r in mixed} == {("mig", "nvidia.com/mig-1g.10gb", "1g.10gb")}
    assert len({(r.gpu_uuid, r.gpu_instance) for r in mixed}) == 3
    single = of("notebook-mig-")
    assert [(r.unit_kind, r.resource, r.device_key) for r in single] == [
        ("mig", "nvidia.com/gpu", "node/a100-mig-single-001/nvidia.com/gpu")]
    replicas = of("triton-t4-")
    assert {r.unit_kind for r in replicas} == {"time-slicing"}
    assert {r.unit_kind for r in of("mps-infer-")} == {"mps"}
    dra = of("dra-train-")
    assert {(r.unit_kind, r.holder_kind) for r in dra} == {("dra-device", "claim")}
    assert all(r.device.attributes["uuid"] == {"string": r.gpu_uuid} for r in dra)
    parts = of("mig-dra-infer-")
    assert len(parts) == 4
    assert {(r.unit_kind, r.holder_kind, r.namespace) for r in parts} == {("dra-partition", "claim", "ml-inference")}
    assert len({r.device_key for r in parts}) == 4  # each instance to its own partition
    # a claim allocated with no pod using it is held all the same (the exporter has no pod label there)
    spare = [r for r in held if r.holder_name == "warm-spare"]
    assert len(spare) == 1
    assert spare[0].pod_name == ""
    assert spare[0].util_mean == 0
    # energy, temperature, memory, XID codes
    h100 = next(r for r in rows if r.node_name == "h100-001" and r.gpu_index == "2")
    assert h100.xid_codes == [48]
    assert h100.energy_j > 0
    assert h100.temp_max > 0
    assert h100.mem_used_mib is not None


def test_findings_idle_appears_and_clears(demo_telemetry) -> None:
    _sim, cluster, _prom = demo_telemetry
    refresh_from_idle_hour(cluster, BUSY_HOUR + MINUTE)
    findings = {(f.kind, f.subject): f for f in TelemetryFinding.objects.filter(cluster=cluster)}
    idle = [f for (kind, _), f in findings.items() if kind == "allocated-idle"]
    assert len(idle) >= 4
    assert {f.namespace for f in idle} >= {"ml-research"}
    assert any(IDLE_POD_PREFIX in f.subject for f in idle)
    xid = {f.evidence["code"]: f for (kind, _), f in findings.items() if kind == "xid"}
    assert set(xid) == {48, 63, 79}
    assert "fallen off the bus" in xid[79].message
    assert "reset" in xid[79].action
    missing = [f for (kind, _), f in findings.items() if kind == "telemetry-missing"]
    assert [f.subject for f in missing] == ["node/train-h200-000"]
    dcgm = {f.subject for (kind, _), f in findings.items() if kind == "plugin-healthy-dcgm-failing"}
    assert {"node/train-h200-000", "node/l40s-dra-001"} <= dcgm
    # the next hour the fine-tune works: its idle findings clear, the others stay
    refresh_from_idle_hour(cluster, NOW + MINUTE)
    after = TelemetryFinding.objects.filter(cluster=cluster)
    assert not [f for f in after if f.kind == "allocated-idle" and IDLE_POD_PREFIX in f.subject]
    assert after.filter(kind="xid").count() == 3


def test_prometheus_down_is_a_state_and_writes_nothing(demo_telemetry) -> None:
    _sim, cluster, prom = demo_telemetry
    prom.stop()
    result = refresh_from_idle_hour(cluster, BUSY_HOUR + MINUTE)
    source = TelemetrySource.objects.get(cluster=cluster)
    assert result["state"] == source.state == "down"
    assert "unreachable" in source.message
    assert source.rolled_up_to == IDLE_HOUR  # the hour is retried later
    assert not UtilizationRollup.objects.filter(cluster=cluster).exists()


def test_prometheus_slow_is_a_state(demo_telemetry, settings) -> None:
    _sim, cluster, prom = demo_telemetry
    settings.PORTAL_PROMETHEUS_CONNECT_TIMEOUT = 0.5
    settings.PORTAL_PROMETHEUS_READ_TIMEOUT = 0.5
    prom.pause()
    try:
        result = refresh_from_idle_hour(cluster, BUSY_HOUR + MINUTE)
    finally:
        prom.resume()
    assert result["state"] == "slow"
    assert not UtilizationRollup.objects.filter(cluster=cluster).exists()


class _Canned(http.server.BaseHTTPRequestHandler):
    """A Prometheus-compatible endpoint answering partially (as Thanos/Mimir do with partial responses), with NaN
    values: real Prometheus 2.42 never flags partial answers, so this one is served here."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        query = self.rfile.read(length).decode()
        labels = {"UUID": "GPU-x", "gpu": "0", "Hostname": "h100-000", "namespace": "ml-research",
                  "pod": "p", "modelName": "NVIDIA H100 80GB HBM3"}
        if "query_range" in self.path:
            result = [{"metric": labels, "values": [[1, "NaN"]]}]
            doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        else:
            value = "NaN" if "avg_over_time" in query else "240"
            doc = {"status": "success", "warnings": ["store gateway unavailable: partial response"],
                   "data": {"resultType": "vector", "result": [{"metric": labels, "value": [1, value]}]}}
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_partial_and_nan_answers_are_flagged_never_guessed(live_demo) -> None:
    _sim, cluster = live_demo
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        TelemetrySource.objects.create(cluster=cluster, prometheus_url=url, rolled_up_to=IDLE_HOUR)
        result = telemetry_refresh_cluster(cluster, now=BUSY_HOUR + MINUTE, client=PrometheusClient(url))
    finally:
        server.shutdown()
    assert result["state"] == "partial"
    source = TelemetrySource.objects.get(cluster=cluster)
    assert "partial response" in source.message
    row = UtilizationRollup.objects.get(cluster=cluster)
    assert row.util_mean is None  # NaN is missing data, not 0 % and not 100 %
    assert row.xid_codes == []


def test_a_pod_that_moved_is_attributed_per_interval(live_demo, prometheus, tmp_path) -> None:
    """The StatefulSet pod `mover` ran on an h100-000 card for the first 20 minutes of the hour, was re-created
    (new uid) and ran on an h100-001 card for the last 40: two intervals, two rollup rows, samples split 20/40."""
    from inventory.models import AllocationInterval

    sim, cluster = live_demo
    a = sim.telemetry.units("h100-000")[5]
    b = sim.telemetry.units("h100-001")[6]
    half = IDLE_HOUR + dt.timedelta(minutes=20)
    for uid, node, start, end in (("uid-1", "h100-000", IDLE_HOUR - dt.timedelta(hours=3), half),
                                  ("uid-2", "h100-001", half, None)):
        AllocationInterval.objects.create(cluster=cluster, holder_kind="pod", holder_uid=uid, namespace="ml-research",
                                          name="mover-0", node_name=node, resource="nvidia.com/gpu", quantity=1,
                                          started_at=start, ended_at=end)
    lines = []
    t = IDLE_HOUR.timestamp()
    while t < BUSY_HOUR.timestamp():
        unit, value = (a, 0.9) if t < half.timestamp() else (b, 0.3)
        lines.append(f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="{unit.index}",UUID="{unit.uuid}",Hostname="{unit.node}",'
                     f'modelName="NVIDIA H100 80GB HBM3",namespace="ml-research",pod="mover-0",container="main",'
                     f'cluster="demo"}} {value} {t:.3f}')
        t += 15
    history = tmp_path / "moved.om"
    history.write_text("# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n" + "\n".join(lines) + "\n# EOF\n")
    prom = prometheus(backfill=[history])
    TelemetrySource.objects.create(cluster=cluster, prometheus_url=prom.url, rolled_up_to=IDLE_HOUR)
    from portal.telemetry.services import rollup_hour

    rollup_hour(cluster, IDLE_HOUR, client=PrometheusClient(prom.url))
    rows = {r.node_name: r for r in UtilizationRollup.objects.filter(cluster=cluster, pod_name="mover-0")}
    assert set(rows) == {"h100-000", "h100-001"}
    assert rows["h100-000"].holder_uid == "uid-1"
    assert rows["h100-001"].holder_uid == "uid-2"
    assert rows["h100-000"].samples == 80
    assert rows["h100-001"].samples == 160
    assert rows["h100-000"].util_mean == pytest.approx(0.9)
    assert rows["h100-001"].util_mean == pytest.approx(0.3)
    assert rows["h100-000"].device_key == "node/h100-000/nvidia.com/gpu"
