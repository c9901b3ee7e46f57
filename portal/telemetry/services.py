"""Telemetry: DCGM (dcgm-exporter) metrics read from Prometheus, joined to the units, holders, tenants and offerings.

The portal talks to any Prometheus-compatible HTTP API (`/api/v1/query`, `/api/v1/query_range`): Prometheus,
Thanos, Mimir, VictoriaMetrics. Per cluster, a beat task rolls each finished hour up on the Prometheus side
(`avg_over_time`, `quantile_over_time`, `max_over_time`, `increase`, `count_over_time` over `[1h]`: one value per
series, so 40,000 GPUs are 40,000 numbers per query, never 9.6 million samples) and joins every series to the unit
that produced it and the holder that had it in that hour:

- device-plugin cards: by `Hostname` and the pod labels dcgm-exporter's Kubernetes mapping sets (the pod's
  allocation interval says which extended resource it held); time-sliced replicas and MPS shares carry their
  card's values (the card is the finest grain DCGM offers there);
- MIG instances (device plugin): by `Hostname` and `GPU_I_PROFILE` to the node's `nvidia.com/mig-<profile>` unit
  (or `nvidia.com/gpu` under the single strategy), `GPU_I_ID` keeping instances apart;
- DRA devices: by `UUID` (the device's `uuid` attribute); DRA partitions by the parent card's UUID, the profile and
  the claim holding it. A DRA device's holder is its claim, pod label or not.

A down, slow or erroring Prometheus leaves the hour un-rolled (retried next run) and the state visible on the
cluster's `TelemetrySource`: no rollup is ever written from a failed read, so no bill is computed from it. NaN
samples count as missing.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from sys import intern
from typing import Any

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import PortalError
from inventory.models import AllocationInterval, Cluster, Device, Mode, Path
from inventory.services.derive import dra_attribute
from portal.telemetry.models import IdlePolicy, TelemetryFinding, TelemetrySource, UtilizationRollup
from portal.tenancy.models import TenantNamespace

log = logging.getLogger(__name__)
HOUR = dt.timedelta(hours=1)
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"

# XID codes (NVIDIA's "XID Errors" catalogue): what it means and what the platform team does about it.
XID_CATALOGUE: dict[int, tuple[str, str, str]] = {
    13: ("Graphics engine exception", "Usually the application (bad memory access); check the workload first.",
         "warning"),
    31: ("GPU memory page fault", "Usually the application; if it repeats across workloads, run diagnostics.",
         "warning"),
    43: ("GPU stopped processing", "The application hit a fault; restart the workload.", "warning"),
    45: ("Preemptive cleanup after an earlier error", "Follows another XID: act on that one.", "info"),
    48: ("Double-bit ECC error", "Drain the node, reset the GPU; replace it if it recurs.", "error"),
    61: ("Internal micro-controller breakpoint/warning", "Reset the GPU; report to NVIDIA if it recurs.", "error"),
    62: ("Internal micro-controller halt", "Drain the node and reset the GPU.", "error"),
    63: ("ECC page retirement or row remapping recorded", "Reset the GPU when idle so the remap takes effect; "
         "replace it if remapping fails.", "warning"),
    64: ("ECC page retirement or row remapper failure", "Drain the node and replace the GPU.", "error"),
    68: ("Video processor exception", "Restart the workload; reset the GPU if it recurs.", "warning"),
    69: ("Graphics engine class error", "Restart the workload; reset the GPU if it recurs.", "warning"),
    74: ("NVLink error", "Check the NVLink topology; drain and reset; replace the board if it recurs.", "error"),
    79: ("GPU has fallen off the bus", "Drain the node and reset the GPU (node reboot); replace it if it recurs.",
         "error"),
    92: ("High single-bit ECC error rate", "Watch it; schedule a replacement if it keeps rising.", "warning"),
    94: ("Contained ECC error", "The affected application was stopped; restart it. Reset the GPU when idle.",
         "warning"),
    95: ("Uncontained ECC error", "Drain the node and reset the GPU: every process on it is affected.", "error"),
    119: ("GSP RPC timeout", "Drain the node and reset the GPU; update the driver if it recurs.", "error"),
    120: ("GSP error", "Drain the node and reset the GPU; update the driver if it recurs.", "error"),
}
# XIDs that mean the card itself is failing, whatever the device plugin says.
FAILING_XIDS = {48, 62, 64, 74, 79, 95, 119, 120}
THERMAL_LIMIT_C = 85.0
JOIN_LABELS = "UUID, GPU_I_ID, GPU_I_PROFILE, namespace, pod, Hostname, gpu, modelName"
# The hourly rollup's queries: each aggregate in ROLLUP_SHARDS slices of the fleet by the card's index (`gpu`, a label
# with a handful of values, so the matcher costs Prometheus nothing; the last slice takes every other value and the
# series without one), ROLLUP_IN_FLIGHT queries evaluated at once.
ROLLUP_SHARDS = 4
ROLLUP_SHARD_GPUS = ("0|1", "2|3", "4|5")
ROLLUP_IN_FLIGHT = 3


class TelemetryError(PortalError):
    """Prometheus could not answer: `state` is the TelemetrySource state it means."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


