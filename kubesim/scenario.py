"""Scenario layer of kubesim: expand a declarative YAML scenario into Kubernetes objects.

``load_scenario("demo" | "large" | "empty" | "upstream" | "sharing" | "dra-sharing" | path | dict, seed=0)`` returns a list of complete, JSON-able
Kubernetes objects (Namespaces, ConfigMaps, DeviceClasses, Nodes, ResourceSlices, ResourceQuotas,
ResourceClaimTemplates, ResourceClaims, Pods, Events, in that order). The output is deterministic for a given scenario and seed.
The format is documented in ``docs/kubesim-scenarios.md``.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import math
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from .apis import PROFILES

__all__ = ["BUILTIN_SCENARIOS", "ScenarioError", "load_scenario", "parse_quantity", "scenario_api_profile"]

SCENARIO_DIR = Path(__file__).with_name("scenarios")
BUILTIN_SCENARIOS = (
    "demo",
    "large",
    "empty",
    "upstream",
    "sharing",
    "dra-sharing",
    "legacy-no-dra",
    "legacy-dra-v1beta1",
    "legacy-dra-v1beta2",
    "legacy-no-events",
    "kueue",
)
EPOCH = datetime(2026, 1, 15, 8, 0, 0, tzinfo=UTC)
DRIVER = "gpu.nvidia.com"
POOL_LABEL = "kubesim.io/node-pool"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_COUNTERS = 64
OBJECT_KIND_ORDER = (
    "Namespace",
    "ConfigMap",
    "DeviceClass",
    "Node",
    "ResourceSlice",
    "ResourceQuota",
    "LimitRange",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "Pod",
    "Event",
)
ALL_MODE_QUOTA = 32  # AllocationResultsMaxSize, what quota charges for allocationMode All
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"  # DeviceClass without extendedResourceName
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
# The device plugin's Allocate error for more than one shared unit per container (NVIDIA/k8s-device-plugin,
# internal/rm/rm.go ValidateRequest, wrapped by internal/plugin/server.go Allocate), as the kubelet reports it
# (pkg/kubelet/cm admission: "Allocate failed due to %v, which is unexpected"; rejectPod: "Pod was rejected: ").
# kubesim is standalone, so the portal's copy (catalog/sharing.py) is not imported; tests compare the two.
SHARED_REQUEST_ERROR = (
    'invalid allocation request for "{resource}": invalid request: maximum request size for shared resources is 1; '
    "found {count}"
)
ADMISSION_ERROR_REASON = "UnexpectedAdmissionError"

CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
HOST_DEVICE_VOLUME = "host-device"
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PROFILE_RE = re.compile(r"^(\d)g\.(\d+)gb$")


class ScenarioError(ValueError):
    """A scenario cannot be loaded: bad YAML, unknown keys, impossible placement, ..."""


# --------------------------------------------------------------------------------------------------------------
# GPU catalogue (defaults; every field can be overridden in a pool's ``gpu`` block)
# --------------------------------------------------------------------------------------------------------------
GPU_MODELS: dict[str, dict[str, Any]] = {
    "NVIDIA-H100-80GB-HBM3": {
        "productName": "NVIDIA H100 80GB HBM3",
        "memoryMiB": 81559,
        "family": "hopper",
        "computeMajor": 9,
        "computeMinor": 0,
        "migCapable": True,
        "smPerSlice": 16,
    },
    "NVIDIA-H200": {
        "productName": "NVIDIA H200",
        "memoryMiB": 143771,
        "family": "hopper",
        "computeMajor": 9,
        "computeMinor": 0,
        "migCapable": True,
        "smPerSlice": 16,
    },
    "NVIDIA-A100-SXM4-80GB": {
        "productName": "NVIDIA A100-SXM4-80GB",
        "memoryMiB": 81920,
        "family": "ampere",
        "computeMajor": 8,
        "computeMinor": 0,
        "migCapable": True,
        "smPerSlice": 14,
    },
    "NVIDIA-A100-SXM4-40GB": {
        "productName": "NVIDIA A100-SXM4-40GB",
        "memoryMiB": 40960,
        "family": "ampere",
        "computeMajor": 8,
        "computeMinor": 0,
        "migCapable": True,
        "smPerSlice": 14,
    },
    "Tesla-T4": {
        "productName": "Tesla T4",
        "memoryMiB": 15360,
        "family": "turing",
        "computeMajor": 7,
        "computeMinor": 5,
        "migCapable": False,
        "smPerSlice": 0,
    },
    "NVIDIA-L4": {
        "productName": "NVIDIA L4",
        "memoryMiB": 23034,
        "family": "ada-lovelace",
        "computeMajor": 8,
        "computeMinor": 9,
        "migCapable": False,
        "smPerSlice": 0,
    },
    "NVIDIA-L40S": {
        "productName": "NVIDIA L40S",
        "memoryMiB": 46068,
        "family": "ada-lovelace",
        "computeMajor": 8,
        "computeMinor": 9,
        "migCapable": False,
        "smPerSlice": 0,
    },
}
# MIG geometry for 7-slice / 8-memory-slice GPUs (A100, H100, H200): profile g -> (memory slices, placements)
MIG_GEOMETRY = {1: (1, [0, 1, 2, 3, 4, 5, 6]), 2: (2, [0, 2, 4]), 3: (4, [0, 4]), 4: (4, [0]), 7: (8, [0])}
MIG_PROFILE_IDS = {1: 19, 2: 14, 3: 9, 4: 5, 7: 0}
# Named nvidia.com/mig.config layouts (per card) of the GPU Operator's default mig-parted config (80 GB cards)
MIG_CONFIGS = {
    "all-1g.10gb": {"1g.10gb": 7},
    "all-2g.20gb": {"2g.20gb": 3},
    "all-3g.40gb": {"3g.40gb": 2},
    "all-7g.80gb": {"7g.80gb": 1},
    "all-balanced": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
    "all-1g.5gb": {"1g.5gb": 7},
}
CLIQUE_LABEL = "nvidia.com/gpu.clique"
PCI_BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db", "1b", "2b", "3b", "5e", "9b", "ac", "bb", "dc"]
MODES = ("whole", "mig", "time-slicing", "mps", "dra", "cpu")
# nvidia.com/mig.config.state as the GPU Operator's MIG manager sets it
MIG_CONFIG_STATES = ("success", "pending", "rebooting", "failed")
STATES = ("running", "pending", "failed", "succeeded", "creating", "crashloop", "scheduled")


# --------------------------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------------------------
def _digest(*parts: Any) -> bytes:
    return hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()


def _uid(seed: int, kind: str, namespace: str, name: str) -> str:
    return str(uuid.UUID(bytes=_digest(seed, kind, namespace, name)[:16], version=4))


def _suffix(n: int, *parts: Any) -> str:
    h = _digest(*parts)
    return "".join(SUFFIX_ALPHABET[b % len(SUFFIX_ALPHABET)] for b in h[:n])


def _frac(*parts: Any) -> float:
    return int.from_bytes(_digest(*parts)[:4], "big") / 2**32


def _ts(offset_seconds: float = 0) -> str:
    return (EPOCH + timedelta(seconds=int(offset_seconds))).strftime("%Y-%m-%dT%H:%M:%SZ")


_QTY_RE = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_QTY_MULT = {
    None: 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def parse_quantity(value: Any, ctx: str = "quantity") -> Fraction:
    """Parse a Kubernetes quantity ("500m", "64Gi", 8, "1.5") into an exact Fraction."""
    if isinstance(value, bool):
        raise ScenarioError(f"{ctx}: {value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    m = _QTY_RE.match(str(value).strip())
    if not m:
        raise ScenarioError(f"{ctx}: {value!r} is not a valid Kubernetes quantity")
    num = Fraction(m.group(1)) * (Fraction(10) ** int(m.group(2)[1:]) if m.group(2) else 1)
    return num * _QTY_MULT[m.group(3)]


def _fmt_cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _fmt_bytes(n: int) -> str:
    for suffix, mult in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


def _fmt_quantity(value: Fraction, binary: bool) -> str:
    """A quantity as the API server prints it: 20Gi (binary capacities), 500M, 1500m, 7."""
    if value.denominator == 1:
        n = int(value)
        for suffix, mult in (_BINARY_SUFFIXES if binary else ()) + _DECIMAL_SUFFIXES:
            if n and n % mult == 0:
                return f"{n // mult}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{int(milli)}m"
    return str(float(value))


_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL_SUFFIXES = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


# --------------------------------------------------------------------------------------------------------------
# consumable capacity (KEP-5075), the rules of kube-scheduler's structured allocator:
# what a request consumes of every capacity of a device with allowMultipleAllocations, and whether it fits
# --------------------------------------------------------------------------------------------------------------
@dataclass
class CapacityPolicy:
    default: Fraction | None = None
    values: tuple[Fraction, ...] = ()  # validValues, ascending
    ranged: bool = False
    low: Fraction | None = None
    high: Fraction | None = None
    step: Fraction | None = None


def _capacity_policy(raw: Any, ctx: str) -> CapacityPolicy:
    _check_keys(raw, {"default", "validValues", "validRange"}, ctx)
    default = parse_quantity(raw["default"], f"{ctx}.default") if raw.get("default") is not None else None
    if raw.get("validValues") is not None and raw.get("validRange") is not None:
        raise ScenarioError(f"{ctx}: give validValues or validRange, not both")
    if raw.get("validRange") is not None:
        rng = _check_keys(raw["validRange"], {"min", "max", "step"}, f"{ctx}.validRange", ("min",))
        return CapacityPolicy(
            default=default,
            ranged=True,
            low=parse_quantity(rng["min"], f"{ctx}.validRange.min"),
            high=parse_quantity(rng["max"], f"{ctx}.validRange.max") if rng.get("max") is not None else None,
            step=parse_quantity(rng["step"], f"{ctx}.validRange.step") if rng.get("step") is not None else None,
        )
    values = tuple(sorted(parse_quantity(v, f"{ctx}.validValues") for v in _list(raw, "validValues", ctx)))
    return CapacityPolicy(default=default, values=values)


def _policy_json(policy: CapacityPolicy, binary: bool) -> dict:
    out: dict[str, Any] = {}
    if policy.default is not None:
        out["default"] = _fmt_quantity(policy.default, binary)
    if policy.ranged:
        rng = {"min": _fmt_quantity(policy.low, binary)}
        if policy.high is not None:
            rng["max"] = _fmt_quantity(policy.high, binary)
        if policy.step is not None:
            rng["step"] = _fmt_quantity(policy.step, binary)
        out["validRange"] = rng
    elif policy.values:
        out["validValues"] = [_fmt_quantity(v, binary) for v in policy.values]
    return out


def _consumed_amount(requested: Fraction | None, total: Fraction, policy: CapacityPolicy | None) -> Fraction | None:
    """The amount one request consumes of one capacity, or None when the request policy refuses it."""
    if requested is None:
        amount = policy.default if policy is not None and policy.default is not None else total
    elif policy is None:
        amount = requested
    elif policy.ranged and policy.low is not None:
        if requested < policy.low:
            amount = policy.low
        elif policy.step:
            steps = -(-(requested - policy.low) // policy.step)
            amount = policy.low + policy.step * steps
        else:
            amount = requested
    else:
        amount = next((v for v in policy.values if requested <= v), requested)
    if policy is None or (policy.default is not None and amount == policy.default):
        return amount
    if policy.ranged:
        if policy.high is not None and amount > policy.high:
            return None
        if policy.step and (amount - (policy.low or 0)) % policy.step:
            return None
    elif policy.values and amount not in policy.values:
        return None
    return amount


def _check_keys(d: Any, allowed: set[str], ctx: str, required: tuple[str, ...] = ()) -> dict:
    if not isinstance(d, dict):
        raise ScenarioError(f"{ctx}: expected a mapping, got {type(d).__name__}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ScenarioError(
            f"{ctx}: unknown key(s) {', '.join(map(str, unknown))}; allowed: {', '.join(sorted(allowed))}"
        )
    for key in required:
        if key not in d:
            raise ScenarioError(f"{ctx}: missing required key {key!r}")
    return d


def _list(d: dict, key: str, ctx: str) -> list:
    value = d.get(key) or []
    if not isinstance(value, list):
        raise ScenarioError(f"{ctx}.{key}: expected a list")
    return value


def _int(value: Any, ctx: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{ctx}: expected an integer, got {value!r}")
    if value < minimum:
        raise ScenarioError(f"{ctx}: must be >= {minimum}, got {value}")
    return value


def _label(name: Any, ctx: str) -> str:
    if not isinstance(name, str) or not DNS_LABEL.match(name):
        raise ScenarioError(f"{ctx}: {name!r} is not a valid DNS label (lowercase alphanumerics and '-', max 63)")
    return name


def _subdomain(name: Any, ctx: str) -> str:
    if not isinstance(name, str) or not DNS_SUBDOMAIN.match(name):
        raise ScenarioError(f"{ctx}: {name!r} is not a valid DNS subdomain")
    return name


def _version_parts(v: str, n: int, ctx: str) -> list[int]:
    try:
        parts = [int(p) for p in str(v).split(".")]
    except ValueError as exc:
        raise ScenarioError(f"{ctx}: {v!r} is not a dotted version") from exc
    return (parts + [0] * n)[:n]


def _semver(v: str, ctx: str) -> str:
    return ".".join(str(p) for p in _version_parts(v, 3, ctx))


def _cel_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _match_to_cel(match: dict, ctx: str, with_driver: bool) -> str:
    _check_keys(match, {"driver", "attributes"}, ctx)
    driver = match.get("driver", DRIVER)
    terms = [f"device.driver == {_cel_literal(driver)}"] if with_driver else []
    attrs = match.get("attributes") or {}
    if not isinstance(attrs, dict):
        raise ScenarioError(f"{ctx}.attributes: expected a mapping")
    domain = driver
    for key, value in attrs.items():
        if "/" in key:
            dom, _, ident = key.rpartition("/")
            terms.append(f"device.attributes[{_cel_literal(dom)}].{ident} == {_cel_literal(value)}")
        else:
            terms.append(f"device.attributes[{_cel_literal(domain)}].{key} == {_cel_literal(value)}")
    return " && ".join(terms) if terms else "true"


# --------------------------------------------------------------------------------------------------------------
# internal model
# --------------------------------------------------------------------------------------------------------------
@dataclass
class Device:
    name: str
    node: str
    driver: str
    attrs: dict[str, Any]  # flat attribute values used for matching
    consumes: dict[str, dict[str, int]]  # counterSet -> counter -> amount
    allocated: bool = False
    tainted: bool = False  # NoSchedule/NoExecute device taint: claims (which carry no tolerations) cannot use it
    # capacity name (without the driver's domain) -> (value, request policy, published with a binary suffix)
    capacity: dict[str, tuple[Fraction, CapacityPolicy | None, bool]] = field(default_factory=dict)
    multi: bool = False  # allowMultipleAllocations: claims share it by consumable capacity
    consumed: dict[str, Fraction] = field(default_factory=dict)  # what allocated shares consume
    shares: int = 0

    def consumption(self, requests: dict[str, Fraction]) -> dict[str, Fraction] | None:
        """What a request with these capacity requests consumes of every capacity, or None if it cannot."""
        if any(name not in self.capacity for name in requests):
            return None
        out = {}
        for name, (total, policy, _binary) in self.capacity.items():
            amount = _consumed_amount(requests.get(name), total, policy)
            if amount is None:
                return None
            out[name] = amount
        return out

    def fits(self, amounts: dict[str, Fraction], taking: dict[str, Fraction]) -> bool:
        return all(
            self.consumed.get(name, 0) + taking.get(name, 0) + amount <= self.capacity[name][0]
            for name, amount in amounts.items()
        )


@dataclass
class NodeState:
    index: int
    name: str
    pool: str
    uid: str
    labels: dict[str, str]
    taints: list[dict]
    unschedulable: bool
    alloc: dict[str, int]  # cpu in milli, memory in bytes, pods, extended resources
    ip: str
    pod_cidr: str
    used: dict[str, int] = field(default_factory=dict)
    devices: list[Device] = field(default_factory=list)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    pod_count: int = 0
    pod_ip_seq: int = 1
    incomplete: bool = False  # the node's DRA pool publishes fewer slices than resourceSliceCount
    single_unit: set[str] = field(default_factory=set)  # shared resources the device plugin allocates 1 per container
    # The node's history, so that a finished pod ran where it fitted at the time: the requests of the pods placed
    # so far that still run (from their creation) and of the finished ones (while they ran).
    running_since: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    finished: list[tuple[float, float, dict[str, int]]] = field(default_factory=list)


# How long a finished pod ran at most (it starts 2 s after its creation and ends 3600 s after that, or earlier).
FINISHED_RUN = 3700.0


def _fits_history(node: NodeState, start: float, end: float, req: dict[str, int]) -> bool:
    """Whether `req` fitted on the node throughout [start, end) beside the pods placed so far that ran there then:
    the running ones created before `end` and the finished ones whose run overlaps."""
    moments = {start} | {c for c, _ in node.running_since if start < c < end} | {
        s for s, _, _ in node.finished if start < s < end}
    for moment in moments:
        for rname, amount in req.items():
            if not amount:
                continue
            held = sum(r.get(rname, 0) for c, r in node.running_since if c <= moment) + sum(
                r.get(rname, 0) for s, e, r in node.finished if s <= moment < e)
            if held + amount > node.alloc.get(rname, 0):
                return False
    return True


@dataclass
class ClaimState:
    name: str
    namespace: str
    uid: str
    requests: list[dict]  # normalised: name, deviceClassName, count, mode, admin, match, selectors
    config: list
    created: float
    template: str | None = None
    owner_pod: tuple[str, str] | None = None  # (name, uid) for template-generated claims
    pod_claim_name: str | None = None
    results: list[dict] | None = None
    node: str | None = None
    reserved: list[dict] = field(default_factory=list)
    want_allocated: bool = False
    pool: str | None = None
    extended: bool = False  # generated by the scheduler for a pod's DRA-backed extended resources
    constraints: list[dict] = field(default_factory=list)  # matchAttribute constraints: {matchAttribute, requests}


def _tolerates(taint: dict, tolerations: list[dict]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint["effect"]:
            continue
        op = tol.get("operator", "Equal")
        if op == "Exists":
            if not tol.get("key") or tol["key"] == taint["key"]:
                return True
        elif tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


# --------------------------------------------------------------------------------------------------------------
# the builder
# --------------------------------------------------------------------------------------------------------------
class _Builder:
    def __init__(self, spec: dict, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.nodes: list[NodeState] = []
        self.nodes_by_name: dict[str, NodeState] = {}
        self.pool_nodes: dict[str, list[NodeState]] = {}
        self.pool_specs: dict[str, dict] = {}
        self.pool_cursor: dict[str, int] = {}
        self.classes: dict[str, dict] = {}
        self.extended_classes: dict[str, str] = {}  # extended resource name -> DeviceClass serving it (DRA)
        self.namespaces: dict[str, dict] = {}
        self.templates: dict[tuple[str, str], dict] = {}
        self.claims: dict[tuple[str, str], ClaimState] = {}
        self.claim_order: list[ClaimState] = []
        self.pods: list[dict] = []
        self.events: list[dict] = []
        self.pod_names: set[tuple[str, str]] = set()
        self.slices: list[dict] = []
        self.node_objs: list[dict] = []
        self.has_dra = False
        self.pending_cache: dict[int, str] = {}
        self.pod_usage: list[tuple[str, dict[str, int]]] = []  # (namespace, requests) of non-terminal pods
        version = str(spec.get("kubernetesVersion", "v1.35.0"))
        if not re.match(r"^v?\d+\.\d+(\.\d+)?$", version):
            raise ScenarioError(f"kubernetesVersion: {version!r} is not a version like v1.35.0")
        self.k8s_version = "v" + _semver(version.lstrip("v"), "kubernetesVersion")
        style = spec.get("schedulerTaintMessage", "keyed")
        if style not in ("keyed", "generic"):
            raise ScenarioError("schedulerTaintMessage: must be 'keyed' or 'generic'")
        self.taint_style = style

    # ---------------------------------------------------------------- namespaces
    def build_namespaces(self) -> list[dict]:
        out = []
        declared = _list(self.spec, "namespaces", "scenario")
        entries: list[dict] = [{"name": n} for n in SYSTEM_NAMESPACES]
        for i, ns in enumerate(declared):
            ctx = f"namespaces[{i}]"
            _check_keys(ns, {"name", "labels", "annotations", "count", "tenantLabel"}, ctx, ("name",))
            _label(ns["name"], f"{ctx}.name")
            expanded = [ns]
            if "count" in ns:
                n = _int(ns["count"], f"{ctx}.count", 1)
                width = max(2, len(str(n)))
                expanded = []
                for k in range(1, n + 1):
                    nname = _label(f"{ns['name']}-{k:0{width}d}", f"{ctx}.name")
                    labels = dict(ns.get("labels") or {})
                    if ns.get("tenantLabel"):
                        labels[str(ns["tenantLabel"])] = nname
                    expanded.append({"name": nname, "labels": labels, "annotations": ns.get("annotations")})
            for e in expanded:
                if e["name"] in SYSTEM_NAMESPACES:
                    entries = [x for x in entries if x["name"] != e["name"]]
                elif any(x["name"] == e["name"] for x in entries):
                    raise ScenarioError(f"{ctx}: duplicate namespace {e['name']!r}")
                entries.append(e)
        for i, ns in enumerate(entries):
            name = ns["name"]
            labels = {
                "kubernetes.io/metadata.name": name,
                **{str(k): str(v) for k, v in (ns.get("labels") or {}).items()},
            }
            meta: dict[str, Any] = {
                "name": name,
                "uid": _uid(self.seed, "Namespace", "", name),
                "creationTimestamp": _ts(-90 * 86400 + i * 60),
                "labels": labels,
            }
            if ns.get("annotations"):
                meta["annotations"] = {str(k): str(v) for k, v in ns["annotations"].items()}
            obj = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": meta,
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            self.namespaces[name] = obj
            out.append(obj)
        return out

    # ---------------------------------------------------------------- config maps
    def build_configmaps(self) -> list[dict]:
        out = []
        seen: set[tuple[str, str]] = set()
        for i, cm in enumerate(_list(self.spec, "configmaps", "scenario")):
            ctx = f"configmaps[{i}]"
            _check_keys(cm, {"name", "namespace", "data"}, ctx, ("name", "namespace"))
            name = _subdomain(cm["name"], f"{ctx}.name")
            ns = self._ns(cm["namespace"], f"{ctx}.namespace")
            if (ns, name) in seen:
                raise ScenarioError(f"{ctx}: duplicate ConfigMap {ns}/{name}")
            seen.add((ns, name))
            data = cm.get("data") or {}
            if not isinstance(data, dict):
                raise ScenarioError(f"{ctx}.data: expected a mapping")
            for key in data:
                if not isinstance(key, str) or not CONFIG_KEY.match(key):
                    raise ScenarioError(f"{ctx}.data: {key!r} is not a valid config key (alphanumerics, '-', '_', '.')")
            meta = {
                "name": name,
                "namespace": ns,
                "uid": _uid(self.seed, "ConfigMap", ns, name),
                "creationTimestamp": _ts(-7 * 86400 + i * 60),
            }
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": meta,
                    "data": {k: str(v) for k, v in data.items()},
                }
            )
        return out

    def _ns_list(self, pattern: Any, ctx: str) -> list[str]:
        """A namespace name, or ``prefix-*`` for every declared namespace starting with ``prefix-``."""
        if isinstance(pattern, str) and pattern.endswith("*"):
            found = [n for n in self.namespaces if n.startswith(pattern[:-1])]
            if not found:
                raise ScenarioError(f"{ctx}: pattern {pattern!r} matches no declared namespace")
            return found
        return [self._ns(pattern, ctx)]

    def _ns(self, name: Any, ctx: str) -> str:
        if name not in self.namespaces:
            raise ScenarioError(f"{ctx}: namespace {name!r} is not declared under namespaces")
        return name

    # ---------------------------------------------------------------- device classes
    def build_device_classes(self) -> list[dict]:
        out = []
        for i, dc in enumerate(_list(self.spec, "deviceClasses", "scenario")):
            ctx = f"deviceClasses[{i}]"
            _check_keys(dc, {"name", "match", "selectors", "extendedResourceName", "config"}, ctx, ("name",))
            name = _subdomain(dc["name"], f"{ctx}.name")
            if name in self.classes:
                raise ScenarioError(f"{ctx}: duplicate device class {name!r}")
            match = dc.get("match") or {"driver": DRIVER}
            selectors = [{"cel": {"expression": _match_to_cel(match, f"{ctx}.match", True)}}]
            for j, expr in enumerate(_list(dc, "selectors", ctx)):
                if not isinstance(expr, str):
                    raise ScenarioError(f"{ctx}.selectors[{j}]: expected a CEL expression string")
                selectors.append({"cel": {"expression": expr}})
            spec: dict[str, Any] = {"selectors": selectors}
            # DRAExtendedResource: pods may ask for the class through resources.limits, by its implicit name or its
            # extendedResourceName; when two classes share a name, the one created later (listed later) wins.
            self.extended_classes[f"{IMPLICIT_EXTENDED_PREFIX}{name}"] = name
            if dc.get("extendedResourceName"):
                extended = str(dc["extendedResourceName"])
                if "/" not in extended or extended.startswith(("kubernetes.io/", "requests.")):
                    raise ScenarioError(f"{ctx}.extendedResourceName: {extended!r} is not an extended resource name")
                spec["extendedResourceName"] = extended
                self.extended_classes[extended] = name
            if dc.get("config"):
                spec["config"] = copy.deepcopy(dc["config"])
            self.classes[name] = {"match": match, "config": dc.get("config") or []}
            out.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {
                        "name": name,
                        "uid": _uid(self.seed, "DeviceClass", "", name),
                        "creationTimestamp": _ts(-60 * 86400 + i * 10),
                        "generation": 1,
                    },
                    "spec": spec,
                }
            )
        return out

    # ---------------------------------------------------------------- nodes and slices
    POOL_KEYS = {
        "name",
        "count",
        "cpu",
        "memory",
        "pods",
        "ephemeralStorage",
        "instanceType",
        "zones",
        "gpu",
        "mode",
        "mig",
        "timeSlicing",
        "mps",
        "dra",
        "taints",
        "labels",
        "unhealthy",
        "unhealthyNodes",
        "unschedulable",
        "gfdLabels",
        "missingDevicePlugin",
        "machine",
        "cliqueSize",
    }

    def build_nodes(self) -> None:
        pools = _list(self.spec, "nodePools", "scenario")
        zones_default = ["us-east-1a", "us-east-1b", "us-east-1c"]
        for pi, pool in enumerate(pools):
            ctx = f"nodePools[{pi}]"
            _check_keys(pool, self.POOL_KEYS, ctx, ("name", "count"))
            pname = _label(pool["name"], f"{ctx}.name")
            if pname in self.pool_specs:
                raise ScenarioError(f"{ctx}: duplicate pool {pname!r}")
            count = _int(pool["count"], f"{ctx}.count")
            mode = pool.get("mode", "whole" if pool.get("gpu") else "cpu")
            if mode not in MODES:
                raise ScenarioError(f"{ctx}.mode: {mode!r} is not one of {', '.join(MODES)}")
            gpu = self._gpu_spec(pool, mode, ctx)
            self.pool_specs[pname] = {**pool, "mode": mode, "_gpu": gpu}
            self.pool_nodes[pname] = []
            self.pool_cursor[pname] = 0
            taints = []
            for ti, t in enumerate(_list(pool, "taints", ctx)):
                _check_keys(t, {"key", "value", "effect"}, f"{ctx}.taints[{ti}]", ("key", "effect"))
                if t["effect"] not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                    raise ScenarioError(f"{ctx}.taints[{ti}].effect: {t['effect']!r} is not a taint effect")
                taints.append({k: str(v) for k, v in t.items()})
            unschedulable = bool(pool.get("unschedulable", False))
            if unschedulable:
                taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            zones = pool.get("zones") or zones_default
            # NVLink domains (multi-node NVLink, e.g. GB200 NVL72): GFD labels each node nvidia.com/gpu.clique
            # <cluster UUID>.<clique id>; consecutive nodes of the pool form cliques of cliqueSize nodes.
            clique_size = _int(pool["cliqueSize"], f"{ctx}.cliqueSize", 1) if "cliqueSize" in pool else 0
            if clique_size and not pool.get("gpu"):
                raise ScenarioError(f"{ctx}.cliqueSize: only for GPU pools")
            width = max(3, len(str(count)))
            unhealthy = _int(pool.get("unhealthy", 0), f"{ctx}.unhealthy")
            unhealthy_nodes = _int(pool.get("unhealthyNodes", 1 if unhealthy else 0), f"{ctx}.unhealthyNodes")
            missing = pool.get("missingDevicePlugin", False)
            missing_nodes = (
                count if missing is True else (0 if missing is False else _int(missing, f"{ctx}.missingDevicePlugin"))
            )
            if gpu and unhealthy > gpu["perNode"]:
                raise ScenarioError(f"{ctx}.unhealthy: {unhealthy} exceeds gpu.perNode {gpu['perNode']}")
            if unhealthy and mode in ("dra", "cpu"):
                raise ScenarioError(f"{ctx}.unhealthy: only supported for device-plugin modes, not {mode!r}")
            for i in range(count):
                name = f"{pname}-{i:0{width}d}"
                idx = len(self.nodes)
                node = self._make_node(
                    idx,
                    name,
                    pname,
                    pool,
                    mode,
                    gpu,
                    taints,
                    unschedulable,
                    zones[i % len(zones)],
                    unhealthy if i < unhealthy_nodes else 0,
                    i < missing_nodes,
                )
                if clique_size:
                    node.labels[CLIQUE_LABEL] = f"{_uid(self.seed, 'Clique', '', pname)}.{i // clique_size}"
                self.nodes.append(node)
                self.nodes_by_name[name] = node
                self.pool_nodes[pname].append(node)

    def _gpu_spec(self, pool: dict, mode: str, ctx: str) -> dict | None:
        if mode == "cpu":
            if pool.get("gpu"):
                raise ScenarioError(f"{ctx}: mode cpu cannot have a gpu block")
            return None
        g = pool.get("gpu")
        if not g:
            raise ScenarioError(f"{ctx}: mode {mode!r} needs a gpu block")
        gctx = f"{ctx}.gpu"
        _check_keys(
            g,
            {
                "model",
                "productName",
                "memoryMiB",
                "perNode",
                "family",
                "architecture",
                "computeMajor",
                "computeMinor",
                "driverVersion",
                "cudaDriver",
                "cudaRuntime",
                "migCapable",
                "smPerSlice",
                "pcieRoots",
            },
            gctx,
            ("model", "perNode"),
        )
        model = str(g["model"])
        base = dict(GPU_MODELS.get(model, {}))
        for key in ("productName", "memoryMiB", "family", "computeMajor", "computeMinor", "migCapable", "smPerSlice"):
            if key in g:
                base[key] = g[key]
        if "architecture" in g:
            base["family"] = g["architecture"]
        for key in ("memoryMiB", "family", "computeMajor", "computeMinor"):
            if key not in base:
                raise ScenarioError(f"{gctx}: unknown model {model!r} needs {key}")
        base.setdefault("productName", model.replace("-", " "))
        base.setdefault("migCapable", False)
        base.setdefault("smPerSlice", 14)
        base["model"] = model
        base["perNode"] = _int(g["perNode"], f"{gctx}.perNode", 1)
        if base["perNode"] > len(PCI_BUSES):
            raise ScenarioError(f"{gctx}.perNode: at most {len(PCI_BUSES)} GPUs per node")
        # PCIe root complexes the GPUs hang off (DRA attribute resource.kubernetes.io/pcieRoot): by default one per
        # GPU (an HGX board); fewer put consecutive GPUs behind one root (PCIe-switch servers).
        base["pcieRoots"] = _int(g.get("pcieRoots", base["perNode"]), f"{gctx}.pcieRoots", 1)
        if base["pcieRoots"] > base["perNode"]:
            raise ScenarioError(f"{gctx}.pcieRoots: at most perNode ({base['perNode']})")
        base["driverVersion"] = str(g.get("driverVersion", "550.54.15"))
        dv = _version_parts(base["driverVersion"], 3, f"{gctx}.driverVersion")
        base["driverParts"] = dv
        base["cudaDriver"] = str(g.get("cudaDriver", "12.4"))
        base["cudaRuntime"] = str(g.get("cudaRuntime", base["cudaDriver"]))
        _version_parts(base["cudaDriver"], 2, f"{gctx}.cudaDriver")
        _version_parts(base["cudaRuntime"], 2, f"{gctx}.cudaRuntime")
        if mode == "mig":
            mig = pool.get("mig") or {}
            _check_keys(mig, {"config", "layout", "strategy", "configState", "configStateNodes"}, f"{ctx}.mig")
            layout = mig.get("layout")
            if layout is None:
                cfg = mig.get("config", "all-1g.10gb")
                if cfg not in MIG_CONFIGS:
                    raise ScenarioError(f"{ctx}.mig.config: unknown config {cfg!r}; give mig.layout explicitly")
                layout = MIG_CONFIGS[cfg]
            base["migConfig"] = str(mig.get("config", "custom"))
            base["migLayout"] = self._mig_layout(layout, f"{ctx}.mig.layout", base)
            strategy = mig.get("strategy", "mixed")
            if strategy not in ("mixed", "single"):
                raise ScenarioError(f"{ctx}.mig.strategy: must be mixed or single, got {strategy!r}")
            if strategy == "single" and len(base["migLayout"]) != 1:
                raise ScenarioError(
                    f"{ctx}.mig: the single strategy needs every card partitioned alike into one profile, "
                    f"got {', '.join(base['migLayout'])}"
                )
            base["migStrategy"] = strategy
            state = mig.get("configState", "success")
            if state not in MIG_CONFIG_STATES:
                raise ScenarioError(f"{ctx}.mig.configState: must be one of {', '.join(MIG_CONFIG_STATES)}")
            base["migConfigState"] = state
            nodes = mig.get("configStateNodes")
            base["migConfigStateNodes"] = None if nodes is None else _int(nodes, f"{ctx}.mig.configStateNodes")
        if mode in ("mig",) and not base["migCapable"]:
            raise ScenarioError(f"{ctx}: model {model} is not MIG capable")
        if mode in ("time-slicing", "mps"):
            key = "timeSlicing" if mode == "time-slicing" else "mps"
            sharing = pool.get(key) or {}
            allowed = {"replicas", "renameByDefault"} | ({"failRequestsGreaterThanOne"} if key == "timeSlicing" else set())
            _check_keys(sharing, allowed, f"{ctx}.{key}")
            base["replicas"] = _int(sharing.get("replicas", 4), f"{ctx}.{key}.replicas", 2)
            base["renameByDefault"] = bool(sharing.get("renameByDefault", False))
            # The device plugin refuses more than one shared unit per container: with time-slicing only when
            # failRequestsGreaterThanOne is set (default false), with MPS always (it ignores the setting).
            base["failRequestsGreaterThanOne"] = key == "mps" or bool(sharing.get("failRequestsGreaterThanOne", False))
        if mode == "dra":
            dra = pool.get("dra") or {}
            _check_keys(
                dra,
                {
                    "slicesPerNode",
                    "migPartitions",
                    "staleGeneration",
                    "staleDriverVersion",
                    "publishedSlices",
                    "deviceTaints",
                    "consumableCapacity",
                },
                f"{ctx}.dra",
            )
            consumable = dra.get("consumableCapacity")
            if consumable is not None:
                _check_keys(consumable, {"memory"}, f"{ctx}.dra.consumableCapacity")
                consumable = {
                    name: _capacity_policy(raw, f"{ctx}.dra.consumableCapacity.{name}") if raw else None
                    for name, raw in consumable.items()
                }
            base["consumable"] = consumable
            base["slicesPerNode"] = _int(dra.get("slicesPerNode", 1), f"{ctx}.dra.slicesPerNode", 1)
            stale = dra.get("staleGeneration", False)
            if not isinstance(stale, bool):
                raise ScenarioError(f"{ctx}.dra.staleGeneration: expected true or false")
            base["staleGeneration"] = stale
            base["staleDriverVersion"] = _semver(
                str(dra.get("staleDriverVersion", "535.183.06")), f"{ctx}.dra.staleDriverVersion"
            )
            published = dra.get("publishedSlices")
            base["publishedSlices"] = None if published is None else _int(published, f"{ctx}.dra.publishedSlices", 1)
            taints = []
            for ti, t in enumerate(_list(dra, "deviceTaints", f"{ctx}.dra")):
                tctx = f"{ctx}.dra.deviceTaints[{ti}]"
                _check_keys(t, {"device", "key", "value", "effect"}, tctx, ("device", "key", "effect"))
                if t["effect"] not in ("None", "NoSchedule", "NoExecute"):
                    raise ScenarioError(f"{tctx}.effect: {t['effect']!r} is not one of None, NoSchedule, NoExecute")
                taints.append({k: str(v) for k, v in t.items()})
            base["deviceTaints"] = taints
            parts = dra.get("migPartitions")
            if parts and not base["migCapable"]:
                raise ScenarioError(f"{ctx}.dra.migPartitions: model {model} is not MIG capable")
            base["draMig"] = (
                self._mig_layout(parts, f"{ctx}.dra.migPartitions", base, allow_overlap=True) if parts else None
            )
        return base

    @staticmethod
    def _mig_layout(layout: Any, ctx: str, gpu: dict, allow_overlap: bool = False) -> dict[str, int]:
        if not isinstance(layout, dict) or not layout:
            raise ScenarioError(f"{ctx}: expected a mapping like {{'1g.10gb': 7}}")
        slices = mem = 0
        for profile, n in layout.items():
            m = PROFILE_RE.match(str(profile))
            if not m or int(m.group(1)) not in MIG_GEOMETRY:
                raise ScenarioError(f"{ctx}: {profile!r} is not a MIG profile like 1g.10gb")
            n = _int(n, f"{ctx}.{profile}", 1)
            g = int(m.group(1))
            if n > len(MIG_GEOMETRY[g][1]):
                raise ScenarioError(f"{ctx}.{profile}: at most {len(MIG_GEOMETRY[g][1])} instances fit on one GPU")
            slices += g * n
            mem += MIG_GEOMETRY[g][0] * n
        if not allow_overlap and (slices > 7 or mem > 8):
            raise ScenarioError(f"{ctx}: layout needs {slices}/7 compute slices and {mem}/8 memory slices per GPU")
        return {str(k): int(v) for k, v in layout.items()}

    def _make_node(
        self,
        idx: int,
        name: str,
        pname: str,
        pool: dict,
        mode: str,
        gpu: dict | None,
        taints: list[dict],
        unschedulable: bool,
        zone: str,
        unhealthy: int,
        missing: bool,
    ) -> NodeState:
        ctx = f"nodePools[{pname}]"
        cpu = int(parse_quantity(pool.get("cpu", 32), f"{ctx}.cpu") * 1000)
        memory = int(parse_quantity(pool.get("memory", "128Gi"), f"{ctx}.memory"))
        max_pods = _int(pool.get("pods", 110), f"{ctx}.pods", 1)
        eph = int(parse_quantity(pool.get("ephemeralStorage", "500Gi"), f"{ctx}.ephemeralStorage"))
        instance = str(pool.get("instanceType", "m6i.8xlarge" if not gpu else "p4d.24xlarge"))
        labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": instance,
            "topology.kubernetes.io/region": zone[:-1] if zone[-1:].isalpha() else zone,
            "topology.kubernetes.io/zone": zone,
            POOL_LABEL: pname,
        }
        ext_cap: dict[str, int] = {}
        ext_alloc: dict[str, int] = {}
        single_unit: set[str] = set()
        if gpu:
            labels.update(self._gpu_labels(gpu, mode, pool, instance))
            if mode == "mig" and labels.get("nvidia.com/mig.config.state"):
                first = gpu["migConfigStateNodes"]
                position = len(self.pool_nodes.get(pname, []))
                if first is None or position < first:
                    labels["nvidia.com/mig.config.state"] = gpu["migConfigState"]
            n = gpu["perNode"]
            healthy = n - unhealthy
            if mode == "whole":
                ext_cap["nvidia.com/gpu"], ext_alloc["nvidia.com/gpu"] = n, healthy
            elif mode == "mig" and gpu["migStrategy"] == "single":
                # The single strategy advertises the (identical) MIG devices as nvidia.com/gpu.
                [per] = gpu["migLayout"].values()
                ext_cap["nvidia.com/gpu"], ext_alloc["nvidia.com/gpu"] = per * n, per * healthy
            elif mode == "mig":
                for profile, per in gpu["migLayout"].items():
                    ext_cap[f"nvidia.com/mig-{profile}"] = per * n
                    ext_alloc[f"nvidia.com/mig-{profile}"] = per * healthy
            elif mode in ("time-slicing", "mps"):
                rname = "nvidia.com/gpu.shared" if gpu["renameByDefault"] else "nvidia.com/gpu"
                ext_cap[rname], ext_alloc[rname] = n * gpu["replicas"], healthy * gpu["replicas"]
                if gpu["failRequestsGreaterThanOne"]:
                    single_unit = {rname}
            if missing:
                ext_cap, ext_alloc = {}, {}
        labels.update({str(k): str(v) for k, v in (pool.get("labels") or {}).items()})
        mem_alloc = memory - memory // 100 - 100 * 2**20
        cpu_alloc = cpu - (100 if cpu <= 4000 else 500)
        alloc = {"cpu": cpu_alloc, "memory": mem_alloc, "pods": max_pods, **ext_alloc}
        node = NodeState(
            index=idx,
            name=name,
            pool=pname,
            uid=_uid(self.seed, "Node", "", name),
            labels=labels,
            taints=taints,
            unschedulable=unschedulable,
            alloc=alloc,
            ip=f"172.16.{idx // 250}.{idx % 250 + 4}",
            pod_cidr=f"10.{64 + idx // 256}.{idx % 256}.0/24",
            single_unit=single_unit if ext_cap else set(),
        )
        boot = _ts(-30 * 86400 + idx)
        heartbeat = _ts(-20)
        conditions = [
            {
                "type": t,
                "status": "False",
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": boot,
                "reason": r,
                "message": msg,
            }
            for t, r, msg in (
                ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": _ts(-30 * 86400 + idx + 45),
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
            }
        )
        capacity = {
            "cpu": _fmt_cpu(cpu),
            "ephemeral-storage": f"{eph // 1024}Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": f"{memory // 1024}Ki",
            "pods": str(max_pods),
            **{k: str(v) for k, v in ext_cap.items()},
        }
        allocatable = {
            "cpu": _fmt_cpu(cpu_alloc),
            "ephemeral-storage": str(eph * 9 // 10),
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": f"{mem_alloc // 1024}Ki",
            "pods": str(max_pods),
            **{k: str(v) for k, v in ext_alloc.items()},
        }
        machine_id = _digest(self.seed, "machine", name).hex()[:32]
        spec: dict[str, Any] = {
            "podCIDR": node.pod_cidr,
            "podCIDRs": [node.pod_cidr],
            "providerID": f"kubesim:///{zone}/{name}",
        }
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        if unschedulable:
            spec["unschedulable"] = True
        annotations = {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        }
        if gpu and unhealthy:
            annotations["kubesim.io/unhealthy-gpus"] = ",".join(
                f"gpu-{i}" for i in range(gpu["perNode"] - unhealthy, gpu["perNode"])
            )
        self.node_objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "uid": node.uid,
                    "creationTimestamp": boot,
                    "labels": labels,
                    "annotations": annotations,
                },
                "spec": spec,
                "status": {
                    "capacity": capacity,
                    "allocatable": allocatable,
                    "conditions": conditions,
                    "addresses": [{"type": "InternalIP", "address": node.ip}, {"type": "Hostname", "address": name}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "nodeInfo": {
                        "machineID": machine_id,
                        "systemUUID": str(uuid.UUID(machine_id)).upper(),
                        "bootID": _uid(self.seed, "boot", "", name),
                        "kernelVersion": "6.8.0-1024-nvidia",
                        "osImage": "Ubuntu 24.04.2 LTS",
                        "containerRuntimeVersion": "containerd://2.1.4",
                        "kubeletVersion": self.k8s_version,
                        "kubeProxyVersion": "",
                        "operatingSystem": "linux",
                        "architecture": "amd64",
                    },
                },
            }
        )
        if gpu and mode == "dra":
            self._publish_slices(node, gpu, zone)
        return node

    def _gpu_labels(self, gpu: dict, mode: str, pool: dict, instance: str) -> dict[str, str]:
        shared = mode in ("time-slicing", "mps")
        labels = {"nvidia.com/gpu.present": "true"}
        if mode == "dra":
            labels["nvidia.com/gpu.deploy.device-plugin"] = "false"
        if not pool.get("gfdLabels", True):
            return labels
        d = gpu["driverParts"]
        rt = _version_parts(gpu["cudaRuntime"], 2, "cudaRuntime")
        cd = _version_parts(gpu["cudaDriver"], 2, "cudaDriver")
        product = gpu["model"] + ("-SHARED" if shared and not gpu["renameByDefault"] else "")
        labels.update(
            {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpu["perNode"]),
                "nvidia.com/gpu.memory": str(gpu["memoryMiB"]),
                "nvidia.com/gpu.family": str(gpu["family"]),
                "nvidia.com/gpu.machine": str(pool.get("machine", instance)),
                "nvidia.com/gpu.compute.major": str(gpu["computeMajor"]),
                "nvidia.com/gpu.compute.minor": str(gpu["computeMinor"]),
                "nvidia.com/gpu.replicas": str(gpu.get("replicas", 1) if shared else 1),
                "nvidia.com/gpu.mode": "compute",
                "nvidia.com/cuda.driver-version.major": str(d[0]),
                "nvidia.com/cuda.driver-version.minor": str(d[1]),
                "nvidia.com/cuda.driver-version.revision": str(d[2]),
                "nvidia.com/cuda.driver-version.full": gpu["driverVersion"],
                "nvidia.com/cuda.runtime-version.major": str(rt[0]),
                "nvidia.com/cuda.runtime-version.minor": str(rt[1]),
                "nvidia.com/cuda.runtime-version.full": f"{rt[0]}.{rt[1]}",
                "nvidia.com/cuda.driver.major": str(cd[0]),
                "nvidia.com/cuda.driver.minor": str(cd[1]),
                "nvidia.com/gfd.timestamp": str(int((EPOCH - timedelta(days=30)).timestamp())),
                "nvidia.com/gpu.sharing-strategy": mode if shared else "none",
                "nvidia.com/mig.capable": "true" if gpu["migCapable"] else "false",
                "nvidia.com/mps.capable": "true" if mode == "mps" else "false",
            }
        )
        if mode == "mig" and gpu["migStrategy"] == "single":
            # GFD --mig-strategy=single: the product gets the profile, gpu.count counts MIG devices, gpu.memory is
            # one MIG device's, and the MIG device's facts go into nvidia.com/gpu.* labels.
            [(profile, per)] = gpu["migLayout"].items()
            g = int(profile[0])
            mem_gb = int(PROFILE_RE.match(profile).group(2))
            labels.update(
                {
                    "nvidia.com/mig.strategy": "single",
                    "nvidia.com/mig.config": gpu["migConfig"],
                    "nvidia.com/mig.config.state": "success",
                    "nvidia.com/gpu.product": f"{gpu['model']}-MIG-{profile}",
                    "nvidia.com/gpu.count": str(per * gpu["perNode"]),
                    "nvidia.com/gpu.memory": str(mem_gb * 1024 - 256),
                    "nvidia.com/gpu.multiprocessors": str(g * gpu["smPerSlice"]),
                    "nvidia.com/gpu.slices.gi": str(g),
                    "nvidia.com/gpu.slices.ci": str(g),
                    "nvidia.com/gpu.engines.copy": str(g),
                    "nvidia.com/gpu.engines.decoder": str(g if g < 7 else 5),
                    "nvidia.com/gpu.engines.encoder": "0",
                    "nvidia.com/gpu.engines.jpeg": "1" if g >= 7 else "0",
                    "nvidia.com/gpu.engines.ofa": "1" if g >= 7 else "0",
                }
            )
        elif mode == "mig":
            labels["nvidia.com/mig.strategy"] = "mixed"
            labels["nvidia.com/mig.config"] = gpu["migConfig"]
            labels["nvidia.com/mig.config.state"] = "success"
            for profile, per in gpu["migLayout"].items():
                g = int(profile[0])
                mem_gb = int(PROFILE_RE.match(profile).group(2))
                base = f"nvidia.com/mig-{profile}"
                labels.update(
                    {
                        f"{base}.count": str(per * gpu["perNode"]),
                        f"{base}.memory": str(mem_gb * 1024 - 256),
                        f"{base}.multiprocessors": str(g * gpu["smPerSlice"]),
                        f"{base}.slices.gi": str(g),
                        f"{base}.slices.ci": str(g),
                        f"{base}.engines.copy": str(g),
                        f"{base}.engines.decoder": str(g if g < 7 else 5),
                        f"{base}.engines.encoder": "0",
                        f"{base}.engines.jpeg": "1" if g >= 7 else "0",
                        f"{base}.engines.ofa": "1" if g >= 7 else "0",
                    }
                )
        return labels

    def _publish_slices(self, node: NodeState, gpu: dict, zone: str) -> None:
        self.has_dra = True
        n = gpu["perNode"]
        cc = f"{gpu['computeMajor']}.{gpu['computeMinor']}.0"
        drv = _semver(gpu["driverVersion"], "driverVersion")
        cuda = _semver(gpu["cudaDriver"], "cudaDriver")
        mig = gpu.get("draMig")
        total_sm = 7 * gpu["smPerSlice"]
        devices: list[dict] = []
        counter_sets: list[dict] = []
        for i in range(n):
            gpu_uuid = "GPU-" + _uid(self.seed, "gpu", node.name, str(i))
            bus = f"0000:{PCI_BUSES[i]}:00.0"
            group = i * gpu["pcieRoots"] // n  # GPUs behind one root are named after the first one's bus
            first = next(j for j in range(n) if j * gpu["pcieRoots"] // n == group)
            root = f"pci0000:{int(PCI_BUSES[first], 16) - 3:02x}"
            common = {
                "productName": {"string": gpu["productName"]},
                "brand": {"string": "Nvidia"},
                "architecture": {"string": str(gpu["family"]).replace("-", " ").title()},
                "cudaComputeCapability": {"version": cc},
                "driverVersion": {"version": drv},
                "cudaDriverVersion": {"version": cuda},
                "resource.kubernetes.io/pciBusID": {"string": bus},
                "resource.kubernetes.io/pcieRoot": {"string": root},
            }
            flat_common = {
                "pcieRoot": root,
                "productName": gpu["productName"],
                "brand": "Nvidia",
                "architecture": common["architecture"]["string"],
            }
            attrs = {
                "type": {"string": "gpu"},
                "uuid": {"string": gpu_uuid},
                "index": {"int": i},
                "minor": {"int": i},
                **{k: dict(v) for k, v in common.items()},
            }
            full = {
                "name": f"gpu-{i}",
                "attributes": attrs,
                "capacity": {"memory": {"value": _fmt_bytes(gpu["memoryMiB"] * 2**20)}},
            }
            shared = gpu.get("consumable")
            full_capacity: dict[str, tuple[Fraction, CapacityPolicy | None, bool]] = {
                "memory": (Fraction(gpu["memoryMiB"] * 2**20), None, True)
            }
            if shared is not None:
                # Consumable capacity (KEP-5075): claims share the GPU, each consuming part of its memory.
                full["allowMultipleAllocations"] = True
                for cname, policy in shared.items():
                    if policy is not None:
                        full["capacity"][cname]["requestPolicy"] = _policy_json(policy, True)
                        full_capacity[cname] = (full_capacity[cname][0], policy, True)
            consumes: dict[str, dict[str, int]] = {}
            if mig:
                cs = f"gpu-{i}-counter-set"
                counters = {"multiprocessors": total_sm, **{f"memorySlice{k}": 1 for k in range(8)}}
                node.counters[cs] = dict(counters)
                counter_sets.append({"name": cs, "counters": {k: {"value": str(v)} for k, v in counters.items()}})
                consumes = {cs: dict(counters)}
                full["consumesCounters"] = [
                    {"counterSet": cs, "counters": {k: {"value": str(v)} for k, v in counters.items()}}
                ]
            devices.append(full)
            node.devices.append(
                Device(
                    f"gpu-{i}",
                    node.name,
                    DRIVER,
                    {"type": "gpu", "uuid": gpu_uuid, "index": i, **flat_common},
                    consumes,
                    capacity=full_capacity,
                    multi=shared is not None,
                )
            )
            if mig:
                for profile, count in mig.items():
                    g = int(profile[0])
                    mem_slices, placements = MIG_GEOMETRY[g]
                    mem_gb = int(PROFILE_RE.match(profile).group(2))
                    for start in placements[:count]:
                        dname = f"gpu-{i}-mig-{profile.replace('.', '')}-{MIG_PROFILE_IDS[g]}-{start}"
                        mig_uuid = "MIG-" + _uid(self.seed, "mig", node.name, dname)
                        used = {
                            "multiprocessors": g * gpu["smPerSlice"],
                            **{f"memorySlice{k}": 1 for k in range(start, start + mem_slices)},
                        }
                        devices.append(
                            {
                                "name": dname,
                                "attributes": {
                                    "type": {"string": "mig"},
                                    "uuid": {"string": mig_uuid},
                                    "parentUUID": {"string": gpu_uuid},
                                    "parentIndex": {"int": i},
                                    "profile": {"string": profile},
                                    **{k: dict(v) for k, v in common.items()},
                                },
                                "capacity": {
                                    "memory": {"value": f"{mem_gb * 1024 - 256}Mi"},
                                    "multiprocessors": {"value": str(g * gpu["smPerSlice"])},
                                    "copyEngines": {"value": str(g)},
                                    "decoders": {"value": str(g if g < 7 else 5)},
                                    "encoders": {"value": "0"},
                                    "jpegEngines": {"value": "1" if g >= 7 else "0"},
                                    "ofaEngines": {"value": "1" if g >= 7 else "0"},
                                },
                                "consumesCounters": [
                                    {
                                        "counterSet": f"gpu-{i}-counter-set",
                                        "counters": {k: {"value": str(v)} for k, v in used.items()},
                                    }
                                ],
                            }
                        )
                        node.devices.append(
                            Device(
                                dname,
                                node.name,
                                DRIVER,
                                {
                                    "type": "mig",
                                    "uuid": mig_uuid,
                                    "profile": profile,
                                    "parentUUID": gpu_uuid,
                                    **flat_common,
                                },
                                {f"gpu-{i}-counter-set": used},
                                capacity={
                                    k: (parse_quantity(v["value"]), None, k == "memory")
                                    for k, v in devices[-1]["capacity"].items()
                                },
                            )
                        )
        by_name = {d["name"]: d for d in devices}
        for t in gpu.get("deviceTaints") or ():
            if t["device"] not in by_name:
                raise ScenarioError(
                    f"nodePools[{node.pool}].dra.deviceTaints: device {t['device']!r} does not exist on {node.name}"
                )
            taint = {k: v for k, v in t.items() if k != "device"}
            taint["timeAdded"] = _ts(-86400 + node.index)
            by_name[t["device"]].setdefault("taints", []).append(taint)
        tainted = {
            d["name"] for d in devices if any(t["effect"] in ("NoSchedule", "NoExecute") for t in d.get("taints", []))
        }
        for dev in node.devices:
            dev.tainted = dev.name in tainted
        limit = (
            MAX_DEVICES_PER_SLICE_WITH_COUNTERS if mig or any("taints" in d for d in devices) else MAX_DEVICES_PER_SLICE
        )
        per_slice = max(-(-len(devices) // gpu["slicesPerNode"]), 1)
        if per_slice > limit:
            raise ScenarioError(
                f"nodePools[{node.pool}]: {len(devices)} devices per node need "
                f"dra.slicesPerNode >= {-(-len(devices) // limit)} (max {limit} devices per slice"
                f"{' with counters or taints' if limit == MAX_DEVICES_PER_SLICE_WITH_COUNTERS else ''})"
            )
        chunks = [devices[k : k + per_slice] for k in range(0, len(devices), per_slice)]
        bodies: list[dict] = ([{"sharedCounters": counter_sets}] if mig else []) + [{"devices": c} for c in chunks]
        published = gpu.get("publishedSlices")
        if published is not None:
            if published > len(bodies):
                raise ScenarioError(
                    f"nodePools[{node.pool}].dra.publishedSlices: {published} exceeds the pool's {len(bodies)} slices"
                )
            if published < len(bodies):
                node.incomplete = True
                hidden = {d["name"] for b in bodies[published:] for d in b.get("devices", [])}
                node.devices = [d for d in node.devices if d.name not in hidden]
        else:
            published = len(bodies)
        generation = 1
        if gpu.get("staleGeneration"):
            generation = 2
            old_drv = gpu["staleDriverVersion"]
            for k, body in enumerate(bodies):
                old = copy.deepcopy(body)
                for d in old.get("devices", []):
                    d["attributes"]["driverVersion"] = {"version": old_drv}
                    d.pop("taints", None)
                self._emit_slice(node, f"old{k}", old, 1, len(bodies), -30 * 86400 + node.index + 120)
        created = -30 * 86400 + node.index + 120 + (86400 * 29 if generation == 2 else 0)
        for k, body in enumerate(bodies[:published]):
            self._emit_slice(node, k, body, generation, len(bodies), created)

    def _emit_slice(self, node: NodeState, key: Any, body: dict, generation: int, count: int, created: int) -> None:
        sname = f"{node.name}-{DRIVER}-{_suffix(5, self.seed, 'slice', node.name, key)}"
        self.slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {
                    "name": sname,
                    "generateName": f"{node.name}-{DRIVER}-",
                    "uid": _uid(self.seed, "ResourceSlice", "", sname),
                    "creationTimestamp": _ts(created),
                    "generation": 1,
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid, "controller": True}
                    ],
                },
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node.name,
                    "pool": {"name": node.name, "generation": generation, "resourceSliceCount": count},
                    **body,
                },
            }
        )

    # ---------------------------------------------------------------- claims
    def _norm_requests(self, reqs: Any, ctx: str) -> list[dict]:
        if not isinstance(reqs, list) or not reqs:
            raise ScenarioError(f"{ctx}.requests: expected a non-empty list")
        out = []
        for i, r in enumerate(reqs):
            rctx = f"{ctx}.requests[{i}]"
            _check_keys(
                r,
                {"name", "deviceClassName", "count", "allocationMode", "adminAccess", "match", "selectors", "capacity"},
                rctx,
                ("deviceClassName",),
            )
            capacity = r.get("capacity") or {}
            if not isinstance(capacity, dict):
                raise ScenarioError(f"{rctx}.capacity: expected a mapping like {{memory: 20Gi}}")
            for cname, qty in capacity.items():
                if parse_quantity(qty, f"{rctx}.capacity.{cname}") < 0:
                    raise ScenarioError(f"{rctx}.capacity.{cname}: must not be negative")
            cls = r["deviceClassName"]
            if cls not in self.classes:
                raise ScenarioError(f"{rctx}.deviceClassName: device class {cls!r} is not declared")
            mode = r.get("allocationMode", "ExactCount")
            if mode not in ("ExactCount", "All"):
                raise ScenarioError(f"{rctx}.allocationMode: must be ExactCount or All")
            match = r.get("match") or {}
            _check_keys(match, {"attributes"}, f"{rctx}.match")
            out.append(
                {
                    "name": _label(r.get("name", "gpu" if i == 0 else f"gpu{i}"), f"{rctx}.name"),
                    "deviceClassName": cls,
                    "count": _int(r.get("count", 1), f"{rctx}.count", 1),
                    "mode": mode,
                    "admin": bool(r.get("adminAccess", False)),
                    "match": match.get("attributes") or {},
                    "selectors": [str(s) for s in _list(r, "selectors", rctx)],
                    "capacity": {str(k): str(v) for k, v in capacity.items()},
                }
            )
        return out

    @staticmethod
    def _constraints(spec: dict, requests: list[dict], ctx: str) -> list[dict]:
        """`constraints: [{matchAttribute: <qualified attribute>, requests: [names]}]` (requests: default all)."""
        out = []
        names = {r["name"] for r in requests}
        for ci, raw in enumerate(_list(spec, "constraints", ctx)):
            cctx = f"{ctx}.constraints[{ci}]"
            _check_keys(raw, {"matchAttribute", "requests"}, cctx, ("matchAttribute",))
            if not isinstance(raw["matchAttribute"], str) or not raw["matchAttribute"]:
                raise ScenarioError(f"{cctx}.matchAttribute: an attribute name such as resource.kubernetes.io/pcieRoot")
            covered = [str(n) for n in _list(raw, "requests", cctx)]
            unknown = sorted(set(covered) - names)
            if unknown:
                raise ScenarioError(f"{cctx}.requests: unknown request {unknown[0]!r}")
            out.append({"matchAttribute": raw["matchAttribute"], **({"requests": covered} if covered else {})})
        return out

    def _request_spec(self, requests: list[dict], config: list, constraints: list[dict] | None = None) -> dict:
        reqs = []
        for r in requests:
            exactly: dict[str, Any] = {"deviceClassName": r["deviceClassName"], "allocationMode": r["mode"]}
            if r["mode"] == "ExactCount":
                exactly["count"] = r["count"]
            sels = []
            if r["match"]:
                driver = self.classes[r["deviceClassName"]]["match"].get("driver", DRIVER)
                sels.append(
                    {"cel": {"expression": _match_to_cel({"driver": driver, "attributes": r["match"]}, "match", False)}}
                )
            sels += [{"cel": {"expression": s}} for s in r["selectors"]]
            if sels:
                exactly["selectors"] = sels
            if r["admin"]:
                exactly["adminAccess"] = True
            if r["capacity"]:
                exactly["capacity"] = {"requests": dict(r["capacity"])}
            reqs.append({"name": r["name"], "exactly": exactly})
        devices: dict[str, Any] = {"requests": reqs}
        if constraints:
            devices["constraints"] = copy.deepcopy(constraints)
        if config:
            devices["config"] = copy.deepcopy(config)
        return {"devices": devices}

    def _check_admin(self, namespace: str, requests: list[dict], ctx: str) -> None:
        if any(r["admin"] for r in requests):
            labels = self.namespaces[namespace]["metadata"]["labels"]
            if labels.get("resource.kubernetes.io/admin-access") != "true":
                raise ScenarioError(
                    f"{ctx}: admin access to devices requires the `resource.kubernetes.io/admin-access:"
                    f" true` label on the containing namespace {namespace!r}"
                )

    def build_templates(self) -> list[dict]:
        out = []
        for i, t in enumerate(_list(self.spec, "claimTemplates", "scenario")):
            ctx = f"claimTemplates[{i}]"
            _check_keys(t, {"name", "namespace", "requests", "config", "constraints"}, ctx,
                        ("name", "namespace", "requests"))
            name = _subdomain(t["name"], f"{ctx}.name")
            requests = self._norm_requests(t["requests"], ctx)
            config = _list(t, "config", ctx)
            constraints = self._constraints(t, requests, ctx)
            for ns in self._ns_list(t["namespace"], f"{ctx}.namespace"):
                if (ns, name) in self.templates:
                    raise ScenarioError(f"{ctx}: duplicate template {ns}/{name}")
                self._check_admin(ns, requests, ctx)
                self.templates[(ns, name)] = {"requests": requests, "config": config, "constraints": constraints}
                out.append(
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaimTemplate",
                        "metadata": {
                            "name": name,
                            "namespace": ns,
                            "uid": _uid(self.seed, "ResourceClaimTemplate", ns, name),
                            "creationTimestamp": _ts(-7 * 86400 + i * 60),
                        },
                        "spec": {"spec": self._request_spec(requests, config, constraints)},
                    }
                )
        return out

    def declare_claims(self) -> None:
        for i, c in enumerate(_list(self.spec, "claims", "scenario")):
            ctx = f"claims[{i}]"
            _check_keys(
                c,
                {"name", "namespace", "requests", "config", "allocated", "pool"},
                ctx,
                ("name", "namespace", "requests"),
            )
            name, ns = _subdomain(c["name"], f"{ctx}.name"), self._ns(c["namespace"], f"{ctx}.namespace")
            if (ns, name) in self.claims:
                raise ScenarioError(f"{ctx}: duplicate claim {ns}/{name}")
            requests = self._norm_requests(c["requests"], ctx)
            self._check_admin(ns, requests, ctx)
            pool = c.get("pool")
            if pool is not None and pool not in self.pool_nodes:
                raise ScenarioError(f"{ctx}.pool: unknown node pool {pool!r}")
            claim = ClaimState(
                name,
                ns,
                _uid(self.seed, "ResourceClaim", ns, name),
                requests,
                _list(c, "config", ctx),
                -3 * 86400 + i * 60,
                want_allocated=bool(c.get("allocated", False)),
                pool=pool,
            )
            self.claims[(ns, name)] = claim
            self.claim_order.append(claim)

    def _device_matches(self, dev: Device, req: dict) -> bool:
        cm = self.classes[req["deviceClassName"]]["match"]
        if dev.driver != cm.get("driver", DRIVER):
            return False
        for attrs in (cm.get("attributes") or {}, req["match"]):
            for k, v in attrs.items():
                if dev.attrs.get(k.rpartition("/")[2]) != v:
                    return False
        return True

    @staticmethod
    def _capacity_requests(req: dict, driver: str) -> dict[str, Fraction]:
        """A request's capacity requests by capacity name (a name may carry the driver's domain)."""
        out: dict[str, Fraction] = {}
        for name, qty in req["capacity"].items():
            domain, _, ident = name.rpartition("/")
            out[ident if domain == driver else name] = parse_quantity(qty)
        return out

    def _try_allocate(self, node: NodeState, claims: list[ClaimState]) -> list[tuple[ClaimState, list]] | None:
        """Pick devices on ``node`` for every unallocated claim; returns picks without committing, or None.

        Each pick is (request, device, consumed capacity or None). A device with allowMultipleAllocations takes a
        share: the request's capacity requests rounded by the request policy (the default, or the whole value, for
        capacities it does not name) must fit in what allocated and picked shares leave. A claim's matchAttribute
        constraints are met by trying each value the node's devices have, in order, for the requests they cover."""
        taken: set[str] = set()
        taking: dict[str, dict[str, Fraction]] = {}  # shared device -> capacity picked in this attempt
        counters = {cs: dict(c) for cs, c in node.counters.items()}
        picks = []
        for claim in claims:
            if claim.results is not None:
                if claim.node != node.name:
                    return None
                continue
            if not claim.constraints:
                results = self._allocate_claim(node, claim, taken, taking, counters, {})
                if results is None:
                    return None
                picks.append((claim, results))
                continue
            for only in self._constraint_choices(node, claim):  # each try starts from the state before the claim
                state = (set(taken), copy.deepcopy(taking), copy.deepcopy(counters))
                results = self._allocate_claim(node, claim, *state, only)
                if results is not None:
                    taken, taking, counters = state
                    break
            else:
                return None
            picks.append((claim, results))
        return picks

    @staticmethod
    def _constraint_choices(node: NodeState, claim: ClaimState) -> list[dict[str, dict[str, Any]]]:
        """Per matchAttribute value combination: request name -> {flat attribute: value} its devices must have."""
        choices: list[dict[str, dict[str, Any]]] = [{}]
        for constraint in claim.constraints:
            key = str(constraint["matchAttribute"]).rpartition("/")[2]
            covered = constraint.get("requests") or [r["name"] for r in claim.requests]
            values = sorted({d.attrs[key] for d in node.devices if key in d.attrs}, key=str)
            choices = [{**choice, **{name: {**choice.get(name, {}), key: value} for name in covered}}
                       for choice in choices for value in values]
        return choices

    def _allocate_claim(self, node: NodeState, claim: ClaimState, taken: set[str],
                        taking: dict[str, dict[str, Fraction]], counters: dict[str, dict[str, int]],
                        only: dict[str, dict[str, Any]]) -> list | None:
        """One claim's picks, updating `taken`, `taking` and `counters`; None when it does not fit."""
        results = []
        for req in claim.requests:
            if req["mode"] == "All" and node.incomplete:
                return None  # "asks for all devices, but resource pool ... is currently being updated"
            cands = [d for d in node.devices if not d.tainted and self._device_matches(d, req)
                     and all(d.attrs.get(key) == value for key, value in only.get(req["name"], {}).items())]
            if req["admin"]:
                chosen = cands if req["mode"] == "All" else cands[: req["count"]]
                if not chosen or (req["mode"] == "ExactCount" and len(chosen) < req["count"]):
                    return None
                results += [(req, d, None) for d in chosen]
                continue
            free = []
            for d in cands:
                amounts = d.consumption(self._capacity_requests(req, d.driver)) if req["capacity"] or d.multi else {}
                usable = amounts is not None and d.fits(amounts or {}, taking.get(d.name, {}))
                in_use = d.allocated or (d.name in taken and not d.multi)
                if in_use or not usable:
                    if req["mode"] == "All":
                        return None
                    continue
                first_share = not d.multi or (not d.shares and d.name not in taking)
                needs = {(cs, k): v for cs, cc in d.consumes.items() for k, v in cc.items()} if first_share else {}
                if all(counters[cs][k] >= v for (cs, k), v in needs.items()):
                    for (cs, k), v in needs.items():
                        counters[cs][k] -= v
                    if d.multi:
                        share = taking.setdefault(d.name, {})
                        for cname, amount in amounts.items():
                            share[cname] = share.get(cname, 0) + amount
                    free.append((d, amounts if d.multi else None))
                    taken.add(d.name)
                    if req["mode"] == "ExactCount" and len(free) == req["count"]:
                        break
                elif req["mode"] == "All":
                    return None
            if not free or (req["mode"] == "ExactCount" and len(free) < req["count"]):
                return None
            results += [(req, d, amounts) for d, amounts in free]
        return results

    def _commit(self, node: NodeState, picks: list[tuple[ClaimState, list]]) -> None:
        for claim, results in picks:
            claim.node = node.name
            claim.results = []
            for req, dev, amounts in results:
                res = {"request": req["name"], "driver": dev.driver, "pool": node.name, "device": dev.name}
                if req["admin"]:
                    res["adminAccess"] = True
                elif amounts is not None:
                    # A share of a device with allowMultipleAllocations: its own shareID and what it consumes.
                    if not dev.shares:
                        for cs, cc in dev.consumes.items():
                            for k, v in cc.items():
                                node.counters[cs][k] -= v
                    dev.shares += 1
                    for cname, amount in amounts.items():
                        dev.consumed[cname] = dev.consumed.get(cname, 0) + amount
                    res["shareID"] = _uid(self.seed, "share", claim.namespace, f"{claim.name}/{req['name']}/{dev.name}")
                    res["consumedCapacity"] = {
                        cname: _fmt_quantity(amount, dev.capacity[cname][2]) for cname, amount in sorted(amounts.items())
                    }
                else:
                    dev.allocated = True
                    for cs, cc in dev.consumes.items():
                        for k, v in cc.items():
                            node.counters[cs][k] -= v
                claim.results.append(res)

    def _claim_object(self, c: ClaimState) -> dict:
        meta: dict[str, Any] = {
            "name": c.name,
            "namespace": c.namespace,
            "uid": c.uid,
            "creationTimestamp": _ts(c.created),
        }
        if c.owner_pod and c.extended:
            meta["annotations"] = {EXTENDED_CLAIM_ANNOTATION: "true"}
        elif c.owner_pod:
            meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": c.pod_claim_name}
        if c.owner_pod:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": c.owner_pod[0],
                    "uid": c.owner_pod[1],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        obj: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": meta,
            "spec": self._request_spec(c.requests, c.config, c.constraints),
            "status": {},
        }
        if c.results is not None:
            meta["finalizers"] = ["resource.kubernetes.io/delete-protection"]
            alloc: dict[str, Any] = {"devices": {"results": c.results}}
            cfg = []
            seen = set()
            for req in c.requests:
                cls = req["deviceClassName"]
                if cls in seen:
                    continue
                seen.add(cls)
                names = [r["name"] for r in c.requests if r["deviceClassName"] == cls]
                cfg += [
                    {"source": "FromClass", "requests": names, "opaque": copy.deepcopy(e["opaque"])}
                    for e in self.classes[cls]["config"]
                    if isinstance(e, dict) and "opaque" in e
                ]
            cfg += [
                {"source": "FromClaim", "requests": list(e.get("requests", [])), "opaque": copy.deepcopy(e["opaque"])}
                for e in c.config
                if isinstance(e, dict) and "opaque" in e
            ]
            if cfg:
                alloc["devices"]["config"] = cfg
            alloc["nodeSelector"] = {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [c.node]}]}]
            }
            # The scheduler allocates a moment after creation (API 1.34+ records when).
            alloc["allocationTimestamp"] = _ts(c.created + 2)
            obj["status"]["allocation"] = alloc
            if c.reserved:
                obj["status"]["reservedFor"] = c.reserved
        return obj

    # ---------------------------------------------------------------- workloads
    WORKLOAD_KEYS = {
        "name",
        "namespace",
        "count",
        "pool",
        "state",
        "image",
        "cpu",
        "memory",
        "resources",
        "claimTemplate",
        "claim",
        "resourceClaims",
        "controller",
        "restartPolicy",
        "exitReason",
        "nodeSelector",
        "tolerations",
        "labels",
        "serviceAccountName",
        "serviceAccount",
        "privileged",
        "hostDevice",
        "priorityClassName",
        "command",
        "createdAt",
    }

    @staticmethod
    def _check_pod_security(w: dict, ctx: str) -> None:
        """`privileged` (bool), `hostDevice` (absolute path) and `serviceAccount` (alias of serviceAccountName)."""
        if not isinstance(w.get("privileged", False), bool):
            raise ScenarioError(f"{ctx}.privileged: expected true or false, got {w['privileged']!r}")
        device = w.get("hostDevice")
        if device is not None and (not isinstance(device, str) or not device.startswith("/")):
            raise ScenarioError(
                f"{ctx}.hostDevice: expected an absolute host path like /dev/infiniband, got {device!r}"
            )
        if "serviceAccount" in w and "serviceAccountName" in w:
            raise ScenarioError(f"{ctx}: give serviceAccount or serviceAccountName, not both")
        account = w.get("serviceAccount", w.get("serviceAccountName", "default"))
        _subdomain(account, f"{ctx}.serviceAccount")

    def build_workloads(self) -> None:
        for wi, w in enumerate(_list(self.spec, "workloads", "scenario")):
            ctx = f"workloads[{wi}]"
            _check_keys(w, self.WORKLOAD_KEYS, ctx, ("name", "namespace"))
            self._check_pod_security(w, ctx)
            self._expand_workload(wi, w, ctx)
        # claims that should be allocated but no running pod placed them
        for claim in self.claim_order:
            if claim.want_allocated and claim.results is None and claim.template is None:
                nodes = self.pool_nodes[claim.pool] if claim.pool else self.nodes
                for node in nodes:
                    picks = self._try_allocate(node, [claim])
                    if picks:
                        self._commit(node, picks)
                        break
                else:
                    raise ScenarioError(
                        f"claim {claim.namespace}/{claim.name}: allocated: true but no node has free matching devices"
                    )

    def _expand_workload(self, wi: int, w: dict, ctx: str) -> None:
        name = _label(w["name"], f"{ctx}.name")
        nss = self._ns_list(w["namespace"], f"{ctx}.namespace")
        count = _int(w.get("count", 1), f"{ctx}.count")
        state = w.get("state", "running")
        if state not in STATES:
            raise ScenarioError(f"{ctx}.state: {state!r} is not one of {', '.join(STATES)}")
        pool = w.get("pool")
        if pool is not None and pool not in self.pool_nodes:
            raise ScenarioError(f"{ctx}.pool: unknown node pool {pool!r}")
        controller = w.get("controller", "Job" if state in ("failed", "succeeded") else "Deployment")
        if controller not in ("Job", "Deployment", "StatefulSet", "None"):
            raise ScenarioError(f"{ctx}.controller: must be Job, Deployment, StatefulSet or None")
        restart = w.get("restartPolicy", "Never" if controller == "Job" else "Always")
        if state in ("failed", "succeeded") and restart == "Always":
            raise ScenarioError(f"{ctx}: a {state} pod needs restartPolicy Never or OnFailure")
        cpu = int(parse_quantity(w.get("cpu", "1"), f"{ctx}.cpu") * 1000)
        mem = int(parse_quantity(w.get("memory", "2Gi"), f"{ctx}.memory"))
        ext: dict[str, int] = {}
        for rname, qty in (w.get("resources") or {}).items():
            q = parse_quantity(qty, f"{ctx}.resources.{rname}")
            if q.denominator != 1 or q < 1:
                raise ScenarioError(
                    f"{ctx}.resources.{rname}: extended resources must be positive integers, got {qty!r}"
                )
            ext[str(rname)] = int(q)
        # resource claims
        refs = list(_list(w, "resourceClaims", ctx))
        if w.get("claimTemplate"):
            refs.append({"name": "gpu", "template": w["claimTemplate"]})
        if w.get("claim"):
            refs.append({"name": "gpu" if not refs else "shared", "claim": w["claim"]})
        norm_refs = []
        for ri, r in enumerate(refs):
            rctx = f"{ctx}.resourceClaims[{ri}]"
            _check_keys(r, {"name", "template", "claim"}, rctx, ("name",))
            if ("template" in r) == ("claim" in r):
                raise ScenarioError(f"{rctx}: give exactly one of template or claim")
            for ns in nss:
                if "template" in r and (ns, r["template"]) not in self.templates:
                    raise ScenarioError(f"{rctx}: ResourceClaimTemplate {ns}/{r['template']} is not declared")
                if "claim" in r and (ns, r["claim"]) not in self.claims:
                    raise ScenarioError(f"{rctx}: ResourceClaim {ns}/{r['claim']} is not declared")
            norm_refs.append({"name": _label(r["name"], f"{rctx}.name"), **r})
        pool_spec = self.pool_specs.get(pool) if pool else None
        node_selector = {POOL_LABEL: pool} if pool else {}
        node_selector.update({str(k): str(v) for k, v in (w.get("nodeSelector") or {}).items()})
        tolerations = []
        if pool_spec:
            tolerations += (
                [
                    {"key": t["key"], "operator": "Equal", "value": t.get("value", ""), "effect": t["effect"]}
                    if t.get("value")
                    else {"key": t["key"], "operator": "Exists", "effect": t["effect"]}
                    for t in self.pool_nodes[pool][0].taints
                    if t["key"] != "node.kubernetes.io/unschedulable"
                ]
                if self.pool_nodes[pool]
                else []
            )
        tolerations += list(_list(w, "tolerations", ctx))
        req = {"cpu": cpu, "memory": mem, **ext}
        # Extended resources a DeviceClass serves (DRAExtendedResource): on a node that does not advertise them the
        # scheduler allocates them through a claim it generates for the pod.
        extended = {r: self.extended_classes[r] for r in ext if r in self.extended_classes}
        labels = {"app.kubernetes.io/name": name, **{str(k): str(v) for k, v in (w.get("labels") or {}).items()}}
        image = str(w.get("image", "nvcr.io/nvidia/pytorch:25.01-py3" if ext or norm_refs else "python:3.12-slim"))
        per_ns = -(-count // len(nss))
        created_at = w.get("createdAt")
        if created_at is not None and (isinstance(created_at, bool) or not isinstance(created_at, int)
                                       or not -30 * 86400 < created_at < 0):
            raise ScenarioError(f"{ctx}.createdAt: seconds before the scenario's epoch, between -2592000 and 0 "
                                f"(exclusive), got {created_at!r}")
        for i in range(count):
            # "scheduled": the simulator's scheduler decides, pod by pod in order: bound where it fits now,
            # else Pending with the scheduler's message (a gang's pods after the first that finds no room).
            pod_state = "running" if state == "scheduled" else state
            ns = nss[i % len(nss)]
            tmpl_hash = _suffix(10, self.seed, "rs", ns, name)
            pod_name = self._pod_name(ns, name, controller, i // len(nss), per_ns, tmpl_hash)
            pod_uid = _uid(self.seed, "Pod", ns, pod_name)
            created = (created_at + i * 13) if created_at is not None else -2 * 86400 + (wi * 997 + i * 13) % 86400
            # claims for this pod
            pod_claims: list[tuple[dict, ClaimState]] = []
            for r in norm_refs:
                if "claim" in r:
                    pod_claims.append((r, self.claims[(ns, r["claim"])]))
                elif pod_state not in ("failed", "succeeded"):
                    tpl = self.templates[(ns, r["template"])]
                    cname = f"{pod_name}-{r['name']}-{_suffix(5, self.seed, 'claim', ns, pod_name, r['name'])}"[:253]
                    claim = ClaimState(
                        cname,
                        ns,
                        _uid(self.seed, "ResourceClaim", ns, cname),
                        tpl["requests"],
                        tpl["config"],
                        created,
                        template=r["template"],
                        owner_pod=(pod_name, pod_uid),
                        pod_claim_name=r["name"],
                        constraints=tpl["constraints"],
                    )
                    if (ns, cname) in self.claims:
                        raise ScenarioError(f"{ctx}: generated claim name collision {ns}/{cname}")
                    self.claims[(ns, cname)] = claim
                    self.claim_order.append(claim)
                    pod_claims.append((r, claim))
            node = None
            message = None
            extended_status: dict[str, Any] | None = None
            rejected = ""
            if pod_state in ("running", "creating", "crashloop", "failed", "succeeded"):
                node, ext_claim, rejected = self._place(
                    pool,
                    node_selector,
                    tolerations,
                    req,
                    [c for _, c in pod_claims],
                    consume=pod_state not in ("failed", "succeeded"),
                    extended=extended,
                    created=created,
                )
                if node is None and state == "scheduled":
                    pod_state = "pending"
                elif node is None:
                    raise ScenarioError(
                        f"{ctx}: no node {'in pool ' + repr(pool) if pool else ''} has room for pod "
                        f"{ns}/{pod_name} ({pod_state}); add nodes or lower the request"
                    )
                if ext_claim is not None:
                    extended_status = self._extended_claim(ext_claim, ns, pod_name, pod_uid, created, pod_state, ctx)
                for _, claim in pod_claims:
                    if node is not None and pod_state not in ("failed", "succeeded") and not rejected \
                            and len(claim.reserved) < 256:
                        claim.reserved.append({"resource": "pods", "name": pod_name, "uid": pod_uid})
            if pod_state == "pending":
                key = wi
                if key not in self.pending_cache:
                    self.pending_cache[key] = self._unschedulable_message(
                        node_selector, tolerations, req, [c for _, c in pod_claims], f"{ctx} ({ns}/{pod_name})",
                        extended, fits_ok=state == "scheduled",
                    )
                message = self.pending_cache[key]
            pod = self._pod_object(
                w,
                ns,
                name,
                pod_name,
                pod_uid,
                i // len(nss),
                created,
                pod_state,
                controller,
                restart,
                image,
                cpu,
                mem,
                ext,
                norm_refs,
                pod_claims,
                node,
                node_selector,
                tolerations,
                labels,
                tmpl_hash,
                message,
                extended_status,
                rejected,
            )
            self.pods.append(pod)
            if pod_state not in ("failed", "succeeded") and not rejected:
                self.pod_usage.append((ns, req))
            if message:
                self._event(
                    ns,
                    pod_name,
                    pod_uid,
                    created,
                    "Warning",
                    "FailedScheduling",
                    message,
                    1 + int(_frac(self.seed, "evcount", pod_uid) * 40),
                    "default-scheduler",
                    "Scheduling",
                )
            elif rejected:
                self._event(ns, pod_name, pod_uid, created + 2, "Warning", ADMISSION_ERROR_REASON, rejected, 1,
                            "kubelet", "")
            elif pod_state == "creating":
                self._event(
                    ns,
                    pod_name,
                    pod_uid,
                    created,
                    "Normal",
                    "Scheduled",
                    f"Successfully assigned {ns}/{pod_name} to {node.name}",
                    1,
                    "default-scheduler",
                    "Binding",
                )

    def _pod_name(self, ns: str, name: str, controller: str, i: int, count: int, tmpl_hash: str) -> str:
        for attempt in range(50):
            if controller == "StatefulSet":
                pod_name = f"{name}-{i}"
            elif controller == "None":
                pod_name = name if count == 1 else f"{name}-{i}"
            elif controller == "Job":
                pod_name = f"{name}-{_suffix(5, self.seed, 'pod', ns, name, i, attempt)}"
            else:
                pod_name = f"{name}-{tmpl_hash}-{_suffix(5, self.seed, 'pod', ns, name, i, attempt)}"
            if (ns, pod_name) not in self.pod_names:
                if len(pod_name) > 63:
                    raise ScenarioError(f"workload {ns}/{name}: pod name {pod_name!r} is longer than 63 characters")
                self.pod_names.add((ns, pod_name))
                return pod_name
            if controller in ("StatefulSet", "None"):
                break
        raise ScenarioError(f"workload {ns}/{name}: pod name collision for {name!r} in namespace {ns}")

    @staticmethod
    def _node_split(node: NodeState, req: dict[str, int], extended: dict[str, str]) -> tuple[dict, dict]:
        """(what the node's device plugins must serve, what DRA serves): an extended resource that a DeviceClass
        maps goes to DRA on a node that does not advertise it (the scheduler's DynamicResources plugin), and stays
        with NodeResourcesFit on a node that does."""
        dra = {r: n for r, n in req.items() if r in extended and n and not node.alloc.get(r)}
        return {r: n for r, n in req.items() if r not in dra}, dra

    @staticmethod
    def _extended_requests(dra: dict[str, int], extended: dict[str, str]) -> list[dict]:
        """The generated claim's requests: one per container and resource, named like the scheduler names them."""
        return [
            {"name": f"container-0-request-{j}", "deviceClassName": extended[r], "count": n, "mode": "ExactCount",
             "admin": False, "match": {}, "selectors": [], "capacity": {}, "resource": r}
            for j, (r, n) in enumerate(sorted(dra.items()))
        ]

    @staticmethod
    def _admission_error(node: NodeState, plugin_req: dict[str, int]) -> str:
        """The kubelet's rejection when the device plugin's Allocate refuses the (only) container's request: more
        than one unit of a shared resource whose pool fails such requests. "" when the kubelet admits the pod."""
        for resource in sorted(node.single_unit):
            count = plugin_req.get(resource, 0)
            if count > 1:
                cause = SHARED_REQUEST_ERROR.format(resource=resource, count=count)
                return f"Allocate failed due to rpc error: code = Unknown desc = {cause}, which is unexpected"
        return ""

    def _extended_claim(
        self, claim: ClaimState, ns: str, pod_name: str, pod_uid: str, created: float, state: str, ctx: str
    ) -> dict[str, Any]:
        """Name the claim the scheduler generated for a placed pod and return the pod's extendedResourceClaimStatus.
        A finished pod's claim is gone (deleted with the pod's completion); only the status names it."""
        claim.name = f"{pod_name}-extended-resources-{_suffix(5, self.seed, 'extended', ns, pod_name)}"[:253]
        claim.namespace, claim.uid, claim.created = ns, _uid(self.seed, "ResourceClaim", ns, claim.name), created + 1
        claim.owner_pod = (pod_name, pod_uid)
        if state not in ("failed", "succeeded"):
            if (ns, claim.name) in self.claims:
                raise ScenarioError(f"{ctx}: generated claim name collision {ns}/{claim.name}")
            claim.reserved.append({"resource": "pods", "name": pod_name, "uid": pod_uid})
            self.claims[(ns, claim.name)] = claim
            self.claim_order.append(claim)
        return {
            "resourceClaimName": claim.name,
            "requestMappings": [
                {"containerName": "main", "requestName": r["name"], "resourceName": r["resource"]} for r in claim.requests
            ],
        }

    def _filter_reasons(
        self,
        node: NodeState,
        selector: dict,
        tolerations: list[dict],
        req: dict[str, int],
        claims: list[ClaimState],
        extended: dict[str, str] | None = None,
    ) -> list[str]:
        if node.unschedulable:
            return ["node(s) were unschedulable"]
        for t in node.taints:
            if t["effect"] in ("NoSchedule", "NoExecute") and not _tolerates(t, tolerations):
                if self.taint_style == "generic":
                    return ["node(s) had untolerated taint(s)"]
                return [f"node(s) had untolerated taint {{{t['key']}: {t.get('value', '')}}}"]
        for k, v in selector.items():
            if node.labels.get(k) != v:
                return ["node(s) didn't match Pod's node affinity/selector"]
        reasons = []
        req, dra = self._node_split(node, req, extended or {})
        if dra:
            claims = [*claims, ClaimState("", "", "", self._extended_requests(dra, extended or {}), [], 0, extended=True)]
        if node.pod_count + 1 > node.alloc["pods"]:
            reasons.append("Too many pods")
        for rname, amount in req.items():
            if amount and node.used.get(rname, 0) + amount > node.alloc.get(rname, 0):
                reasons.append(f"Insufficient {rname}")
        if reasons:
            return reasons
        if claims and self._try_allocate(node, claims) is None:
            return ["cannot allocate all claims"]
        return []

    def _place(
        self,
        pool: str | None,
        selector: dict,
        tolerations: list[dict],
        req: dict[str, int],
        claims: list[ClaimState],
        consume: bool,
        extended: dict[str, str] | None = None,
        created: float = 0.0,
    ) -> tuple[NodeState | None, ClaimState | None, str]:
        """(the node the scheduler binds the pod to, the claim it generated for DRA-backed extended resources, the
        kubelet's admission error or ""). A pod the kubelet rejects holds nothing: nothing is consumed.

        A finished pod (`consume` false) consumes nothing now, but it ran once: it goes only where its requests fitted
        beside the pods that ran there at the time, and a running pod only where it fits beside the finished pods
        that ran after its creation (so that the history the scenario tells never had more on a node than it has)."""
        extended = extended or {}
        fixed = {c.node for c in claims if c.results is not None}
        if len(fixed) > 1:
            return None, None, ""
        nodes = self.pool_nodes[pool] if pool else self.nodes
        if fixed:
            nodes = [self.nodes_by_name[fixed.pop()]]
        if not nodes:
            return None, None, ""
        key = pool or ""
        start = self.pool_cursor.get(key, 0) % len(nodes) if len(nodes) > 1 else 0
        for k in range(len(nodes)):
            node = nodes[(start + k) % len(nodes)]
            plugin_req, dra = self._node_split(node, req, extended)
            generated = ClaimState("", "", "", self._extended_requests(dra, extended), [], 0, extended=True) if dra \
                else None
            rejected = self._admission_error(node, plugin_req)
            if not consume:
                if not self._filter_reasons(node, selector, tolerations, {}, []) and (
                        rejected or _fits_history(node, created, created + FINISHED_RUN, plugin_req)):
                    if not rejected:
                        node.finished.append((created, created + FINISHED_RUN, plugin_req))
                    return node, generated if not rejected else None, rejected
                continue
            if self._filter_reasons(node, selector, tolerations, plugin_req, []):
                continue
            if not rejected and not _fits_history(node, created, math.inf, plugin_req):
                continue
            wanted = [*claims, *([generated] if generated else [])]
            picks = self._try_allocate(node, wanted) if wanted else []
            if picks is None:
                continue
            if len(nodes) > 1:
                self.pool_cursor[key] = (start + k) % len(nodes)
            if rejected:  # bound by the scheduler, refused by the kubelet: no device, no claim, nothing used
                return node, None, rejected
            self._commit(node, picks)
            node.pod_count += 1
            for rname, amount in plugin_req.items():
                node.used[rname] = node.used.get(rname, 0) + amount
            node.running_since.append((created, plugin_req))
            return node, generated, ""
        return None, None, ""

    def _unschedulable_message(
        self,
        selector: dict,
        tolerations: list[dict],
        req: dict[str, int],
        claims: list[ClaimState],
        ctx: str,
        extended: dict[str, str] | None = None,
        fits_ok: bool = False,
    ) -> str:
        """The FailedScheduling message; a node where the pod fits is an error in the scenario, unless `fits_ok`
        (the placement found no room for a "scheduled" pod: such a node is left out of the histogram)."""
        hist: dict[str, int] = {}
        unresolvable = 0
        for node in self.nodes:
            reasons = self._filter_reasons(node, selector, tolerations, req, claims, extended)
            if not reasons and fits_ok:
                continue
            if not reasons:
                raise ScenarioError(
                    f"{ctx}: declared pending but it fits on node {node.name}; request more than is "
                    "free, or fill the target pool first"
                )
            for r in reasons:
                hist[r] = hist.get(r, 0) + 1
            if not (
                reasons[0].startswith("Insufficient") or reasons[0] in ("Too many pods", "cannot allocate all claims")
            ):
                unresolvable += 1
        n = len(self.nodes)
        if n == 0:
            return "no nodes available to schedule pods"
        parts = sorted(f"{c} {r}" for r, c in hist.items())
        pre = []
        if n - unresolvable:
            pre.append(f"{n - unresolvable} No preemption victims found for incoming pod")
        if unresolvable:
            pre.append(f"{unresolvable} Preemption is not helpful for scheduling")
        dra = "no new claims to deallocate, " if self.has_dra or self.classes else ""
        return (
            f"0/{n} nodes are available: {', '.join(parts)}. {dra}preemption: 0/{n} nodes are available: "
            f"{', '.join(sorted(pre))}."
        )

    def _event(
        self,
        ns: str,
        pod: str,
        pod_uid: str,
        created: float,
        etype: str,
        reason: str,
        message: str,
        count: int,
        component: str,
        action: str,
    ) -> None:
        name = f"{pod}.{_digest(self.seed, 'event', ns, pod, reason).hex()[:16]}"
        self.events.append(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": _uid(self.seed, "Event", ns, name),
                    "creationTimestamp": _ts(created + 1),
                },
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": pod, "uid": pod_uid},
                "reason": reason,
                "message": message,
                "type": etype,
                "count": count,
                "firstTimestamp": _ts(created + 1),
                "lastTimestamp": _ts(created + 1 + (count - 1) * 300),
                "source": {"component": component},
                "reportingComponent": component,
                "reportingInstance": f"{component}-control-plane-0",
                "action": action,
            }
        )

    def _pod_object(
        self,
        w: dict,
        ns: str,
        name: str,
        pod_name: str,
        pod_uid: str,
        i: int,
        created: float,
        state: str,
        controller: str,
        restart: str,
        image: str,
        cpu: int,
        mem: int,
        ext: dict[str, int],
        refs: list[dict],
        pod_claims: list,
        node: NodeState | None,
        selector: dict,
        tolerations: list[dict],
        labels: dict,
        tmpl_hash: str,
        message: str | None,
        extended_status: dict[str, Any] | None = None,
        rejected: str = "",
    ) -> dict:
        cname = "main"
        requests = {"cpu": _fmt_cpu(cpu), "memory": _fmt_bytes(mem), **{k: str(v) for k, v in ext.items()}}
        limits = {"memory": _fmt_bytes(mem), **{k: str(v) for k, v in ext.items()}}
        if controller != "Job":
            limits["cpu"] = _fmt_cpu(cpu)
        resources: dict[str, Any] = {"requests": requests, "limits": limits}
        if refs:
            resources["claims"] = [{"name": r["name"]} for r in refs]
        container: dict[str, Any] = {
            "name": cname,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "resources": resources,
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        }
        if w.get("command"):
            container["command"] = [str(c) for c in w["command"]]
        if w.get("privileged"):
            container["securityContext"] = {"privileged": True}
        if w.get("hostDevice"):
            container["volumeMounts"] = [{"name": HOST_DEVICE_VOLUME, "mountPath": w["hostDevice"]}]
        all_tolerations = [
            *(dict(t) for t in tolerations),
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ]
        sa = str(w.get("serviceAccount", w.get("serviceAccountName", "default")))
        spec: dict[str, Any] = {
            "containers": [container],
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": sa,
            "serviceAccount": sa,
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "tolerations": all_tolerations,
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        }
        if w.get("hostDevice"):
            spec["volumes"] = [{"name": HOST_DEVICE_VOLUME, "hostPath": {"path": w["hostDevice"], "type": ""}}]
        if w.get("priorityClassName"):
            spec["priorityClassName"] = str(w["priorityClassName"])
        if selector:
            spec["nodeSelector"] = dict(selector)
        if node:
            spec["nodeName"] = node.name
        if refs:
            spec["resourceClaims"] = [
                {"name": r["name"], "resourceClaimTemplateName": r["template"]}
                if "template" in r
                else {"name": r["name"], "resourceClaimName": r["claim"]}
                for r in refs
            ]
        meta: dict[str, Any] = {
            "name": pod_name,
            "namespace": ns,
            "uid": pod_uid,
            "creationTimestamp": _ts(created),
            "labels": dict(labels),
        }
        if controller == "Deployment":
            meta["labels"]["pod-template-hash"] = tmpl_hash
            owner = ("apps/v1", "ReplicaSet", f"{name}-{tmpl_hash}")
        elif controller == "StatefulSet":
            meta["labels"]["apps.kubernetes.io/pod-index"] = str(i)
            meta["labels"]["statefulset.kubernetes.io/pod-name"] = pod_name
            owner = ("apps/v1", "StatefulSet", name)
        elif controller == "Job":
            meta["labels"]["batch.kubernetes.io/job-name"] = name
            meta["labels"]["job-name"] = name
            owner = ("batch/v1", "Job", name)
        else:
            owner = None
        if owner:
            meta["ownerReferences"] = [
                {
                    "apiVersion": owner[0],
                    "kind": owner[1],
                    "name": owner[2],
                    "uid": _uid(self.seed, owner[1], ns, owner[2]),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        guaranteed = controller != "Job"
        status: dict[str, Any] = {"qosClass": "Guaranteed" if guaranteed else "Burstable"}
        t0 = created + 2
        sched = {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": _ts(t0)}
        image_id = f"{image.split(':')[0]}@sha256:{_digest('image', image).hex()}"
        cid = f"containerd://{_digest(self.seed, 'ctr', ns, pod_name).hex()}"
        if rejected:
            # The kubelet's rejectPod: phase, reason and message; the scheduler's PodScheduled stays. No container
            # was created, so no container status and no start time.
            status.update({"phase": "Failed", "reason": ADMISSION_ERROR_REASON, "message": f"Pod was rejected: {rejected}",
                           "conditions": [sched]})
        elif state == "pending":
            status["phase"] = "Pending"
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": _ts(t0),
                    "reason": "Unschedulable",
                    "message": message,
                }
            ]
        else:
            node.pod_ip_seq += 1
            pod_ip = f"{node.pod_cidr.rsplit('.', 1)[0]}.{(node.pod_ip_seq % 250) + 2}"
            status.update({"hostIP": node.ip, "hostIPs": [{"ip": node.ip}], "startTime": _ts(t0 + 1)})
            ready = state == "running"
            running_phase = state in ("running", "crashloop")

            def cond(t: str, ok: bool, reason: str | None = None) -> dict:
                c = {
                    "type": t,
                    "status": "True" if ok else "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": _ts(t0 + 30),
                }
                if reason:
                    c["reason"] = reason
                return c

            cs: dict[str, Any] = {
                "name": cname,
                "image": image,
                "imageID": image_id if state != "creating" else "",
                "restartCount": 0,
                "ready": ready,
                "started": ready,
            }
            if state == "running":
                status["phase"] = "Running"
                cs.update({"containerID": cid, "state": {"running": {"startedAt": _ts(t0 + 30)}}})
                conds = [
                    cond("PodReadyToStartContainers", True),
                    cond("Initialized", True),
                    cond("Ready", True),
                    cond("ContainersReady", True),
                    sched,
                ]
            elif state == "creating":
                status["phase"] = "Pending"
                cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
                conds = [
                    cond("PodReadyToStartContainers", False),
                    cond("Initialized", True),
                    cond("Ready", False, "ContainersNotReady"),
                    cond("ContainersReady", False, "ContainersNotReady"),
                    sched,
                ]
                conds[2]["message"] = conds[3]["message"] = f"containers with unready status: [{cname}]"
            elif state == "crashloop":
                status["phase"] = "Running"
                restarts = 3 + int(_frac(self.seed, "restarts", pod_uid) * 20)
                cs.update(
                    {
                        "containerID": cid,
                        "restartCount": restarts,
                        "started": False,
                        "state": {
                            "waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": f"back-off 5m0s restarting failed container={cname} pod={pod_name}_{ns}({pod_uid})",
                            }
                        },
                        "lastState": {
                            "terminated": {
                                "exitCode": 1,
                                "reason": "Error",
                                "containerID": cid,
                                "startedAt": _ts(t0 + 3000),
                                "finishedAt": _ts(t0 + 3040),
                            }
                        },
                    }
                )
                conds = [
                    cond("PodReadyToStartContainers", True),
                    cond("Initialized", True),
                    cond("Ready", False, "ContainersNotReady"),
                    cond("ContainersReady", False, "ContainersNotReady"),
                    sched,
                ]
                conds[2]["message"] = conds[3]["message"] = f"containers with unready status: [{cname}]"
            else:
                ok = state == "succeeded"
                reason = "Completed" if ok else str(w.get("exitReason", "Error"))
                code = 0 if ok else (137 if reason == "OOMKilled" else 1)
                status["phase"] = "Succeeded" if ok else "Failed"
                cs.update(
                    {
                        "containerID": cid,
                        "ready": False,
                        "started": False,
                        "state": {
                            "terminated": {
                                "exitCode": code,
                                "reason": reason,
                                "containerID": cid,
                                "startedAt": _ts(t0 + 30),
                                "finishedAt": _ts(t0 + 3600),
                            }
                        },
                    }
                )
                done = "PodCompleted" if ok else "PodFailed"
                conds = [
                    cond("PodReadyToStartContainers", False),
                    cond("Initialized", True, done),
                    cond("Ready", False, done),
                    cond("ContainersReady", False, done),
                    sched,
                ]
            if running_phase or state == "creating":
                status["podIP"] = pod_ip
                status["podIPs"] = [{"ip": pod_ip}]
                if state == "creating":
                    del status["podIP"], status["podIPs"]
            status["conditions"] = conds
            status["containerStatuses"] = [cs]
        gen = [(r["name"], c.name) for r, c in pod_claims if c.template is not None]
        if gen and not rejected:
            status["resourceClaimStatuses"] = [{"name": n, "resourceClaimName": c} for n, c in gen]
        if extended_status:
            status["extendedResourceClaimStatus"] = extended_status
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}

    # ---------------------------------------------------------------- quotas
    def build_quotas(self) -> list[dict]:
        out = []
        usage: dict[str, dict[str, int]] = {}
        for ns, req in self.pod_usage:
            u = usage.setdefault(ns, {})
            u["pods"] = u.get("pods", 0) + 1
            for k, v in req.items():
                u[k] = u.get(k, 0) + v
        claim_count: dict[str, int] = {}
        class_devices: dict[tuple[str, str], int] = {}
        for c in self.claim_order:
            claim_count[c.namespace] = claim_count.get(c.namespace, 0) + 1
            for r in c.requests:
                key = (c.namespace, r["deviceClassName"])
                class_devices[key] = class_devices.get(key, 0) + (
                    r["count"] if r["mode"] == "ExactCount" else ALL_MODE_QUOTA
                )
        seen: set[tuple[str, str]] = set()
        for i, q in enumerate(_list(self.spec, "quotas", "scenario")):
            ctx = f"quotas[{i}]"
            _check_keys(q, {"name", "namespace", "hard", "scopes", "scopeSelector", "fieldManager"}, ctx,
                        ("namespace", "hard"))
            scoping = self._quota_scoping(q, ctx)
            if not isinstance(q["hard"], dict) or not q["hard"]:
                raise ScenarioError(f"{ctx}.hard: expected a non-empty mapping")
            for ns in self._ns_list(q["namespace"], f"{ctx}.namespace"):
                name = _subdomain(q.get("name", "gpu-quota"), f"{ctx}.name")
                if (ns, name) in seen:
                    raise ScenarioError(f"{ctx}: duplicate ResourceQuota {ns}/{name}; give each quota a name")
                seen.add((ns, name))
                u = usage.get(ns, {})
                hard, used = {}, {}
                for key, value in q["hard"].items():
                    key = str(key)
                    parse_quantity(value, f"{ctx}.hard.{key}")
                    hard[key] = str(value)
                    used[key] = self._quota_used(key, u, claim_count.get(ns, 0), class_devices, ns, ctx)
                metadata = {
                    "name": name,
                    "namespace": ns,
                    "uid": _uid(self.seed, "ResourceQuota", ns, name),
                    "creationTimestamp": _ts(-60 * 86400 + i * 60),
                }
                if q.get("fieldManager"):
                    # Written by someone else (e.g. a platform team's kubectl): they own spec.hard's keys.
                    metadata["managedFields"] = [{
                        "manager": _label(q["fieldManager"], f"{ctx}.fieldManager"), "operation": "Update",
                        "apiVersion": "v1", "time": metadata["creationTimestamp"], "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:spec": {"f:hard": {f"f:{key}": {} for key in hard},
                                                **{f"f:{k}": {} for k in scoping}}},
                    }]
                out.append(
                    {
                        "apiVersion": "v1",
                        "kind": "ResourceQuota",
                        "metadata": metadata,
                        "spec": {"hard": hard, **scoping},
                        "status": {"hard": dict(hard), "used": used},
                    }
                )
        return out

    @staticmethod
    def _quota_scoping(q: dict, ctx: str) -> dict:
        """`scopes` (a list of scope names) and `scopeSelector` ({matchExpressions: [...]}) as given, checked for
        shape; usage is the scenario's (scoped quotas count every pod of the namespace until a pod is admitted)."""
        out: dict = {}
        if "scopes" in q:
            if not isinstance(q["scopes"], list) or not all(isinstance(x, str) for x in q["scopes"]):
                raise ScenarioError(f"{ctx}.scopes: expected a list of scope names")
            out["scopes"] = list(q["scopes"])
        if "scopeSelector" in q:
            selector = q["scopeSelector"]
            if not isinstance(selector, dict) or not isinstance(selector.get("matchExpressions"), list):
                raise ScenarioError(f"{ctx}.scopeSelector: expected {{matchExpressions: [...]}}")
            out["scopeSelector"] = {"matchExpressions": [dict(e) for e in selector["matchExpressions"]]}
        return out

    @staticmethod
    def _quota_used(key: str, u: dict[str, int], claims: int, class_devices: dict, ns: str, ctx: str) -> str:
        if key in ("pods", "count/pods"):
            return str(u.get("pods", 0))
        if key in ("cpu", "requests.cpu", "limits.cpu"):
            return _fmt_cpu(u.get("cpu", 0))
        if key in ("memory", "requests.memory", "limits.memory"):
            return _fmt_bytes(u.get("memory", 0)) if u.get("memory") else "0"
        if key == "count/resourceclaims.resource.k8s.io":
            return str(claims)
        if key.endswith(".deviceclass.resource.k8s.io/devices"):
            cls = key[: -len(".deviceclass.resource.k8s.io/devices")]
            return str(class_devices.get((ns, cls), 0))
        if key.startswith("requests."):
            return str(u.get(key[len("requests.") :], 0))
        raise ScenarioError(f"{ctx}.hard: kubesim cannot compute usage for quota key {key!r}")

    # ---------------------------------------------------------------- main
    def build(self) -> list[dict]:
        _check_keys(
            self.spec,
            {
                "name",
                "description",
                "kubernetesVersion",
                "apiServer",
                "schedulerTaintMessage",
                "nodePools",
                "deviceClasses",
                "namespaces",
                "configmaps",
                "claimTemplates",
                "claims",
                "workloads",
                "quotas",
                "objects",
                "telemetry",
            },
            "scenario",
        )
        scenario_api_profile(self.spec)
        raw = self.raw_objects()
        namespaces = self.build_namespaces()
        configmaps = self.build_configmaps()
        classes = self.build_device_classes()
        self.build_nodes()
        templates = self.build_templates()
        self.declare_claims()
        self.build_workloads()
        quotas = self.build_quotas()
        claims = [self._claim_object(c) for c in self.claim_order]
        generated = [
            *namespaces,
            *configmaps,
            *classes,
            *self.node_objs,
            *self.slices,
            *quotas,
            *templates,
            *claims,
            *self.pods,
            *self.events,
        ]
        if not raw:
            return generated
        seen = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in generated}
        for ctx, o in raw:
            key = (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
            if key in seen:
                raise ScenarioError(f"{ctx}: duplicate {key[0]} {'/'.join(k for k in key[1:] if k)}")
            seen.add(key)
        # one stable merge: every kind's generated objects first, then its raw ones; unknown kinds last
        rank = {k: i for i, k in enumerate(OBJECT_KIND_ORDER)}
        merged = generated + [o for _, o in raw]
        return sorted(merged, key=lambda o: rank.get(o["kind"], len(rank)))

    # ---------------------------------------------------------------- raw objects
    def raw_objects(self) -> list[tuple[str, dict]]:
        """``objects:``: complete Kubernetes objects passed through (deep copies), uid/creationTimestamp filled in."""
        out = []
        for i, o in enumerate(_list(self.spec, "objects", "scenario")):
            ctx = f"objects[{i}]"
            if not isinstance(o, dict):
                raise ScenarioError(f"{ctx}: expected a Kubernetes object (mapping), got {type(o).__name__}")
            for key in ("apiVersion", "kind"):
                if not isinstance(o.get(key), str) or not o[key]:
                    raise ScenarioError(f"{ctx}: missing {key}")
            meta = o.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
                raise ScenarioError(f"{ctx} ({o['kind']}): missing metadata.name")
            obj = copy.deepcopy(o)
            meta = obj["metadata"]
            ctx = f"{ctx} ({obj['kind']} {meta['name']})"
            meta.setdefault("uid", _uid(self.seed, obj["kind"], str(meta.get("namespace", "")), meta["name"]))
            meta.setdefault("creationTimestamp", _ts(-10 * 86400 + i * 60))
            out.append((ctx, obj))
        return out


def _read(source: str | Path) -> dict:
    text_name = str(source)
    if text_name == "empty":
        return {"name": "empty"}
    path = SCENARIO_DIR / f"{text_name}.yaml" if text_name in BUILTIN_SCENARIOS else Path(text_name)
    if not path.is_file():
        raise ScenarioError(f"unknown scenario {text_name!r}: not one of {', '.join(BUILTIN_SCENARIOS)} and not a file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: invalid YAML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario must be a YAML mapping, got {type(data).__name__}")
    return data


def scenario_api_profile(source: str | Path | dict) -> str | None:
    """The scenario's `apiServer` (an API profile of kubesim.apis), or None for the default."""
    spec = source if isinstance(source, dict) else _read(source)
    value = spec.get("apiServer") if isinstance(spec, dict) else None
    if value is None:
        return None
    if value not in PROFILES:
        raise ScenarioError(f"apiServer: {value!r} is not one of {', '.join(PROFILES)}")
    return str(value)


def load_scenario(source: str | Path | dict = "demo", seed: int = 0) -> list[dict]:
    """Expand a scenario (builtin name, YAML path or parsed dict) into Kubernetes objects in creation order."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ScenarioError(f"seed must be an integer, got {seed!r}")
    spec = source if isinstance(source, dict) else _read(source)
    if not isinstance(spec, dict):
        raise ScenarioError("scenario must be a mapping")
    # The build allocates millions of acyclic dicts; the cyclic GC would rescan them repeatedly (about half the
    # run time for "large"), so it is paused for the duration and restored afterwards.
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        return _Builder(spec, seed).build()
    except ScenarioError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError) as exc:  # malformed values deep inside the spec
        raise ScenarioError(f"malformed scenario: {type(exc).__name__}: {exc}") from exc
    finally:
        if gc_enabled:
            gc.enable()
