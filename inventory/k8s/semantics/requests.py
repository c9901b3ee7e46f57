"""A pod's effective resource requests and limits: `k8s.io/component-helpers/resource` PodRequests / PodLimits.

    requests = max(sum(containers) + sum(sidecars), max over init containers in order of (init + sidecars started
               before)) + spec.overhead

A sidecar is an init container with `restartPolicy: Always`: it runs beside the main containers and every later init
container. A container resource with a limit and no request requests its limit (API defaulting). Pod-level
`spec.resources` (PodLevelResources) replaces the aggregate for the resources it sets (cpu, memory, hugepages-*).
Limits aggregate the same way; overhead is added only to limits that are set.

Extended resources (vendor `domain/name`, and DRA's implicit `deviceclass.resource.kubernetes.io/<class>`) follow
stricter rules the API server and the device plugins enforce: whole numbers, not negative, declared in limits, a
request equal to the limit. Violations are reported as problems, in spec order, and the offending amounts are left
out; nothing here raises for malformed input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

from inventory.k8s.semantics.quantity import QuantityError, parse_quantity
from inventory.k8s.semantics.values import as_dict, as_list, as_str

__all__ = [
    "IMPLICIT_EXTENDED_PREFIX",
    "NATIVE_CONTAINER_RESOURCES",
    "NATIVE_RESOURCES",
    "PodResources",
    "RequestProblem",
    "is_extended_resource",
    "is_native_container_resource",
    "pod_resources",
]

IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"  # ResourceDeviceClassPrefix (DRAExtendedResource)
NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods", "storage"})
NATIVE_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")  # what a container may request, plus hugepages-*
_HUGEPAGES = re.compile(r"hugepages-[0-9]+(?:[KMGTPE]i|[kMGTPE])?")
_POD_LEVEL = frozenset({"cpu", "memory"})  # plus hugepages-*


def is_extended_resource(name: Any) -> bool:
    """`v1helper.IsExtendedResourceName`: a name with a domain that is not `kubernetes.io` (nor a quota `requests.`
    key), or a DeviceClass's implicit `deviceclass.resource.kubernetes.io/<class>` name."""
    if not isinstance(name, str):
        return False
    if name.startswith(IMPLICIT_EXTENDED_PREFIX):
        return len(name) > len(IMPLICIT_EXTENDED_PREFIX)
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def is_native_container_resource(name: str) -> bool:
    """cpu, memory, ephemeral-storage and `hugepages-<size>`: the resources a container may name without a domain."""
    return name in NATIVE_CONTAINER_RESOURCES or bool(_HUGEPAGES.fullmatch(name))


def _pod_level(name: str) -> bool:
    return name in _POD_LEVEL or name.startswith("hugepages-")


class RequestProblem(NamedTuple):
    resource: str
    message: str


@dataclass(frozen=True, slots=True)
class PodResources:
    """Exact effective requests and limits of one pod (zero amounts dropped) and the problems found, in spec order."""

    requests: Mapping[str, Fraction] = field(default_factory=dict)
    limits: Mapping[str, Fraction] = field(default_factory=dict)
    problems: tuple[RequestProblem, ...] = ()

    @property
    def messages(self) -> list[str]:
        return [problem.message for problem in self.problems]

    @property
    def extended_messages(self) -> list[str]:
        """The problems with extended resources only (what a device plugin or DRA would refuse)."""
        return [problem.message for problem in self.problems if is_extended_resource(problem.resource)]

    def scheduler_requests(self) -> dict[str, int]:
        """The NodeResourcesFit integers: cpu in millicores, everything else rounded up."""
        return {name: math.ceil(amount * 1000) if name == "cpu" else math.ceil(amount)
                for name, amount in self.requests.items()}

    def extended_requests(self) -> dict[str, int]:
        """Positive whole extended-resource requests (the units a device plugin or DRA serves)."""
        return {name: int(amount) for name, amount in self.requests.items()
                if is_extended_resource(name) and amount > 0 and amount.denominator == 1}


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else str(float(value)) if isinstance(value, float) else str(value)