# ------------------------------------------------------------------------------------------------ the client


@dataclass
class Answer:
    """One query's series (labels, value or [(t, value)]) and whether Prometheus flagged the answer partial."""

    series: list[tuple[dict[str, str], Any]]
    warnings: list[str] = field(default_factory=list)


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) or math.isinf(value) else value


class PrometheusClient:
    """Plain HTTP against the Prometheus API with connect and read timeouts; errors become `TelemetryError`."""

    def __init__(self, url: str, *, timeout: float | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout or (settings.PORTAL_PROMETHEUS_CONNECT_TIMEOUT + settings.PORTAL_PROMETHEUS_READ_TIMEOUT)

    def _get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310 - an admin-configured http(s) URL, checked by the model
            f"{self.url}{path}", data=urllib.parse.urlencode(params).encode(), method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                body = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise TelemetryError(f"Prometheus answered {exc.code}: {detail}", TelemetrySource.State.ERROR) from exc
        except TimeoutError as exc:
            raise TelemetryError(f"Prometheus did not answer within {self.timeout:.0f} s",
                                 TelemetrySource.State.SLOW) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError | socket.timeout):
                raise TelemetryError(f"Prometheus did not answer within {self.timeout:.0f} s",
                                     TelemetrySource.State.SLOW) from exc
            raise TelemetryError(f"Prometheus unreachable: {exc.reason}", TelemetrySource.State.DOWN) from exc
        except OSError as exc:
            raise TelemetryError(f"Prometheus unreachable: {exc}", TelemetrySource.State.DOWN) from exc
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise TelemetryError("Prometheus answered something that is not JSON", TelemetrySource.State.ERROR) \
                from exc
        if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(doc.get("data"), dict):
            error = doc.get("error", "malformed answer") if isinstance(doc, dict) else "malformed answer"
            raise TelemetryError(f"Prometheus query failed: {str(error)[:300]}", TelemetrySource.State.ERROR)
        return doc

    def query(self, expr: str, at: dt.datetime | None = None) -> Answer:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        doc = self._get("/api/v1/query", params)
        out = []
        for item in doc["data"].get("result") or []:
            if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
                continue
            value = item.get("value")
            number = _number(value[1]) if isinstance(value, list) and len(value) == 2 else None
            if number is not None:
                out.append(({str(k): str(v) for k, v in item["metric"].items()}, number))
        return Answer(out, [str(w) for w in doc.get("warnings") or []])

    def query_range(self, expr: str, start: dt.datetime, end: dt.datetime, step: float) -> Answer:
        doc = self._get("/api/v1/query_range", {"query": expr, "start": f"{start.timestamp():.3f}",
                                                 "end": f"{end.timestamp():.3f}", "step": f"{step:g}"})
        out = []
        for item in doc["data"].get("result") or []:
            if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
                continue
            points = []
            for pair in item.get("values") or []:
                if isinstance(pair, list) and len(pair) == 2:
                    number, moment = _number(pair[1]), _number(pair[0])
                    if number is not None and moment is not None:
                        points.append((moment, number))
            out.append(({str(k): str(v) for k, v in item["metric"].items()}, points))
        return Answer(out, [str(w) for w in doc.get("warnings") or []])


def source_for(cluster: Cluster) -> TelemetrySource:
    source, _ = TelemetrySource.objects.get_or_create(cluster=cluster)
    return source


def client_for(source: TelemetrySource, *, timeout: float | None = None) -> PrometheusClient | None:
    url = source.prometheus_url or settings.PORTAL_PROMETHEUS_URL
    return PrometheusClient(url, timeout=timeout) if url else None


LIVE_TIMEOUT = 5.0  # a page waits at most this long for Prometheus, then says it has no live telemetry


def _selector(source: TelemetrySource) -> str:
    if not source.cluster_label:
        return ""
    value = source.cluster.name.replace("\\", "\\\\").replace('"', '\\"')
    return f'{source.cluster_label}="{value}"'


# ------------------------------------------------------------------------------------------------ the join


def _series_key(labels: dict[str, str]) -> tuple[str, str, str, str]:
    return (labels.get("UUID", ""), labels.get("GPU_I_ID", ""), labels.get("namespace", ""), labels.get("pod", ""))


@dataclass
class Holding:
    interval_id: int
    holder_kind: str
    holder_uid: str
    namespace: str
    name: str
    resource: str
    node_name: str
    started_at: dt.datetime
    ended_at: dt.datetime | None


@dataclass(slots=True)
class UnitRow:
    """The columns of an inventory unit (`Device`) the join and the findings read."""

    pk: int
    key: str
    path: str
    mode: str
    unit: str
    node_name: str
    resource_name: str
    parent: str
    mig_profile: str
    reserved_for: str  # the holding claim's reservedFor, as text (pod names are searched in it)
    health: str
    unhealthy: int
    cards: float


