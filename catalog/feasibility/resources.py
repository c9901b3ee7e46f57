"""Resource arithmetic of the NodeResourcesFit plugin: pod requests and node allocatable as the scheduler's integers.

Units follow the scheduler's `framework.Resource`: cpu in millicores (`Quantity.MilliValue()`, rounded up), every
other resource as an integer (`Quantity.Value()`, rounded up): memory/ephemeral-storage/hugepages in bytes, extended
resources in units. The pod request rule (sidecars, init containers, overhead, pod-level resources) and the quantity
grammar are the shared ones in `inventory.k8s.semantics`; this module only turns them into the scheduler's integers
and formats amounts for explanations. Malformed input never raises: bad quantities are reported and skipped.
"""

from __future__ import annotations

from typing import Any

from inventory.k8s.semantics import QuantityError, as_dict, pod_resources, scheduler_amount

__all__ = [
    "CPU",
    "EPHEMERAL_STORAGE",
    "MEMORY",
    "PODS",
    "format_amount",
    "node_allocatable",
    "pod_requests",
]

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"


def pod_requests(pod: Any) -> tuple[dict[str, int], list[str]]:
    """Effective scheduling request of a pod (resource → integer, zero entries dropped) and the problems found."""
    resources = pod_resources(pod)
    return resources.scheduler_requests(), resources.messages


def node_allocatable(node: Any) -> tuple[dict[str, int], list[str]]:
    """`status.allocatable` as integers (pods included); malformed entries are skipped and reported."""
    problems: list[str] = []
    out: dict[str, int] = {}
    for name, value in as_dict(as_dict(as_dict(node).get("status")).get("allocatable")).items():
        if not isinstance(name, str):
            continue
        try:
            out[name] = scheduler_amount(name, value)
        except QuantityError:
            problems.append(f"allocatable {name} is not a valid quantity ({str(value)[:40]!r}); treated as 0")
    return out, problems


_BINARY = ((2**50, "Pi"), (2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"))


def format_amount(resource: str, amount: int) -> str:
    """A readable scheduler amount: cpu as cores or millicores, byte resources with binary suffixes (one decimal),
    others as integers. (Canonical quantity text is `inventory.k8s.semantics.format_quantity`.)"""
    if resource == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource in (MEMORY, EPHEMERAL_STORAGE) or resource.startswith("hugepages-"):
        for factor, suffix in _BINARY:
            if abs(amount) >= factor:
                value = amount / factor
                return f"{value:.0f}{suffix}" if value == int(value) else f"{value:.1f}{suffix}"
        return str(amount)
    return str(amount)
