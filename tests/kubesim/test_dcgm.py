"""The simulator's dcgm-exporter endpoints: real metric names and labels, values from the scenario, and a real
Prometheus scraping them."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

import pytest

from kubesim import Simulator
from kubesim.dcgm import TelemetryConfig, TelemetryError

LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")


def _parse(body: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in body.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        labels_text, _, value = rest.rpartition("} ")
        labels = dict(part.split("=", 1) for part in labels_text.split(","))
        out.append((name, {k: v.strip('"') for k, v in labels.items()}, float(value)))
    return out


@pytest.fixture(scope="module")
def demo():
    with Simulator("demo") as sim:
        yield sim


def _metrics(sim: Simulator, node: str) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(f"{sim.url}/dcgm/{node}/metrics", timeout=5) as r:  # noqa: S310 - local
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return _parse(r.read().decode())


def test_exporter_names_labels_and_pod_mapping(demo: Simulator) -> None:
    samples = _metrics(demo, "h100-000")
    names = {n for n, _, _ in samples}
    for required in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE",
                     "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP",
                     "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                     "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"):
        assert required in names
    engine = [(lab, v) for n, lab, v in samples if n == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert len(engine) == 8
    assert all(set(LABELS) <= set(lab) for lab, _ in engine)
    held = [lab for lab, _ in engine if lab.get("pod")]
    assert held
    assert all(lab["namespace"] == "ml-research" and lab["container"] for lab in held)
    assert {lab["modelName"] for lab, _ in engine} == {"NVIDIA H100 80GB HBM3"}


def test_mig_instances_carry_gpu_instance_labels(demo: Simulator) -> None:
    engine = [lab for n, lab, _ in _metrics(demo, "a100-mig-000") if n == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    # all-balanced: 2x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb per card, 8 cards
    assert len(engine) == 32
    assert {lab["GPU_I_PROFILE"] for lab in engine} == {"1g.10gb", "2g.20gb", "3g.40gb"}
    held = [lab for lab in engine if lab.get("pod")]
    assert len(held) == 3
    assert {lab["GPU_I_PROFILE"] for lab in held} == {"1g.10gb"}
    # GPU_UTIL is not supported on MIG-enabled cards
    assert not [n for n, _, _ in _metrics(demo, "a100-mig-000") if n == "DCGM_FI_DEV_GPU_UTIL"]


def test_dra_devices_by_uuid_and_partitions_as_instances(demo: Simulator) -> None:
    engine = [lab for n, lab, _ in _metrics(demo, "a100-dra-mig-000") if n == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    instances = [lab for lab in engine if "GPU_I_ID" in lab]
    # 4 mig-dra-infer pods (1g.10gb) and seg-mig3g (3g.40gb): DRA creates only the allocated instances
    assert sorted(lab["GPU_I_PROFILE"] for lab in instances) == ["1g.10gb"] * 4 + ["3g.40gb"]
    assert all(lab["pod"] and lab["UUID"].startswith("GPU-") for lab in instances)
    shared = [lab for n, lab, _ in _metrics(demo, "l40s-dra-000") if n == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
              and lab.get("pod", "").startswith("shared-infer")]
    # one card, two pods sharing it through one claim: one series per pod, the card's UUID on both
    assert len(shared) == 2
    assert len({lab["UUID"] for lab in shared}) == 1


def test_values_follow_the_scenario(demo: Simulator) -> None:
    engine = {lab.get("pod", ""): v for n, lab, v in _metrics(demo, "h100-000") if n == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    idle = [v for pod, v in engine.items() if pod.startswith("llm-finetune-small-")]
    assert idle
    assert max(idle) < 0.05
    training = [v for n, lab, v in _metrics(demo, "train-h200-000") if n == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
    assert len(training) == 7
    assert min(training) > 0.8
    xid = {lab["gpu"]: v for n, lab, v in _metrics(demo, "h100-001") if n == "DCGM_FI_DEV_XID_ERRORS"}
    assert xid["2"] == 48
    assert xid["0"] == 0
    dbe = {lab["gpu"]: v for n, lab, v in _metrics(demo, "h100-001") if n == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
    assert dbe["2"] >= 1


def test_runtime_changes_and_unknown_node(demo: Simulator) -> None:
    demo.telemetry.config.xid[("h100-000", 3)] = 79
    try:
        xid = {lab["gpu"]: v for n, lab, v in _metrics(demo, "h100-000") if n == "DCGM_FI_DEV_XID_ERRORS"}
        assert xid["3"] == 79
    finally:
        del demo.telemetry.config.xid[("h100-000", 3)]
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{demo.url}/dcgm/nope/metrics", timeout=5)  # noqa: S310 - local
    assert err.value.code == 404


@pytest.mark.parametrize(("raw", "message"), [
    ({"idleShare": 2}, "idleShare"),
    ({"xid": [{"node": "n", "gpu": 0, "code": 12345}]}, "code"),
    ({"offBus": [{"node": "n"}]}, "needs node"),
    ({"surprise": 1}, "unknown keys"),
    ("nope", "mapping"),
])
def test_bad_telemetry_config_is_a_clear_error(raw: object, message: str) -> None:
    with pytest.raises(TelemetryError, match=message):
        TelemetryConfig.parse(raw)


def test_real_prometheus_scrapes_every_gpu_node(demo: Simulator, prometheus) -> None:
    prom = prometheus(sim=demo, cluster="demo")
    query = urllib.parse.urlencode({"query": 'count by (Hostname) (DCGM_FI_DEV_GPU_TEMP{cluster="demo"})'})
    deadline = time.monotonic() + 30
    found: dict[str, float] = {}
    while time.monotonic() < deadline and len(found) < len(demo.telemetry.gpu_nodes()):
        with urllib.request.urlopen(f"{prom.url}/api/v1/query?{query}", timeout=5) as r:  # noqa: S310 - local
            result = json.loads(r.read())["data"]["result"]
        found = {s["metric"]["Hostname"]: float(s["value"][1]) for s in result}
        time.sleep(0.5)
    assert set(found) == set(demo.telemetry.gpu_nodes())
    assert found["train-h200-000"] == 7
    assert found["h100-000"] == 8