class Join:
    """The cluster's units and the allocation intervals overlapping one window, indexed the ways DCGM labels
    point at them."""

    def __init__(self, cluster: Cluster, start: dt.datetime, end: dt.datetime) -> None:
        self.cluster = cluster
        self.plugin: dict[tuple[str, str], UnitRow] = {}
        self.plugin_cards: dict[str, list[UnitRow]] = defaultdict(list)
        self.dra_cards: dict[str, UnitRow] = {}
        self.dra_parts: dict[tuple[str, str], list[UnitRow]] = defaultdict(list)
        self.by_key: dict[str, UnitRow] = {}
        # Plain rows, not model instances: 65,000 devices of `large` in tens of MB (attributes are read only for the
        # DRA cards' uuid, and dropped).
        columns = ("pk", "key", "path", "mode", "unit", "node_name", "resource_name", "parent", "mig_profile",
                   "reserved_for", "health", "unhealthy", "cards")
        for values in Device.objects.filter(cluster=cluster).values_list(*columns).iterator(chunk_size=5000):
            device = UnitRow(*values[:9], str(values[9] or ""), *values[10:])  # type: ignore[call-arg]
            self.by_key[device.key] = device
            if device.path == Path.DEVICE_PLUGIN:
                self.plugin[(device.node_name, device.resource_name)] = device
                if device.mode in (Mode.WHOLE, Mode.TIME_SLICING, Mode.MPS):
                    self.plugin_cards[device.node_name].append(device)
            elif device.mode == Mode.DRA_PARTITION:
                self.dra_parts[(device.parent, device.mig_profile)].append(device)
        for key, driver, attributes in Device.objects.filter(cluster=cluster, path=Path.DRA).exclude(
                mode=Mode.DRA_PARTITION).values_list("key", "driver", "attributes").iterator(chunk_size=2000):
            uuid = dra_attribute(attributes or {}, "uuid", driver)
            if isinstance(uuid, str) and uuid and key in self.by_key:
                self.dra_cards[uuid] = self.by_key[key]
        self.pods: dict[tuple[str, str], list[Holding]] = defaultdict(list)
        self.claims: dict[str, list[Holding]] = defaultdict(list)
        rows = AllocationInterval.objects.filter(cluster=cluster, started_at__lt=end).filter(
            Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        for row in rows.values_list("id", "holder_kind", "holder_uid", "namespace", "name", "resource", "node_name",
                                    "started_at", "ended_at"):
            holding = Holding(*row)
            if holding.holder_kind == AllocationInterval.HolderKind.POD:
                self.pods[(holding.namespace, holding.name)].append(holding)
            else:
                self.claims[holding.resource].append(holding)
        self.tenants = dict(TenantNamespace.objects.filter(
            cluster=cluster).values_list("namespace", "tenant_id"))

    @staticmethod
    def _longest(holdings: list[Holding], start: dt.datetime, end: dt.datetime) -> Holding | None:
        def overlap(h: Holding) -> float:
            return ((min(h.ended_at or end, end) - max(h.started_at, start)).total_seconds())

        candidates = [h for h in holdings if overlap(h) > 0]
        return max(candidates, key=overlap) if candidates else None

    def resolve(self, labels: dict[str, str], start: dt.datetime, end: dt.datetime
                ) -> tuple[UnitRow | None, Holding | None]:
        """The unit a series belongs to and who held it in [start, end)."""
        device: UnitRow | None
        uuid, profile = labels.get("UUID", ""), labels.get("GPU_I_PROFILE", "")
        namespace, pod = labels.get("namespace", ""), labels.get("pod", "")
        if uuid in self.dra_cards and not profile:
            device = self.dra_cards[uuid]
            return device, self._dra_holder(device, namespace, start, end)
        if profile and (uuid, profile) in self.dra_parts:
            parts = self.dra_parts[(uuid, profile)]
            # the partition whose claim is in the pod's namespace (and, today, is reserved for the pod)
            ranked = sorted(parts, key=lambda d: (pod not in d.reserved_for, d.key))
            for device in ranked:
                holder = self._dra_holder(device, namespace, start, end)
                if holder is not None and (not namespace or holder.namespace == namespace):
                    return device, holder
            return (ranked[0] if ranked else None), None
        node = labels.get("Hostname", "")
        if profile:
            device = self.plugin.get((node, f"nvidia.com/mig-{profile}")) or self.plugin.get((node, "nvidia.com/gpu"))
            resource = device.resource_name if device else ""
        else:
            cards = self.plugin_cards.get(node, [])
            device, resource = (cards[0], cards[0].resource_name) if cards else (None, "")
        if not pod or device is None:
            return device, None
        held = [h for h in self.pods.get((namespace, pod), []) if h.node_name == node]
        if not profile:
            by_resource = {h.resource: h for h in held}
            for card in self.plugin_cards.get(node, []):
                if card.resource_name in by_resource:
                    device, resource = card, card.resource_name
                    break
        holder = self._longest([h for h in held if h.resource == resource], start, end)
        return device, holder

    def _dra_holder(self, device: UnitRow, namespace: str, start: dt.datetime, end: dt.datetime) -> Holding | None:
        holdings = self.claims.get(device.key, [])
        same = [h for h in holdings if h.namespace == namespace] if namespace else []
        return self._longest(same or holdings, start, end)


# ------------------------------------------------------------------------------------------------ the rollup


@dataclass
class Row:
    labels: dict[str, str]
    samples: int = 0
    util_mean: float | None = None
    util_p95: float | None = None
    mem: float | None = None
    temp: float | None = None
    energy: float | None = None
    xid: set[int] = field(default_factory=set)


def _fetch_hour(client: PrometheusClient, selector: str, end: dt.datetime) -> tuple[dict[tuple[Any, ...], Row], list[str]]:
    """Every series' hour ending at `end`, from Prometheus-side range functions (one value per series).

    Each aggregate is asked in ROLLUP_SHARDS disjoint slices of the fleet (by `gpu`, a grouping label, so no group
    spans two slices and together the answers are exactly those of one query), ROLLUP_IN_FLIGHT at a time:
    Prometheus evaluates a query on one core, so several in flight use its cores while this process parses the
    answers that came back, and each answer is small. Answers are applied in the order of the queries."""
    sel = "{" + selector + "}"
    rows: dict[tuple[Any, ...], Row] = {}
    warnings: list[str] = []
    # Complementary matchers: together they select every series exactly once (the last one also takes the series
    # whose `gpu` is another value, empty or absent).
    taken = ROLLUP_SHARD_GPUS[:max(0, ROLLUP_SHARDS - 1)]
    shards = [f'gpu=~"{values}"' for values in taken] + ([f'gpu!~"{"|".join(taken)}"'] if taken else [""])

    def sliced(expr: str, shard: str) -> str:
        return expr.replace("{SEL}", "{" + ",".join(p for p in (selector, shard) if p) + "}")

    def run(expr: str) -> tuple[list[tuple[tuple[str, str, str, str], dict[str, str], float]], list[str]]:
        # Only the labels the join reads come back (not instance, job, pci_bus_id, …): a third of the answer's size.
        answer = client.query(f"max by ({JOIN_LABELS}) ({expr})", end)
        # Parsed here, in the worker, while the other queries are evaluated; label values interned so that the
        # answers of one series share their strings.
        out = []
        for labels, value in answer.series:
            labels = {k: intern(v) for k, v in labels.items()}
            out.append((_series_key(labels), labels, value))
        return out, answer.warnings

    def run_range(expr: str) -> tuple[list[tuple[dict[str, str], list[tuple[float, float]]]], list[str]]:
        answer = client.query_range(expr, end - HOUR, end, 60)
        return answer.series, answer.warnings

    util = "DCGM_FI_DEV_GPU_UTIL"
    queries = [("samples", f"count_over_time({ENGINE}{{SEL}}[1h])"), ("mean", f"avg_over_time({ENGINE}{{SEL}}[1h])"),
               ("p95", f"quantile_over_time(0.95, {ENGINE}{{SEL}}[1h])"),
               ("mem", "max_over_time(DCGM_FI_DEV_FB_USED{SEL}[1h])"),
               ("temp", "max_over_time(DCGM_FI_DEV_GPU_TEMP{SEL}[1h])"),
               ("energy", "increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{SEL}[1h]) / 1000")]
    util_queries = [("util_samples", f"count_over_time({util}{{SEL}}[1h])"),
                    ("util_mean", f"avg_over_time({util}{{SEL}}[1h]) / 100"),
                    ("util_p95", f"quantile_over_time(0.95, {util}{{SEL}}[1h]) / 100")]
    card_temp: dict[str, float] = {}
    card_energy: dict[tuple[Any, ...], float] = {}
    xid: dict[str, set[int]] = defaultdict(set)
    pool = ThreadPoolExecutor(max_workers=ROLLUP_IN_FLIGHT)
    try:
        # Cards without the profiling (DCP) fields fall back to GPU_UTIL (%): asked for only when some card lacks
        # them (an instant check of the latest samples, cheap), so a fleet with DCP reads each sample once per
        # aggregate. The check runs alongside the first aggregates.
        check = pool.submit(run, f"count({util}{sel} unless on (UUID, GPU_I_ID, namespace, pod) {ENGINE}{sel})")
        pending = [(name, pool.submit(run, sliced(expr, shard))) for name, expr in queries for shard in shards]
        xid_pending = [pool.submit(run_range, sliced("DCGM_FI_DEV_XID_ERRORS{SEL} > 0", shard)) for shard in shards]
        found, check_warnings = check.result()
        warnings.extend(check_warnings)
        if found:
            pending += [(name, pool.submit(run, sliced(expr, shard))) for name, expr in util_queries
                        for shard in shards]
        for name, future in pending:
            series, answer_warnings = future.result()
            warnings.extend(answer_warnings)
            _apply_answer(name, series, rows, card_temp, card_energy)
            del series
        for xid_future in xid_pending:
            points_series, answer_warnings = xid_future.result()
            warnings.extend(answer_warnings)
            for labels, points in points_series:
                xid[labels.get("UUID", "")].update(int(v) for _, v in points)
    finally:
        # a failed read fails the rollup: the queries not started yet are not worth running
        pool.shutdown(wait=True, cancel_futures=True)
    _spread_card_fields(rows, card_temp, card_energy, xid)
    return rows, warnings


def _apply_answer(name: str, series: list[tuple[tuple[str, str, str, str], dict[str, str], float]],
                  rows: dict[tuple[Any, ...], Row], card_temp: dict[str, float],
                  card_energy: dict[tuple[Any, ...], float]) -> None:
    """One aggregate's answer into the rows (and the card-level temperature and energy, spread afterwards)."""
    for key, labels, value in series:
        if name == "samples":
            rows.setdefault(key, Row(labels)).samples = int(value)
        elif name in ("mean", "p95"):
            setattr(rows.setdefault(key, Row(labels)), "util_mean" if name == "mean" else "util_p95", value)
        elif name == "mem" and key in rows:
            rows[key].mem = value
        elif name == "temp":
            # card-level fields (temperature, energy, XID) carry no GPU_I_ID on MIG cards: spread below
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


def _spread_card_fields(rows: dict[tuple[Any, ...], Row], card_temp: dict[str, float],
                        card_energy: dict[tuple[Any, ...], float], xid: dict[str, set[int]]) -> None:
    """Card-level temperature, XID codes and energy onto every row of the card (MIG instances, shared replicas)."""
    per_card: dict[str, list[Row]] = defaultdict(list)
    for row in rows.values():
        per_card[row.labels.get("UUID", "")].append(row)
    # the whole card's energy (the first series of the card without a GPU instance), looked up once per card: a
    # scan of every card's energy per MIG instance was quadratic (100 s of a 40,000-GPU fleet's rollup)
    whole_energy: dict[str, float] = {}
    for key, value in card_energy.items():
        if not key[1]:
            whole_energy.setdefault(key[0], value)
    for uuid, card_rows in per_card.items():
        instances = [r for r in card_rows if r.labels.get("GPU_I_ID")]
        # a card shared by replicas (time-slicing, MPS, a shared claim) has one series per pod, each with the
        # card's energy: split it evenly so that sums over holders count the card once
        sharing = max(1, len(card_rows) - len(instances))
        for row in card_rows:
            row.temp = card_temp.get(uuid)
            row.xid = set(xid.get(uuid, set()))
            key = _series_key(row.labels)
            if key in card_energy:
                row.energy = card_energy[key] / sharing
            elif instances and row in instances:
                whole = whole_energy.get(uuid)
                slices = _slices(row.labels.get("GPU_I_PROFILE", ""))
                row.energy = None if whole is None else whole * slices / 7


def _slices(profile: str) -> int:
    head = profile.split("g.", 1)[0]
    return int(head) if head.isdigit() else 7


def rollup_hour(cluster: Cluster, hour: dt.datetime, *, client: PrometheusClient | None = None,
                source: TelemetrySource | None = None) -> dict[str, Any]:
    """Roll one finished hour up (replacing what was stored for it); raises TelemetryError on a failed read."""
    from portal.chargeback.services import mappings

    source = source or source_for(cluster)
    client = client or client_for(source)
    if client is None:
        raise TelemetryError("No Prometheus configured (PORTAL_PROMETHEUS_URL)", TelemetrySource.State.UNCONFIGURED)
    start, end = hour, hour + HOUR
    # Prometheus evaluates the hour (HTTP only in that thread and its pool) while this thread reads the units and
    # intervals from the database.
    with ThreadPoolExecutor(max_workers=1) as fetcher:
        fetched = fetcher.submit(_fetch_hour, client, _selector(source), end)
        join = Join(cluster, start, end)
        rows, warnings = fetched.result()
    expected = 3600 / settings.PORTAL_TELEMETRY_SCRAPE_SECONDS
    resolved = [(row, *join.resolve(row.labels, start, end)) for row in rows.values()]
    offering_of = mappings({(cluster.pk, h.resource, h.node_name if h.holder_kind == "pod" else "")
                            for _, _, h in resolved if h is not None})
    columns = ("cluster_id", "hour", "device_id", "device_key", "unit_kind", "node_name", "gpu_uuid", "gpu_index",
               "gpu_instance", "gpu_profile", "model", "pod_namespace", "pod_name", "interval_id", "holder_kind",
               "holder_uid", "namespace", "holder_name", "resource", "tenant_id", "offering_id", "samples",
               "coverage", "util_mean", "util_p95", "mem_used_mib", "energy_j", "temp_max", "xid_codes")

    def build(row: Row, device: UnitRow | None, holder: Holding | None) -> tuple[Any, ...]:
        """The row's column values, in `columns` order (plain tuples: no model instance per row)."""
        labels = row.labels
        offering_id = None
        if holder is not None:
            offering_id = offering_of.get((cluster.pk, holder.resource,
                                           holder.node_name if holder.holder_kind == "pod" else ""))
        return (
            cluster.pk, start, device.pk if device else None, device.key if device else "",
            device.mode if device else "", labels.get("Hostname", ""), labels.get("UUID", ""),
            labels.get("gpu", ""), labels.get("GPU_I_ID", ""), labels.get("GPU_I_PROFILE", ""),
            labels.get("modelName", ""), labels.get("namespace", ""), labels.get("pod", ""),
            holder.interval_id if holder else None, holder.holder_kind if holder else "",
            holder.holder_uid if holder else "", holder.namespace if holder else "", holder.name if holder else "",
            holder.resource if holder else "", join.tenants.get(holder.namespace) if holder else None, offering_id,
            row.samples, min(1.0, row.samples / expected) if expected else 0, row.util_mean, row.util_p95, row.mem,
            row.energy, row.temp, sorted(row.xid))

    with transaction.atomic():
        UtilizationRollup.objects.filter(cluster=cluster, hour=start).delete()
        if connection.vendor == "postgresql":
            # One COPY streams the rows (no model instance, no parameterised INSERT per batch); xid_codes as JSON.
            meta = UtilizationRollup._meta
            column_of = {f.attname: str(f.column) for f in meta.concrete_fields}
            names = ", ".join(connection.ops.quote_name(column_of[c]) for c in columns)
            with connection.cursor() as cursor, cursor.cursor.copy(
                    f"COPY {connection.ops.quote_name(meta.db_table)} ({names}) FROM STDIN") as copy:
                for item in resolved:
                    values = build(*item)
                    copy.write_row((*values[:-1], json.dumps(values[-1])))
        else:
            # Model instances built and inserted a batch at a time: memory stays flat whatever the fleet's size.
            for first in range(0, len(resolved), 5000):
                UtilizationRollup.objects.bulk_create([UtilizationRollup(**dict(zip(columns, build(*item), strict=True)))
                                                       for item in resolved[first:first + 5000]])
    return {"hour": start.isoformat(), "series": len(rows), "rows": len(resolved), "warnings": warnings,
            "unmatched": sum(1 for _, d, _ in resolved if d is None)}


def _record(source: TelemetrySource, state: str, message: str, *, success: bool) -> None:
    now = timezone.now()
    source.state, source.message, source.checked_at = state, message[:2000], now
    fields = ["state", "message", "checked_at"]
    if success:
        source.last_success_at = now
        fields.append("last_success_at")
    source.save(update_fields=fields)


def telemetry_refresh_cluster(cluster: Cluster, *, now: dt.datetime | None = None,
                              client: PrometheusClient | None = None) -> dict[str, Any]:
    """Roll up the finished hours not rolled up yet (at most PORTAL_TELEMETRY_BACKFILL_HOURS back), then refresh
    the findings. Never raises for Prometheus trouble: the state says what happened."""
    now = now or timezone.now()
    source = source_for(cluster)
    client = client or client_for(source)
    if client is None:
        _record(source, TelemetrySource.State.UNCONFIGURED, "No Prometheus configured (PORTAL_PROMETHEUS_URL).",
                success=False)
        return {"state": source.state}
    current = now.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    earliest = current - dt.timedelta(hours=settings.PORTAL_TELEMETRY_BACKFILL_HOURS)
    hour = max(source.rolled_up_to or earliest, earliest)
    done: list[dict[str, Any]] = []
    warnings: list[str] = []
    try:
        while hour < current:
            result = rollup_hour(cluster, hour, client=client, source=source)
            warnings.extend(result["warnings"])
            done.append(result)
            hour += HOUR
            source.rolled_up_to = hour
            source.save(update_fields=["rolled_up_to"])
        found = findings_refresh(cluster, client=client, source=source, now=now)
    except TelemetryError as exc:
        _record(source, exc.state, str(exc), success=False)
        log.warning("telemetry of %s: %s", cluster.name, exc)
        return {"state": source.state, "message": str(exc), "hours": len(done)}
    partial = warnings or found.get("missing")
    state = TelemetrySource.State.PARTIAL if partial else TelemetrySource.State.OK
    message = "; ".join(dict.fromkeys(warnings))[:500] if warnings else (
        f"{found['missing']} device(s) without telemetry" if found.get("missing") else "")
    _record(source, state, message, success=True)
    return {"state": state, "hours": len(done), "findings": found}


def telemetry_refresh() -> dict[str, Any]:
    """Beat: one task per cluster (a slow Prometheus holds only its own cluster's task)."""
    from portal.telemetry.tasks import telemetry_cluster_refresh_task

    clusters = list(Cluster.objects.values_list("pk", flat=True))
    for pk in clusters:
        telemetry_cluster_refresh_task.delay(pk)
    return {"clusters": len(clusters)}


# ------------------------------------------------------------------------------------------------ findings


def _idle_policies() -> dict[int, tuple[float, int]]:
    return {p.offering_id: (p.threshold, p.hours) for p in IdlePolicy.objects.all()}


def idle_threshold(offering_id: int | None, policies: dict[int, tuple[float, int]] | None = None
                   ) -> tuple[float, int]:
    policies = _idle_policies() if policies is None else policies
    return policies.get(offering_id or 0, (settings.PORTAL_IDLE_THRESHOLD, settings.PORTAL_IDLE_HOURS))


def _idle_findings(cluster: Cluster, latest: dt.datetime | None) -> list[TelemetryFinding]:
    if latest is None:
        return []
    policies = _idle_policies()
    longest = max([h for _, h in policies.values()] + [settings.PORTAL_IDLE_HOURS])
    rows = UtilizationRollup.objects.filter(cluster=cluster, hour__gt=latest - longest * HOUR,
                                            hour__lte=latest).exclude(holder_uid="")
    series: dict[tuple[Any, ...], dict[dt.datetime, UtilizationRollup]] = defaultdict(dict)
    for row in rows:
        series[(row.holder_kind, row.holder_uid, row.gpu_uuid, row.gpu_instance)][row.hour] = row
    out = []
    for hours in series.values():
        last = hours.get(latest)
        if last is None:
            continue
        threshold, need = idle_threshold(last.offering_id, policies)
        found = [hours.get(latest - i * HOUR) for i in range(need)]
        window = [r for r in found if r is not None and r.util_mean is not None]
        if len(window) < need or any((r.util_mean or 0.0) >= threshold or r.coverage < 0.5 for r in window):
            continue
        unit = f"{last.gpu_uuid}" + (f"/{last.gpu_profile}#{last.gpu_instance}" if last.gpu_instance else "")
        out.append(TelemetryFinding(
            cluster=cluster, kind=TelemetryFinding.Kind.IDLE, severity="warning",
            subject=f"{last.holder_kind}/{last.namespace}/{last.holder_name} {unit}", node_name=last.node_name,
            namespace=last.namespace, tenant_id=last.tenant_id, offering_id=last.offering_id,
            message=(f"{last.holder_kind} {last.namespace}/{last.holder_name} holds {last.device_key or unit} but "
                     f"its engine activity was {last.util_mean:.1%} (< {threshold:.0%}) for {need} h."),
            action="Ask the owner to release it (scale down, delete the pod or claim) or to use it.",
            evidence={"hours": [r.hour.isoformat() for r in window], "util_mean": [r.util_mean for r in window],
                      "threshold": threshold, "device": last.device_key, "gpu_uuid": last.gpu_uuid,
                      "gpu_instance": last.gpu_instance}))
    return out


def findings_refresh(cluster: Cluster, *, client: PrometheusClient, source: TelemetrySource | None = None,
                     now: dt.datetime | None = None) -> dict[str, int]:
    """Recompute the cluster's telemetry findings: idle from the rollups, the rest from the live metrics."""
    source = source or source_for(cluster)
    sel = "{" + _selector(source) + "}"
    at = now or timezone.now()
    xid = client.query(f"DCGM_FI_DEV_XID_ERRORS{sel} > 0", at)
    present = client.query(f"count by (Hostname, UUID) (DCGM_FI_DEV_GPU_TEMP{sel})", at)
    temps = client.query(f"max_over_time(DCGM_FI_DEV_GPU_TEMP{sel}[10m]) >= {THERMAL_LIMIT_C:g}", at)
    join = Join(cluster, at - HOUR, at)
    found: list[TelemetryFinding] = []
    failing_nodes: dict[str, list[str]] = defaultdict(list)
    for labels, value in xid.series:
        code = int(value)
        meaning, action, severity = XID_CATALOGUE.get(code, ("Unknown XID", "See NVIDIA's XID catalogue.",
                                                             "warning"))
        uuid, node = labels.get("UUID", ""), labels.get("Hostname", "")
        subject = f"{node}/gpu{labels.get('gpu', '?')} {uuid} XID {code}"
        if any(f.subject == subject for f in found):
            continue
        found.append(TelemetryFinding(
            cluster=cluster, kind=TelemetryFinding.Kind.XID, severity=severity, subject=subject, node_name=node,
            message=f"XID {code} on {node} GPU {labels.get('gpu', '?')} ({labels.get('modelName', '')}): {meaning}.",
            action=action, evidence={"code": code, "uuid": uuid, "gpu": labels.get("gpu", "")}))
        if code in FAILING_XIDS:
            failing_nodes[node].append(f"GPU {labels.get('gpu', '?')}: XID {code} ({meaning})")
    for labels, value in temps.series:
        node = labels.get("Hostname", "")
        subject = f"{node}/gpu{labels.get('gpu', '?')} {labels.get('UUID', '')}"
        if not any(f.subject == subject and f.kind == TelemetryFinding.Kind.THERMAL for f in found):
            found.append(TelemetryFinding(
                cluster=cluster, kind=TelemetryFinding.Kind.THERMAL, severity="warning", subject=subject,
                node_name=node, message=f"{node} GPU {labels.get('gpu', '?')} reached {value:.0f} °C "
                                        f"(≥ {THERMAL_LIMIT_C:.0f} °C): it throttles its clocks.",
                action="Check the node's cooling and airflow; spread hot jobs.",
                evidence={"temp_max_c": value}))
    # Devices that should report: device-plugin nodes by card count, DRA cards by UUID.
    seen_uuids = {labels.get("UUID", "") for labels, _ in present.series}
    cards_seen: dict[str, int] = defaultdict(int)
    for labels, _ in present.series:
        cards_seen[labels.get("Hostname", "")] += 1
    missing = 0
    for node, cards in join.plugin_cards.items():
        expected = round(sum(d.cards for d in cards))
        if not expected or cards_seen.get(node, 0) >= expected:
            continue
        gap = expected - cards_seen.get(node, 0)
        missing += gap
        failing_nodes[node].append(f"{gap} of {expected} GPU(s) report no telemetry")
        found.append(TelemetryFinding(
            cluster=cluster, kind=TelemetryFinding.Kind.MISSING, severity="error", subject=f"node/{node}",
            node_name=node, message=f"{node}: {gap} of {expected} GPUs report no DCGM telemetry.",
            action="Check dcgm-exporter on the node; a GPU without telemetry may have fallen off the bus "
                   "(dmesg: XID 79): drain and reset it.",
            evidence={"expected": expected, "reporting": cards_seen.get(node, 0)}))
    for uuid, device in join.dra_cards.items():
        if uuid not in seen_uuids:
            missing += 1
            failing_nodes[device.node_name].append(f"{device.key}: no telemetry")
            found.append(TelemetryFinding(
                cluster=cluster, kind=TelemetryFinding.Kind.MISSING, severity="error", subject=device.key,
                node_name=device.node_name, message=f"{device.key} ({uuid}) reports no DCGM telemetry.",
                action="Check dcgm-exporter on the node; drain and reset the GPU if it fell off the bus.",
                evidence={"uuid": uuid}))
    for node, problems in failing_nodes.items():
        devices = [d for d in join.by_key.values() if d.node_name == node]
        if devices and all(d.unhealthy == 0 and d.health == "ok" for d in devices):
            found.append(TelemetryFinding(
                cluster=cluster, kind=TelemetryFinding.Kind.PLUGIN_DCGM, severity="error", subject=f"node/{node}",
                node_name=node, message=f"{node}: the device plugin / DRA driver reports every device healthy, "
                                        f"DCGM does not: {'; '.join(problems)}.",
                action="Cordon and drain the node, reset the GPU(s); the plugin will keep scheduling onto them "
                       "until then.", evidence={"problems": problems}))
    found += _idle_findings(cluster, source.rolled_up_to - HOUR if source.rolled_up_to else None)
    _replace_findings(cluster, found)
    counts: dict[str, int] = defaultdict(int)
    for f in found:
        counts[f.kind] += 1
    return {**counts, "missing": missing}


def _replace_findings(cluster: Cluster, found: Iterable[TelemetryFinding]) -> None:
    """Keep first_seen_at of findings that persist; delete the ones that cleared."""
    found = list(found)
    with transaction.atomic():
        existing = {(f.kind, f.subject): f for f in TelemetryFinding.objects.select_for_update().filter(
            cluster=cluster)}
        keep = set()
        for f in found:
            key = (f.kind, f.subject)
            keep.add(key)
            old = existing.get(key)
            if old is None:
                f.save()
                continue
            for name in ("severity", "node_name", "namespace", "tenant_id", "offering_id", "message", "action",
                         "evidence"):
                setattr(old, name, getattr(f, name))
            old.save()
        stale = [f.pk for key, f in existing.items() if key not in keep]
        if stale:
            TelemetryFinding.objects.filter(pk__in=stale).delete()


# ------------------------------------------------------------------------------------------------ live


def live_units(cluster: Cluster, *, namespaces: set[str] | None = None, minutes: int = 60
               ) -> tuple[list[dict[str, Any]], str]:
    """The held DCGM entities right now, each with its last hour's engine activity (a sparkline) and an idle
    flag; `namespaces` restricts to a tenant's. Returns (units, problem) — problem is "" or what went wrong."""
    source = source_for(cluster)
    client = client_for(source, timeout=LIVE_TIMEOUT)
    if client is None:
        return [], "No Prometheus configured for this cluster."
    sel = _selector(source)
    pod_filter = 'pod!=""'
    selector = "{" + ",".join(p for p in (sel, pod_filter) if p) + "}"
    end = timezone.now()
    try:
        answer = client.query_range(f"{ENGINE}{selector}", end - dt.timedelta(minutes=minutes), end, 60)
    except TelemetryError as exc:
        return [], str(exc)
    join = Join(cluster, end - dt.timedelta(minutes=minutes), end)
    policies = _idle_policies()
    out = []
    for labels, points in answer.series:
        if namespaces is not None and labels.get("namespace", "") not in namespaces:
            continue
        device, holder = join.resolve(labels, end - dt.timedelta(minutes=5), end)
        values = [v for _, v in points]
        recent = values[-5:]
        current = recent[-1] if recent else None
        threshold, _ = idle_threshold(None, policies)
        out.append({
            "namespace": labels.get("namespace", ""), "pod": labels.get("pod", ""), "node": labels.get("Hostname", ""),
            "gpu": labels.get("gpu", ""), "uuid": labels.get("UUID", ""), "instance": labels.get("GPU_I_ID", ""),
            "profile": labels.get("GPU_I_PROFILE", ""), "model": labels.get("modelName", ""),
            "device": device, "holder": holder, "current": current, "series": values,
            "mean": sum(values) / len(values) if values else None,
            "idle": bool(recent) and max(recent) < threshold})
    out.sort(key=lambda u: (u["namespace"], u["pod"], u["node"], u["gpu"], u["instance"]))
    return out, ""


def sparkline(values: list[float], width: int = 120, height: int = 24) -> str:
    """SVG polyline points for 0..1 values (the template draws it; no JavaScript)."""
    if not values:
        return ""
    step = width / max(1, len(values) - 1)
    return " ".join(f"{i * step:.1f},{height - max(0.0, min(1.0, v)) * height:.1f}" for i, v in enumerate(values))
