"""Resource arithmetic of the NodeResourcesFit plugin: pod requests and node allocatable as integers.

Units follow the scheduler's `framework.Resource`: cpu in millicores (`Quantity.MilliValue()`, rounded up), every
other resource as an integer (`Quantity.Value()`, rounded up): memory/ephemeral-storage/hugepages in bytes, extended
resources in units. The pod request rule is `k8s.io/component-helpers/resource.PodRequests`:

    max(sum(containers) + sum(sidecars), max over init containers in order of (init + sidecars started before))
    + spec.overhead

where a sidecar is an init container with `restartPolicy: Always`. A container resource with a limit but no request
requests its limit (API defaulting, for every resource). Pod-level `spec.resources` (PodLevelResources) replaces the
aggregate for the resources it sets. Every function here tolerates malformed input: a bad quantity is skipped and
reported in the returned problem list, never raised.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from inventory.k8s.quantity import parse_quantity

__all__ = [
    "CPU",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "PODS",
    "format_amount",
    "node_allocatable",
    "pod_requests",
    "quantity_int",
]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
# Pod-level resources (spec.resources) may set only these (PodLevelResources, KEP-2837).
_POD_LEVEL_SUPPORTED = frozenset({CPU, MEMORY})


@functools.lru_cache(maxsize=16384)
def _parse_text(text: str) -> Decimal:
    return parse_quantity(text)


def _parse(value: Any) -> Decimal:
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return Decimal(value)
    return parse_quantity(value)


def quantity_int(resource: str, value: Any) -> int:
    """The scheduler's integer for one quantity of `resource`; raises ValueError for a malformed one."""
    amount = _parse(value)
    if resource == CPU:
        amount *= 1000
    if not amount.is_finite():
        raise ValueError(f"not a finite quantity: {str(value)[:64]!r}")
    return math.ceil(amount)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _amounts(where: str, raw: Mapping[str, Any], problems: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or name == PODS:
            continue
        try:
            out[name] = quantity_int(name, value)
        except ValueError:
            problems.append(f"{where}: {name} is not a valid quantity ({str(value)[:40]!r}); ignored")
    return out


def _container_requests(where: str, container: Any, problems: list[str]) -> dict[str, int]:
    resources = _dict(_dict(container).get("resources"))
    requests = _amounts(where, _dict(resources.get("requests")), problems)
    limits = _amounts(where, _dict(resources.get("limits")), problems)
    for name, limit in limits.items():
        requests.setdefault(name, limit)  # API defaulting: request = limit when only the limit is set
    return requests


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def pod_requests(pod: Any) -> tuple[dict[str, int], list[str]]:
    """Effective scheduling request of a pod (resource → integer, zero entries dropped) and the problems found."""
    spec = _dict(_dict(pod).get("spec"))
    problems: list[str] = []
    total: dict[str, int] = {}
    for index, container in enumerate(_list(spec.get("containers"))):
        name = _dict(container).get("name") or f"#{index}"
        _add(total, _container_requests(f"container {name}", container, problems))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for index, container in enumerate(_list(spec.get("initContainers"))):
        name = _dict(container).get("name") or f"#{index}"
        requests = _container_requests(f"init container {name}", container, problems)
        if _dict(container).get("restartPolicy") == "Always":
            _add(total, requests)  # a sidecar keeps running beside the main containers
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            during = dict(sidecars)
            _add(during, requests)
            _max(init_peak, during)
    _max(total, init_peak)
    pod_level = _dict(spec.get("resources"))
    if pod_level:
        level = _amounts("pod resources", _dict(pod_level.get("requests")), problems)
        for name, limit in _amounts("pod resources", _dict(pod_level.get("limits")), problems).items():
            level.setdefault(name, limit)
        for name, amount in level.items():
            if name in _POD_LEVEL_SUPPORTED or name.startswith("hugepages-"):
                total[name] = amount
    _add(total, _amounts("overhead", _dict(spec.get("overhead")), problems))
    return {name: amount for name, amount in total.items() if amount > 0}, problems


def node_allocatable(node: Any) -> tuple[dict[str, int], list[str]]:
    """`status.allocatable` as integers (pods included); malformed entries are skipped and reported."""
    status = _dict(_dict(node).get("status"))
    problems: list[str] = []
    out: dict[str, int] = {}
    for name, value in _dict(status.get("allocatable")).items():
        if not isinstance(name, str):
            continue
        try:
            out[name] = quantity_int(name, value)
        except ValueError:
            problems.append(f"allocatable {name} is not a valid quantity ({str(value)[:40]!r}); treated as 0")
    return out, problems


_BINARY = ((2**50, "Pi"), (2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"))


def format_amount(resource: str, amount: int) -> str:
    """A readable quantity: cpu as cores or millicores, byte resources with binary suffixes, others as integers."""
    if resource == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource in (MEMORY, EPHEMERAL_STORAGE) or resource.startswith("hugepages-"):
        for factor, suffix in _BINARY:
            if abs(amount) >= factor:
                value = amount / factor
                return f"{value:.0f}{suffix}" if value == int(value) else f"{value:.1f}{suffix}"
        return str(amount)
    return str(amount)
