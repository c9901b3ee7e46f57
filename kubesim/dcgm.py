"""dcgm-exporter-compatible metrics per node, computed from the simulator's live objects.

One `/dcgm/<node>/metrics` endpoint per GPU node serves what NVIDIA's dcgm-exporter (default counters plus the DCP
`DCGM_FI_PROF_*` fields and the volatile ECC totals) would serve there: the same metric names, HELP/TYPE lines and
label set (`gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, `GPU_I_PROFILE`
/ `GPU_I_ID` on MIG instances, and the `namespace` / `pod` / `container` of the workload using the device, as the
exporter's Kubernetes mapping (kubelet pod-resources API) sets them).

Which pod uses which card follows the objects: device-plugin pods take whole cards, replicas (time-slicing, MPS:
one series per pod, carrying the card's values — the card is DCGM's finest grain there) or MIG instances of their
resource in name order; DRA devices go to the pods in their claim's `reservedFor` (a DRA MIG partition appears as
a MIG instance of its parent card). Values are deterministic functions of (seed, device, pod, time): training pods
are busy, inference pods bursty, a configurable share of allocated pods idle, unallocated cards idle; XID events
and GPUs off the bus come from the scenario's `telemetry:` section (docs/kubesim-scenarios.md) or are set at run
time (`Simulator.telemetry`).
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

# (name, type, help) exactly as dcgm-exporter's counters CSV declares them.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned."),
)
# Fields DCGM reports per MIG instance (GPU_I_ID / GPU_I_PROFILE); the others are the card's (GPU_UTIL is not
# supported on MIG-enabled cards at all).
INSTANCE_FIELDS = {"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                   "DCGM_FI_PROF_SM_ACTIVE"}
XID_CODES = {13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120}
_PROFILE = re.compile(r"^(\d)g\.(\d+)gb$")
_TRAINING = re.compile(r"train|pretrain|finetune|fine-tune|llm|bert|resnet", re.I)
_INFERENCE = re.compile(r"infer|serve|serving|triton|vllm|embed|notebook|predict", re.I)
_IDLE_POWER = 55.0
BOOT = 1_700_000_000.0  # when every simulated card booted (the energy counter counts from here)


class TelemetryError(ValueError):
    pass


def _frac(*parts: Any) -> float:
    digest = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass
class Holder:
    namespace: str
    pod: str
    container: str
    profile: str  # "training", "inference", "idle", "other"


@dataclass
class Unit:
    """One DCGM entity as the exporter labels it: a card, or a MIG instance of one."""

    node: str
    index: int
    uuid: str
    model: str
    memory_mib: int
    driver: str
    instance_id: int | None = None
    instance_profile: str = ""
    holders: list[Holder] = field(default_factory=list)


@dataclass
class TelemetryConfig:
    """What the scenario's `telemetry:` section says; mutable at run time (tests, demo) under the simulator's lock."""

    idle_share: float = 0.0
    idle_pods: set[str] = field(default_factory=set)  # pod names, or workload prefixes ending in "-"
    busy_pods: set[str] = field(default_factory=set)
    xid: dict[tuple[str, int], int] = field(default_factory=dict)  # (node, gpu index) -> last XID
    off_bus: set[tuple[str, int]] = field(default_factory=set)
    hot: set[tuple[str, int]] = field(default_factory=set)  # (node, gpu) running at its thermal limit

    @classmethod
    def parse(cls, raw: Any) -> TelemetryConfig:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise TelemetryError("telemetry: expected a mapping")
        unknown = set(raw) - {"idleShare", "idlePods", "busyPods", "xid", "offBus", "hot"}
        if unknown:
            raise TelemetryError(f"telemetry: unknown keys {', '.join(sorted(unknown))}")
        share = raw.get("idleShare", 0)
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
            raise TelemetryError("telemetry.idleShare: a number between 0 and 1")
        config = cls(idle_share=float(share), idle_pods=set(_names(raw, "idlePods")),
                     busy_pods=set(_names(raw, "busyPods")))
        for i, event in enumerate(_entries(raw, "xid")):
            code = event.get("code")
            if code not in XID_CODES:
                raise TelemetryError(f"telemetry.xid[{i}].code: one of {sorted(XID_CODES)}")
            config.xid[_device(event, f"telemetry.xid[{i}]")] = code
        config.off_bus = {_device(e, f"telemetry.offBus[{i}]") for i, e in enumerate(_entries(raw, "offBus"))}
        config.hot = {_device(e, f"telemetry.hot[{i}]") for i, e in enumerate(_entries(raw, "hot"))}
        return config


def _names(raw: dict[str, Any], key: str) -> list[str]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TelemetryError(f"telemetry.{key}: a list of pod names or workload prefixes")
    return value


def _entries(raw: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise TelemetryError(f"telemetry.{key}: a list of mappings")
    return value


def _device(entry: dict[str, Any], ctx: str) -> tuple[str, int]:
    node, gpu = entry.get("node"), entry.get("gpu")
    if not isinstance(node, str) or not node or isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
        raise TelemetryError(f"{ctx}: needs node (a name) and gpu (an index)")
    return node, gpu


def _model_name(label: str) -> str:
    """GFD's product label back to NVML's name (dashes for spaces, sharing suffixes)."""
    base = re.sub(r"-(SHARED|MIG-.*)$", "", label)
    return base.replace("-", " ")


def _requests(pod: dict[str, Any]) -> tuple[str, dict[str, int]]:
    out: dict[str, int] = {}
    first = ""
    for c in pod.get("spec", {}).get("containers", []) or []:
        limits = (c.get("resources") or {}).get("limits") or {}
        for name, value in limits.items():
            if name.startswith("nvidia.com/"):
                try:
                    out[name] = out.get(name, 0) + int(str(value))
                except ValueError:
                    continue
                first = first or c.get("name", "")
    return first, out


class Telemetry:
    """Renders the exporter's text format for a node at a moment, from the store's current objects."""

    def __init__(self, store: Any, seed: int = 0, config: TelemetryConfig | None = None) -> None:
        self.store = store
        self.seed = seed
        self.config = config or TelemetryConfig()
        self.lock = threading.Lock()
        self._snap: dict[str, Any] | None = None  # set by all_units() for one pass over a fleet

    def _objects(self, plural: str) -> list[dict[str, Any]]:
        """The stored objects themselves (read only here): no deep copy per call."""
        return [so.obj for so in self.store.sorted_objects(plural)]

    def _snapshot(self) -> dict[str, Any]:
        """Running pods by node and by uid, slices by node, and the pods using each DRA device, in one pass."""
        if self._snap is not None:
            return self._snap
        by_node: dict[str, list[dict[str, Any]]] = {}
        by_uid: dict[tuple[str, str], dict[str, Any]] = {}
        for p in self._objects("pods"):
            if p.get("status", {}).get("phase") == "Running":
                by_node.setdefault(p.get("spec", {}).get("nodeName", ""), []).append(p)
                by_uid[(p["metadata"].get("namespace", ""), p["metadata"].get("uid", ""))] = p
        slices: dict[str, list[dict[str, Any]]] = {}
        for sl in self._objects("resourceslices"):
            slices.setdefault((sl.get("spec") or {}).get("nodeName", ""), []).append(sl)
        users: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for c in self._objects("resourceclaims"):
            status = c.get("status") or {}
            ns = c["metadata"].get("namespace", "")
            using = [by_uid[(ns, r.get("uid", ""))] for r in status.get("reservedFor") or []
                     if r.get("resource") == "pods" and (ns, r.get("uid", "")) in by_uid]
            for r in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
                if not r.get("adminAccess"):
                    users.setdefault((r.get("driver", ""), r.get("pool", ""), r.get("device", "")), []).extend(using)
        return {"pods": by_node, "slices": slices, "users": users}

    def all_units(self) -> dict[str, list[Unit]]:
        """Every GPU node's units from one snapshot (a fleet of thousands of nodes in seconds)."""
        with self.lock:
            self._snap = self._snapshot()
            try:
                return {node: self.units(node) or [] for node in self.gpu_nodes()}
            finally:
                self._snap = None

    # ---------------------------------------------------------------- topology
    def gpu_nodes(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self._objects("nodes")
                      if (n["metadata"].get("labels") or {}).get("nvidia.com/gpu.present") == "true")

    def _profile(self, pod: dict[str, Any]) -> str:
        name, meta = pod["metadata"]["name"], pod["metadata"]
        cfg = self.config
        prefixes = [p for p in cfg.idle_pods if p.endswith("-")]
        if name in cfg.busy_pods:
            return "training"
        if name in cfg.idle_pods or any(name.startswith(p) for p in prefixes):
            return "idle"
        if cfg.idle_share and _frac(self.seed, "idle", meta.get("namespace", ""), name) < cfg.idle_share:
            return "idle"
        if _TRAINING.search(name):
            return "training"
        if _INFERENCE.search(name):
            return "inference"
        return "other"

    def _holder(self, pod: dict[str, Any], container: str) -> Holder:
        meta = pod["metadata"]
        return Holder(meta.get("namespace", ""), meta["name"], container, self._profile(pod))

    def units(self, node_name: str) -> list[Unit] | None:
        """The node's DCGM entities and who uses each (None: no such node)."""
        if self._snap is not None:
            return self._units(node_name)
        self._snap = self._snapshot()
        try:
            return self._units(node_name)
        finally:
            self._snap = None

    def _units(self, node_name: str) -> list[Unit] | None:
        node = self.store.get("nodes", None, node_name)
        if node is None:
            return None
        labels = node["metadata"].get("labels") or {}
        if labels.get("nvidia.com/gpu.present") != "true":
            return []
        if labels.get("nvidia.com/gpu.deploy.device-plugin") == "false":
            return self._dra_units(node_name)
        return self._plugin_units(node, labels)

    def _card(self, node: str, index: int, model: str, memory: int, driver: str) -> Unit:
        from .scenario.common import _uid

        return Unit(node, index, "GPU-" + _uid(self.seed, "gpu", node, str(index)), model, memory, driver)

    def _running_pods(self, node_name: str) -> list[dict[str, Any]]:
        pods = list(self._snapshot()["pods"].get(node_name, []))
        return sorted(pods, key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"]))

    def _plugin_units(self, node: dict[str, Any], labels: dict[str, str]) -> list[Unit]:
        name = node["metadata"]["name"]
        model = _model_name(labels.get("nvidia.com/gpu.product", "NVIDIA-GPU"))
        driver = labels.get("nvidia.com/cuda.driver-version.full", "")
        strategy = labels.get("nvidia.com/mig.strategy", "")
        capacity = (node.get("status") or {}).get("capacity") or {}
        try:
            count = int(labels.get("nvidia.com/gpu.count", "0"))
            replicas = max(1, int(labels.get("nvidia.com/gpu.replicas", "1")))
            memory = int(labels.get("nvidia.com/gpu.memory", "0"))
        except ValueError:
            return []
        pods = self._running_pods(name)
        if strategy:
            return self._mig_units(name, labels, model, driver, count, strategy, pods)
        cards = [self._card(name, i, model, memory, driver) for i in range(count)]
        if not cards or "nvidia.com/gpu" not in capacity:
            return cards
        slot = 0
        for pod in pods:
            container, wants = _requests(pod)
            for _ in range(wants.get("nvidia.com/gpu", 0)):
                # whole cards in order; replicas spread over the cards (slot k on card k mod cards)
                card = cards[slot % len(cards)] if replicas > 1 else (cards[slot] if slot < len(cards) else None)
                slot += 1
                if card is not None:
                    card.holders.append(self._holder(pod, container))
        return cards

    def _mig_units(self, name: str, labels: dict[str, str], model: str, driver: str, count: int, strategy: str,
                   pods: list[dict[str, Any]]) -> list[Unit]:
        from .scenario.gpus import MIG_CONFIGS

        layout = MIG_CONFIGS.get(labels.get("nvidia.com/mig.config", ""), {})
        if not layout:
            return []
        cards_n = count // sum(layout.values()) if strategy == "single" else count
        units: list[Unit] = []
        free: dict[str, list[Unit]] = {}
        for i in range(cards_n):
            card = self._card(name, i, model, 0, driver)
            gi = 1
            for profile, per in sorted(layout.items(), key=lambda kv: -int(kv[0][0])):
                match = _PROFILE.match(profile)
                memory = int(match.group(2)) * 1024 - 256 if match else 0
                for _ in range(per):
                    inst = Unit(name, i, card.uuid, model, memory, driver, gi, profile)
                    resource = "nvidia.com/gpu" if strategy == "single" else f"nvidia.com/mig-{profile}"
                    free.setdefault(resource, []).append(inst)
                    units.append(inst)
                    gi += 1
        for pod in pods:
            container, wants = _requests(pod)
            for resource, n in wants.items():
                for _ in range(n):
                    if free.get(resource):
                        free[resource].pop(0).holders.append(self._holder(pod, container))
        return units

    def _dra_units(self, node_name: str) -> list[Unit]:
        snap = self._snapshot()
        devices: dict[tuple[str, str, str], dict[str, Any]] = {}
        for sl in snap["slices"].get(node_name, []):
            spec = sl.get("spec") or {}
            pool = (spec.get("pool") or {}).get("name", "")
            for d in spec.get("devices") or []:
                devices[(spec.get("driver", ""), pool, d.get("name", ""))] = d
        on_node = {id(p) for p in self._running_pods(node_name)}
        users = {key: [p for p in pods if id(p) in on_node] for key, pods in snap["users"].items()
                 if key in devices}
        users = {key: pods for key, pods in users.items() if pods}
        cards: dict[str, Unit] = {}
        instances: list[Unit] = []
        for key, d in sorted(devices.items(), key=lambda kv: kv[0]):
            attrs = {k: next(iter(v.values())) for k, v in (d.get("attributes") or {}).items() if isinstance(v, dict)}
            kind = attrs.get("type")
            if kind == "gpu" and isinstance(attrs.get("uuid"), str):
                memory = (d.get("capacity") or {}).get("memory", {}).get("value", "0")
                unit = Unit(node_name, int(attrs.get("index", 0)), attrs["uuid"],
                            str(attrs.get("productName", "NVIDIA GPU")), _mib(memory),
                            str(attrs.get("driverVersion", "")))
                unit.holders = [self._holder(p, _first_container(p)) for p in users.get(key, [])]
                cards.setdefault(unit.uuid, unit)
            elif kind == "mig" and key in users:
                # DRA creates a MIG instance when it allocates the partition: DCGM sees only allocated ones.
                memory = (d.get("capacity") or {}).get("memory", {}).get("value", "0")
                inst = Unit(node_name, int(attrs.get("parentIndex", 0)), str(attrs.get("parentUUID", "")),
                            str(attrs.get("productName", "NVIDIA GPU")), _mib(memory),
                            str(attrs.get("driverVersion", "")), 0, str(attrs.get("profile", "")))
                inst.holders = [self._holder(p, _first_container(p)) for p in users[key]]
                instances.append(inst)
        ordinal: dict[str, int] = {}
        for inst in instances:
            ordinal[inst.uuid] = ordinal.get(inst.uuid, 0) + 1
            inst.instance_id = ordinal[inst.uuid]
            parent = cards.get(inst.uuid)
            if parent is not None:
                inst.model = parent.model
        return sorted(cards.values(), key=lambda u: u.index) + instances

    # ---------------------------------------------------------------- values
    def _activity(self, unit: Unit, holder: Holder | None, at: float) -> float:
        """Graphics-engine activity (0..1) at a moment; deterministic per 15 s step."""
        step = int(at // 15)
        jitter = _frac(self.seed, unit.uuid, unit.instance_id, step)
        if holder is None:
            return 0.0
        if holder.profile == "idle":
            return round(0.01 * jitter, 4)
        if holder.profile == "training":
            return round(0.85 + 0.12 * jitter, 4)
        if holder.profile == "inference":
            # bursts: a few minutes on, a few off, phase per pod
            phase = _frac(self.seed, holder.pod, "phase") * 600
            wave = math.sin((at + phase) / 600 * 2 * math.pi)
            return round(max(0.02, min(0.95, 0.35 + 0.45 * wave + 0.1 * (jitter - 0.5))), 4)
        return round(0.45 + 0.2 * jitter, 4)

    def _card_activity(self, card: Unit, instances: list[Unit], at: float) -> float:
        if instances:
            total = sum(self._activity(i, i.holders[0] if i.holders else None, at) * _slices(i) for i in instances)
            return min(1.0, total / 7)
        return max((self._activity(card, h, at) for h in card.holders), default=0.0)

    def render(self, node_name: str, at: float | None = None, *, timestamps: bool = False,
               units: list[Unit] | None = None) -> str | None:
        """The exporter's text exposition for one node (None: no such node). `timestamps`: OpenMetrics-style
        sample timestamps for backfilling history with `promtool tsdb create-blocks-from openmetrics`; `units`:
        the node's units computed once for many moments."""
        at = time.time() if at is None else at
        with self.lock:
            units = self.units(node_name) if units is None else units
            if units is None:
                return None
            lines: dict[str, list[str]] = {name: [] for name, _, _ in METRICS}
            self._samples(node_name, units, at, lines)
        suffix = f" {at:.3f}" if timestamps else ""
        out = []
        for name, kind, help_text in METRICS:
            if not timestamps:
                out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            out.extend(f"{line}{suffix}\n" for line in lines[name])
        return "".join(out)

    def _samples(self, node_name: str, units: list[Unit], at: float, lines: dict[str, list[str]]) -> None:
        cards = [u for u in units if u.instance_id is None]
        by_parent: dict[str, list[Unit]] = {}
        for u in units:
            if u.instance_id is not None:
                by_parent.setdefault(u.uuid, []).append(u)
        # MIG-mode device-plugin nodes have no card entities in the list: make them from their instances
        seen = {c.uuid for c in cards}
        for uuid, insts in by_parent.items():
            if uuid not in seen:
                first = insts[0]
                cards.append(Unit(node_name, first.index, uuid, first.model, 0, first.driver))
        for card in sorted(cards, key=lambda c: c.index):
            if (node_name, card.index) in self.config.off_bus:
                continue  # fallen off the bus: DCGM cannot read the card at all
            insts = by_parent.get(card.uuid, [])
            base = _labels(card, node_name)
            holders: list[Holder | None] = list(card.holders) or [None]
            if insts:
                holders = [None]  # card-level fields of a MIG card carry no pod (instances do)
            activity = self._card_activity(card, insts, at)
            xid = self.config.xid.get((node_name, card.index), 0)
            hot = (node_name, card.index) in self.config.hot
            temp = 88 if hot else round(32 + 45 * activity + 3 * _frac(self.seed, card.uuid, "t", int(at // 60)))
            power = round(_IDLE_POWER + 500 * activity, 3)
            rate = _IDLE_POWER + 500 * self._mean_rate(card, insts)
            energy = int((at - BOOT) * rate * 1000)
            dbe = 1 if xid == 48 else 0
            sbe = int(_frac(self.seed, card.uuid, "sbe") * 3)
            for holder in holders:
                lab = base + _pod_labels(holder)
                lines["DCGM_FI_DEV_GPU_TEMP"].append(f"DCGM_FI_DEV_GPU_TEMP{{{lab}}} {temp}")
                lines["DCGM_FI_DEV_POWER_USAGE"].append(f"DCGM_FI_DEV_POWER_USAGE{{{lab}}} {power}")
                lines["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].append(
                    f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{lab}}} {energy}")
                if not insts:
                    util = round(100 * activity)
                    lines["DCGM_FI_DEV_GPU_UTIL"].append(f"DCGM_FI_DEV_GPU_UTIL{{{lab}}} {util}")
                lines["DCGM_FI_DEV_XID_ERRORS"].append(f"DCGM_FI_DEV_XID_ERRORS{{{lab}}} {xid}")
                lines["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"].append(f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{lab}}} {sbe}")
                lines["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"].append(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{lab}}} {dbe}")
                if not insts:
                    self._instance_lines(card, holder, lab, at, lines)
            for inst in insts:
                holder = inst.holders[0] if inst.holders else None
                for h in (list[Holder | None](inst.holders) or [None]):
                    lab = _labels(inst, node_name) + _pod_labels(h)
                    self._instance_lines(inst, holder, lab, at, lines)

    def _mean_rate(self, card: Unit, insts: list[Unit]) -> float:
        """The activity the energy counter integrates: the holders' typical level (keeps the counter monotonic)."""
        levels = {"training": 0.9, "inference": 0.35, "other": 0.55, "idle": 0.005}
        if insts:
            return min(1.0, sum(levels[i.holders[0].profile] * _slices(i) for i in insts if i.holders) / 7)
        return max((levels[h.profile] for h in card.holders), default=0.0)

    def _instance_lines(self, unit: Unit, holder: Holder | None, lab: str, at: float,
                        lines: dict[str, list[str]]) -> None:
        activity = self._activity(unit, holder, at)
        total = unit.memory_mib or 81559
        if holder is None:
            used = 0
        elif holder.profile == "idle":
            used = int(total * 0.3)  # a model loaded, nothing running
        else:
            used = int(total * (0.5 + 0.4 * activity))
        lines["DCGM_FI_DEV_FB_FREE"].append(f"DCGM_FI_DEV_FB_FREE{{{lab}}} {total - used}")
        lines["DCGM_FI_DEV_FB_USED"].append(f"DCGM_FI_DEV_FB_USED{{{lab}}} {used}")
        lines["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].append(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{lab}}} {activity}")
        sm = round(activity * 0.92, 4)
        lines["DCGM_FI_PROF_SM_ACTIVE"].append(f"DCGM_FI_PROF_SM_ACTIVE{{{lab}}} {sm}")


def _slices(unit: Unit) -> int:
    match = _PROFILE.match(unit.instance_profile)
    return int(match.group(1)) if match else 7


def _mib(quantity: str) -> int:
    units = {"Gi": 1024, "Mi": 1, "Ki": 1 / 1024, "G": 1e9 / 2**20, "M": 1e6 / 2**20}
    for suffix, factor in units.items():
        if str(quantity).endswith(suffix):
            try:
                return int(float(str(quantity)[: -len(suffix)]) * factor)
            except ValueError:
                return 0
    try:
        return int(int(str(quantity)) / 2**20)
    except ValueError:
        return 0


def _first_container(pod: dict[str, Any]) -> str:
    containers = pod.get("spec", {}).get("containers") or [{}]
    return str(containers[0].get("name", ""))


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(unit: Unit, node: str) -> str:
    bus = f"00000000:{(0x18 + 0x11 * unit.index) % 256:02X}:00.0"
    parts = [f'gpu="{unit.index}"', f'UUID="{_escape(unit.uuid)}"', f'pci_bus_id="{bus}"',
             f'device="nvidia{unit.index}"', f'modelName="{_escape(unit.model)}"', f'Hostname="{_escape(node)}"',
             f'DCGM_FI_DRIVER_VERSION="{_escape(unit.driver)}"']
    if unit.instance_id is not None:
        parts += [f'GPU_I_PROFILE="{_escape(unit.instance_profile)}"', f'GPU_I_ID="{unit.instance_id}"']
    return ",".join(parts)


def _pod_labels(holder: Holder | None) -> str:
    if holder is None:
        return ""  # the exporter sets the mapping labels only on devices a pod uses
    return (f',container="{_escape(holder.container)}",namespace="{_escape(holder.namespace)}",'
            f'pod="{_escape(holder.pod)}"')
