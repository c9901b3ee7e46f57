"""What the derivation shares: the GPU labels and MIG rules it reads, and small helpers for values, DRA
attributes and finding rows."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db.models import Q

from inventory.k8s.semantics import BLOCKING_TAINT_EFFECTS, parse_quantity
from inventory.models import (
    Finding,
)

GPU_LABEL_PREFIX = "nvidia.com/"
GPU_PRESENT_LABELS = ("nvidia.com/gpu.present", "nvidia.com/gpu.product", "nvidia.com/gpu.count")
TERMINAL_PHASES = {"Succeeded", "Failed"}
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(?P<profile>\d+g\.\d+gb(?:\+me)?)$")
MIG_PROFILE_MEMORY = re.compile(r"^\d+g\.(?P<gb>\d+)gb(?:\+me)?$")
MIG_PROFILE_SLICES = re.compile(r"^(?P<g>\d+)g\.")
# GFD's single strategy appends the profile of the node's (identical) MIG devices to the product label.
MIG_SINGLE_PRODUCT = re.compile(r"-MIG-(?P<profile>\d+g\.\d+gb(?:\+me)?)$")
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
# GPU instance slices of one card: 7 on A100/H100/H200/B200, 4 on A30.
MIG_GPU_SLICES_DEFAULT = 7
MIG_GPU_SLICES = (("A30", 4),)

PoolKey = tuple[str, str]  # (driver, pool)


POOL_SCOPE_PREFIX = "pool/"


def pool_scope(pool: PoolKey) -> str:
    """The `scope` of a pool's findings: pool/<driver>/<pool> (a driver name has no slash; a pool name may)."""
    return f"{POOL_SCOPE_PREFIX}{pool[0]}/{pool[1]}"


def pool_of_scope(scope: str) -> PoolKey:
    """The pool a pool finding's `scope` names (pool_scope's inverse)."""
    driver, _, pool = scope.removeprefix(POOL_SCOPE_PREFIX).partition("/")
    return driver, pool


def pools_q(pools: Iterable[PoolKey], *, driver: str = "driver", pool: str = "pool") -> Q:
    """Q for rows of these pools: one `driver = … AND pool IN (…)` per driver (a few), not one term per pool."""
    by_driver: dict[str, list[str]] = defaultdict(list)
    for driver_name, pool_name in pools:
        by_driver[driver_name].append(pool_name)
    condition = Q(pk__in=[])
    for driver_name, names in sorted(by_driver.items()):
        condition |= Q(**{driver: driver_name, f"{pool}__in": sorted(names)})
    return condition


def quantity_int(value: Any) -> int:
    try:
        number = parse_quantity(value)
    except ValueError:
        return 0
    return int(number) if number.denominator == 1 else 0


def label_int(labels: dict[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError, TypeError):
        return None


def model_from_product(product: str) -> str:
    """GFD product label → model: strip the -SHARED suffix and the MIG single-strategy suffix."""
    product = product.removesuffix("-SHARED")
    return MIG_SINGLE_PRODUCT.sub("", product)


def mig_slices_per_card(profile: str, product: str) -> int:
    """How many MIG devices of `profile` one card holds when partitioned with it alone (the GPU Operator's
    `all-<profile>` layouts, the only kind the single strategy allows): the card's GPU-instance slices divided by the
    profile's (1g: 7, 2g: 3, 3g: 2, 4g and 7g: 1 on 7-slice cards)."""
    match = MIG_PROFILE_SLICES.match(profile)
    per_instance = int(match.group("g")) if match else 0
    slices = next((n for name, n in MIG_GPU_SLICES if name in product.upper()), MIG_GPU_SLICES_DEFAULT)
    return max(slices // per_instance, 1) if per_instance else 1


def mig_single_profile(resource: str, labels: dict[str, str]) -> str:
    """The MIG profile `nvidia.com/gpu` stands for on a single-strategy node ("" when it is a whole card)."""
    if resource != "nvidia.com/gpu" or labels.get(MIG_STRATEGY_LABEL) != "single":
        return ""
    match = MIG_SINGLE_PRODUCT.search(labels.get("nvidia.com/gpu.product", ""))
    return match.group("profile") if match else ""


def normalise_model(text: str) -> str:
    return re.sub(r"[\s_]+", "-", text.strip()).upper()


def version_tuple(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", text or "")
    return tuple(int(p) for p in parts)


def node_pool(labels: dict[str, str]) -> str:
    for key in settings.PORTAL_NODE_POOL_LABELS:
        if labels.get(key):
            return labels[key]
    return ""


def blocking_taints(taints: Any) -> list[dict[str, Any]]:
    if not isinstance(taints, list):
        return []
    return [t for t in taints if isinstance(t, dict) and t.get("effect") in BLOCKING_TAINT_EFFECTS]


def dra_attribute(attributes: dict[str, Any], name: str, driver: str) -> Any:
    """A DRA attribute's value, whether written as `name` or `<driver>/name`. Public: other apps use it too (telemetry
    maps DRA devices by their `uuid` attribute)."""
    raw = attributes.get(name)
    if raw is None:
        raw = attributes.get(f"{driver}/{name}")
    if not isinstance(raw, dict):
        return None
    for kind in ("string", "version", "int", "bool", "strings", "versions", "ints", "bools"):
        if kind in raw:
            return raw[kind]
    return None


def capacity_value(capacities: dict[str, Any], name: str, driver: str) -> Any:
    raw = capacities.get(name)
    if raw is None:
        raw = capacities.get(f"{driver}/{name}")
    return raw.get("value") if isinstance(raw, dict) else None


def mib(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(parse_quantity(value) / (1024 * 1024))
    except ValueError:
        return None


def nvidia_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k.startswith(GPU_LABEL_PREFIX)}


def finding_row(cluster_id: int, kind: str, severity: str, scope: str, subject: str, node: str, message: str,
                evidence: dict[str, Any]) -> Finding:
    return Finding(cluster_id=cluster_id, kind=kind, severity=severity, scope=scope, subject=subject, node_name=node,
                   message=message, evidence=evidence)