def _amount(where: str, name: str, value: Any, problems: list[RequestProblem]) -> Fraction | None:
    try:
        amount = parse_quantity(value)
    except QuantityError:
        problems.append(RequestProblem(name, f"{where}: {name} is not a valid quantity, got {value!r}"))
        return None
    if amount < 0:
        problems.append(RequestProblem(name, f"{where}: {name} must not be negative, got {_shown(value)}"))
        return None
    if is_extended_resource(name) and amount.denominator != 1:
        problems.append(RequestProblem(name, f"{where}: {name} must be an integer, got {_shown(value)}"))
        return None
    return amount


def _container(where: str, container: Any, problems: list[RequestProblem]) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    resources = as_dict(as_dict(container).get("resources"))
    raw_requests, raw_limits = as_dict(resources.get("requests")), as_dict(resources.get("limits"))
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    for name in dict.fromkeys([*raw_requests, *raw_limits]):
        if not isinstance(name, str) or name == "pods":
            continue
        request = _amount(where, name, raw_requests[name], problems) if name in raw_requests else None
        limit = _amount(where, name, raw_limits[name], problems) if name in raw_limits else None
        if is_extended_resource(name):
            if name in raw_requests and name not in raw_limits:
                problems.append(RequestProblem(name, f"{where}: {name} in requests only, without a limit"))
            if request is not None and limit is not None and request != limit:
                problems.append(RequestProblem(name, f"{where}: {name} request {_shown(raw_requests[name])} != "
                                                     f"limit {_shown(raw_limits[name])}"))
        if limit is not None:
            limits[name] = limit
        if name in raw_requests:
            if request is not None:
                requests[name] = request
        elif limit is not None:
            requests[name] = limit  # API defaulting: the request is the limit
    return requests, limits


def _add(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, Fraction(0)) + amount


def _max(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, Fraction(0)):
            into[name] = amount


def _name(container: Any, index: int) -> str:
    return as_str(as_dict(container).get("name")) or f"#{index}"


def pod_resources(pod: Any) -> PodResources:
    """Effective requests and limits of a Pod (or of a pod template given as `{"spec": …}`)."""
    spec = as_dict(as_dict(pod).get("spec"))
    problems: list[RequestProblem] = []
    totals: tuple[dict[str, Fraction], dict[str, Fraction]] = ({}, {})
    for index, container in enumerate(as_list(spec.get("containers"))):
        for total, part in zip(totals, _container(f"container {_name(container, index)}", container, problems),
                               strict=True):
            _add(total, part)
    sidecars: tuple[dict[str, Fraction], dict[str, Fraction]] = ({}, {})
    peaks: tuple[dict[str, Fraction], dict[str, Fraction]] = ({}, {})
    for index, container in enumerate(as_list(spec.get("initContainers"))):
        parts = _container(f"init container {_name(container, index)}", container, problems)
        sidecar = as_dict(container).get("restartPolicy") == "Always"
        for which in (0, 1):
            if sidecar:
                _add(totals[which], parts[which])  # a sidecar keeps running beside the main containers
                _add(sidecars[which], parts[which])
                _max(peaks[which], sidecars[which])
            else:
                during = dict(sidecars[which])
                _add(during, parts[which])
                _max(peaks[which], during)
    for which in (0, 1):
        _max(totals[which], peaks[which])
    pod_level = as_dict(spec.get("resources"))
    if pod_level:
        level_requests, level_limits = _container("pod resources", {"resources": pod_level}, problems)
        for which, level in ((0, level_requests), (1, level_limits)):
            for name, amount in level.items():
                if _pod_level(name):
                    totals[which][name] = amount
    for name, value in as_dict(spec.get("overhead")).items():
        if not isinstance(name, str):
            continue
        overhead = _amount("overhead", name, value, problems)
        if overhead is not None:
            _add(totals[0], {name: overhead})
            if name in totals[1]:
                _add(totals[1], {name: overhead})
    return PodResources(
        requests={name: amount for name, amount in totals[0].items() if amount > 0},
        limits={name: amount for name, amount in totals[1].items() if amount > 0},
        problems=tuple(problems),
    )
