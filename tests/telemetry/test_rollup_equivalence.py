"""The hourly rollup was made faster (each aggregate asked in slices of the fleet, several queries in flight, rows
written by COPY) without changing what it stores: the previous implementation, frozen below as the reference, and the
current one roll the same hours of a real Prometheus up into exactly the same rows (every column, floats equal)."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction

from portal.models import TelemetrySource, UtilizationRollup
from portal.telemetry import services as telemetry
from portal.telemetry.services import (
    ENGINE,
    HOUR,
    JOIN_LABELS,
    Join,
    PrometheusClient,
    Row,
    _selector,
    _series_key,
    _slices,
)
from tests.telemetry.conftest import BUSY_HOUR, IDLE_HOUR

pytestmark = pytest.mark.django_db(transaction=True)


# ------------------------------------------------------------------------------ the reference (the code before)


def _reference_fetch_hour(client, selector, end):
    sel = "{" + selector + "}"
    rows: dict[tuple[Any, ...], Row] = {}
    warnings: list[str] = []

    def run(expr: str) -> list[tuple[dict[str, str], float]]:
        answer = client.query(f"max by ({JOIN_LABELS}) ({expr})", end)
        warnings.extend(answer.warnings)
        return answer.series

    util = "DCGM_FI_DEV_GPU_UTIL"
    queries = [("samples", f"count_over_time({ENGINE}{sel}[1h])"), ("mean", f"avg_over_time({ENGINE}{sel}[1h])"),
               ("p95", f"quantile_over_time(0.95, {ENGINE}{sel}[1h])"),
               ("mem", f"max_over_time(DCGM_FI_DEV_FB_USED{sel}[1h])"),
               ("temp", f"max_over_time(DCGM_FI_DEV_GPU_TEMP{sel}[1h])"),
               ("energy", f"increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{sel}[1h]) / 1000")]
    if run(f"count({util}{sel} unless on (UUID, GPU_I_ID, namespace, pod) {ENGINE}{sel})"):
        queries += [("util_samples", f"count_over_time({util}{sel}[1h])"),
                    ("util_mean", f"avg_over_time({util}{sel}[1h]) / 100"),
                    ("util_p95", f"quantile_over_time(0.95, {util}{sel}[1h]) / 100")]
    card_temp: dict[str, float] = {}
    card_energy: dict[tuple[Any, ...], float] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for (name, _), series in zip(queries, pool.map(lambda q: run(q[1]), queries), strict=True):
            for labels, value in series:
                key = _series_key(labels)
                if name == "samples":
                    rows.setdefault(key, Row(labels)).samples = int(value)
                elif name in ("mean", "p95"):
                    setattr(rows.setdefault(key, Row(labels)), "util_mean" if name == "mean" else "util_p95", value)
                elif name == "mem" and key in rows:
                    rows[key].mem = value
                elif name == "temp":
                    uuid = labels.get("UUID", "")
                    card_temp[uuid] = max(value, card_temp.get(uuid, value))
                elif name == "energy":
                    card_energy[key] = value
                elif name == "util_samples":
                    row = rows.setdefault(key, Row(labels))
                    row.samples = row.samples or int(value)
                elif name == "util_mean":
                    row = rows.setdefault(key, Row(labels))
                    row.util_mean = min(1.0, value) if row.util_mean is None else row.util_mean
                elif name == "util_p95" and key in rows and rows[key].util_p95 is None:
                    rows[key].util_p95 = min(1.0, value)
    xid: dict[str, set[int]] = defaultdict(set)
    answer = client.query_range(f"DCGM_FI_DEV_XID_ERRORS{sel} > 0", end - HOUR, end, 60)
    warnings.extend(answer.warnings)
    for labels, points in answer.series:
        xid[labels.get("UUID", "")].update(int(v) for _, v in points)
    per_card: dict[str, list[Row]] = defaultdict(list)
    for row in rows.values():
        per_card[row.labels.get("UUID", "")].append(row)
    for uuid, card_rows in per_card.items():
        instances = [r for r in card_rows if r.labels.get("GPU_I_ID")]
        sharing = max(1, len(card_rows) - len(instances))
        for row in card_rows:
            row.temp = card_temp.get(uuid)
            row.xid = set(xid.get(uuid, set()))
            key = _series_key(row.labels)
            if key in card_energy:
                row.energy = card_energy[key] / sharing
            elif instances and row in instances:
                whole = next((v for k, v in card_energy.items() if k[0] == uuid and not k[1]), None)
                slices = _slices(row.labels.get("GPU_I_PROFILE", ""))
                row.energy = None if whole is None else whole * slices / 7
    return rows, warnings


def _reference_rollup_hour(cluster, hour, *, client, source):
    from portal.chargeback.services import mappings

    start, end = hour, hour + HOUR
    rows, warnings = _reference_fetch_hour(client, _selector(source), end)
    join = Join(cluster, start, end)
    expected = 3600 / settings.PORTAL_TELEMETRY_SCRAPE_SECONDS
    resolved = [(row, *join.resolve(row.labels, start, end)) for row in rows.values()]
    offering_of = mappings({(cluster.pk, h.resource, h.node_name if h.holder_kind == "pod" else "")
                            for _, _, h in resolved if h is not None})

    def build(row, device, holder):
        labels = row.labels
        offering_id = None
        if holder is not None:
            offering_id = offering_of.get((cluster.pk, holder.resource,
                                           holder.node_name if holder.holder_kind == "pod" else ""))
        return UtilizationRollup(
            cluster=cluster, hour=start, device_id=device.pk if device else None,
            device_key=device.key if device else "", unit_kind=device.mode if device else "",
            node_name=labels.get("Hostname", ""), gpu_uuid=labels.get("UUID", ""), gpu_index=labels.get("gpu", ""),
            gpu_instance=labels.get("GPU_I_ID", ""), gpu_profile=labels.get("GPU_I_PROFILE", ""),
            model=labels.get("modelName", ""), pod_namespace=labels.get("namespace", ""),
            pod_name=labels.get("pod", ""), interval_id=holder.interval_id if holder else None,
            holder_kind=holder.holder_kind if holder else "", holder_uid=holder.holder_uid if holder else "",
            namespace=holder.namespace if holder else "", holder_name=holder.name if holder else "",
            resource=holder.resource if holder else "",
            tenant_id=join.tenants.get(holder.namespace) if holder else None, offering_id=offering_id,
            samples=row.samples, coverage=min(1.0, row.samples / expected) if expected else 0,
            util_mean=row.util_mean, util_p95=row.util_p95, mem_used_mib=row.mem, energy_j=row.energy,
            temp_max=row.temp, xid_codes=sorted(row.xid))

    with transaction.atomic():
        UtilizationRollup.objects.filter(cluster=cluster, hour=start).delete()
        for first in range(0, len(resolved), 5000):
            UtilizationRollup.objects.bulk_create([build(*item) for item in resolved[first:first + 5000]])
    return {"hour": start.isoformat(), "series": len(rows), "rows": len(resolved), "warnings": warnings,
            "unmatched": sum(1 for _, d, _ in resolved if d is None)}


# ------------------------------------------------------------------------------ the comparison


def _extra_history(path: Path) -> Path:
    """Series the demo lacks, so every branch of the rollup is compared: a card without the profiling fields (the
    GPU_UTIL fallback), one with NaN samples, one whose `gpu` is none of the usual indexes, and one with neither
    `gpu` nor `UUID` (the last slice takes those two)."""
    nodcp = 'Hostname="h100-000",gpu="6",UUID="GPU-0000beef-0000-0000-0000-00000000000d",namespace="ml-research",pod="x-0"'
    nan = 'Hostname="h100-000",gpu="7",UUID="GPU-0000beef-0000-0000-0000-000000000001"'
    odd = 'Hostname="h100-000",gpu="12",UUID="GPU-0000beef-0000-0000-0000-00000000000f"'
    bare = 'Hostname="h100-000"'
    series = {
        ("DCGM_FI_DEV_GPU_UTIL", nodcp): lambda k: f"{(k * 37) % 101}",
        ("DCGM_FI_DEV_GPU_TEMP", nodcp): lambda k: f"{40 + k % 30}",
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", nodcp): lambda k: f"{1_000_000 + 4_500_000 * k}",
        (ENGINE, nan): lambda k: "NaN" if k % 5 == 0 else f"{(k % 17) / 17:.6f}",
        (ENGINE, odd): lambda k: f"{(k % 23) / 23:.6f}",
        (ENGINE, bare): lambda k: f"{(k % 7) / 7:.6f}",
    }
    text = []
    for family in dict.fromkeys(name for name, _ in series):
        kind = "unknown" if "ENERGY" in family else "gauge"
        text.append(f"# TYPE {family} {kind}\n")
        for (name, labels), value in series.items():
            if name != family:
                continue
            head = f'{name}{{{labels},modelName="NVIDIA H100 80GB HBM3",cluster="demo"}}'
            start = int(IDLE_HOUR.timestamp())
            text += [f"{head} {value(k)} {start + 15 * k}\n" for k in range(2 * 240)]
    path.write_text("".join(text) + "# EOF\n")
    return path


def _stored(cluster: Any, hour: dt.datetime) -> list[tuple[Any, ...]]:
    names = [f.attname for f in UtilizationRollup._meta.concrete_fields if f.attname != "id"]
    return sorted(UtilizationRollup.objects.filter(cluster=cluster, hour=hour).values_list(*names), key=repr)


def test_the_rollup_stores_what_the_previous_implementation_stored(live_demo, prometheus, demo_history, tmp_path,
                                                                    monkeypatch) -> None:
    from tests.conftest import make_user
    from tests.portal.factories import give_namespaces

    _sim, cluster = live_demo
    for ns in ("ml-research", "ml-inference", "vision-team", "batch-jobs"):
        give_namespaces(make_user(f"{ns}-member"), cluster, ns, tenant_slug=ns)
    prom = prometheus(backfill=[*demo_history, _extra_history(tmp_path / "extra.om")])
    source = TelemetrySource.objects.create(cluster=cluster, prometheus_url=prom.url)
    client = PrometheusClient(prom.url)
    for hour in (IDLE_HOUR, BUSY_HOUR):
        reference = _reference_rollup_hour(cluster, hour, client=client, source=source)
        before = _stored(cluster, hour)
        current = telemetry.rollup_hour(cluster, hour, client=client, source=source)
        assert _stored(cluster, hour) == before
        assert {k: v for k, v in current.items() if k != "warnings"} == {
            k: v for k, v in reference.items() if k != "warnings"}
        assert sorted(current["warnings"]) == sorted(reference["warnings"])
        if hour == BUSY_HOUR:
            # in one slice and one query at a time, through the non-PostgreSQL write path (the demo's SQLite): the
            # same again
            monkeypatch.setattr(telemetry, "ROLLUP_SHARDS", 1)
            monkeypatch.setattr(telemetry, "ROLLUP_IN_FLIGHT", 1)
            monkeypatch.setattr(connection, "vendor", "other")
            telemetry.rollup_hour(cluster, hour, client=client, source=source)
            monkeypatch.undo()
            assert _stored(cluster, hour) == before
        # the comparison is not vacuous: every kind of value is there
        rows = UtilizationRollup.objects.filter(cluster=cluster, hour=hour)
        assert rows.count() == reference["rows"] > 50
        assert rows.exclude(holder_uid="").exclude(tenant=None).exists()
        assert rows.exclude(util_p95=None).exclude(energy_j=None).exclude(temp_max=None).exclude(
            mem_used_mib=None).exists()
        assert rows.exclude(xid_codes=[]).exists()
        fallback = rows.get(gpu_uuid="GPU-0000beef-0000-0000-0000-00000000000d")
        assert fallback.samples >= 240  # (Prometheus 2 counts both ends of the hour)
        assert 0 < fallback.util_p95 <= 1
        assert fallback.util_mean is not None
        assert fallback.energy_j > 0
        assert rows.get(gpu_uuid="GPU-0000beef-0000-0000-0000-000000000001").samples >= 240
        assert rows.get(gpu_uuid="GPU-0000beef-0000-0000-0000-00000000000f").util_p95 is not None
        assert rows.get(gpu_uuid="", gpu_index="", node_name="h100-000").util_mean is not None
