"""Accelerator pods from raw Kubernetes Pod dicts: effective extended requests, claims, and failure stage.

Failure typing follows DESIGN §2: Pending without nodeName → scheduler/quota/claims; bound but not started →
device plugin Allocate / runtime / CDI / image; ran then exited → driver/library/model/memory.
Pure Python, no Kubernetes client. Every public function accepts malformed input and never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction
from typing import Any

__all__ = [
    "LAYER_APPLICATION",
    "LAYER_NODE_SETUP",
    "LAYER_SCHEDULER",
    "NATIVE",
    "PodStage",
    "Stage",
    "is_accelerator_pod",
    "is_extended_resource_name",
    "parse_quantity",
    "pod_claim_names",
    "pod_claim_served_resources",
    "pod_extended_requests",
    "pod_rejected_at_admission",
    "pod_request_problems",
    "pod_stage",
]

NATIVE = {"cpu", "memory", "ephemeral-storage", "pods", "storage"}  # plus hugepages-*

LAYER_SCHEDULER = "scheduler/quota/claims"
LAYER_NODE_SETUP = "device-plugin/runtime/CDI/image"
LAYER_APPLICATION = "driver/library/model/memory"

_QUANTITY = re.compile(r"([+-]?)(\d{1,40}(?:\.\d{0,40})?|\.\d{1,40})(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d{1,3}|[mkMGTPE]?)")
_DECIMAL_SUFFIX = {"": 0, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_EXPONENT = 30


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_quantity(value: Any) -> Fraction | None:
    """Exact value of a Kubernetes quantity (int, integral float or string like "2", "1e3", "500m", "1Ki"); None if unparsable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value) if value == value and value not in (float("inf"), float("-inf")) else None
    if not isinstance(value, str):
        return None
    match = _QUANTITY.fullmatch(value.strip())
    if match is None:
        return None
    sign, number, suffix = match.groups()
    amount = Fraction(number)
    if suffix in _BINARY_SUFFIX:
        amount *= 2 ** _BINARY_SUFFIX[suffix]
    else:
        exponent = int(suffix[1:]) if len(suffix) > 1 else _DECIMAL_SUFFIX[suffix]
        if abs(exponent) > _MAX_EXPONENT:
            return None
        amount *= Fraction(10) ** exponent
    return -amount if sign == "-" else amount


def is_extended_resource_name(name: Any) -> bool:
    """True for vendor resource names (containing "/"), never for native names or hugepages-*."""
    return isinstance(name, str) and "/" in name and not name.startswith("hugepages-") and name not in NATIVE


def _integer_or_problem(where: str, name: str, value: Any) -> tuple[int | None, str]:
    """Parse an extended-resource amount: (value, "") when a non-negative integer, else (None, problem)."""
    amount = parse_quantity(value)
    if amount is None:
        return None, f"{where}: {name} is not a valid quantity, got {value!r}"
    if amount.denominator != 1:
        shown = value if isinstance(value, str) else str(float(amount))
        return None, f"{where}: {name} must be an integer, got {shown}"
    if amount < 0:
        return None, f"{where}: {name} must not be negative, got {value}"
    return int(amount), ""


def _container_requests(where: str, container: Any) -> tuple[dict[str, int], list[str]]:
    """Extended requests of one container (requests default to limits) and the problems found."""
    resources = _dict(_dict(container).get("resources"))
    requests, limits = _dict(resources.get("requests")), _dict(resources.get("limits"))
    result: dict[str, int] = {}
    problems: list[str] = []
    names = [n for n in (*requests, *limits) if is_extended_resource_name(n)]
    for name in dict.fromkeys(names):
        request = limit = None
        if name in requests:
            request, problem = _integer_or_problem(where, name, requests[name])
            if problem:
                problems.append(problem)
        if name in limits:
            limit, problem = _integer_or_problem(where, name, limits[name])
            if problem:
                problems.append(problem)
        if name in requests and name not in limits:
            problems.append(f"{where}: {name} in requests only, without a limit")
        if request is not None and limit is not None and request != limit:
            problems.append(f"{where}: {name} request {request} != limit {limit}")
        effective = request if name in requests else limit
        if effective is not None:
            result[name] = effective
    return result, problems


def _add(into: dict[str, int], other: dict[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: dict[str, int]) -> None:
    for name, amount in other.items():
        into[name] = max(into.get(name, 0), amount)


def _container_name(container: Any, index: int) -> str:
    return _str(_dict(container).get("name")) or f"#{index}"


def _effective(pod: Any) -> tuple[dict[str, int], list[str]]:
    """Kubernetes' pod request rule (component-helpers resource.PodRequests) restricted to extended resources."""
    spec = _dict(_dict(pod).get("spec"))
    total: dict[str, int] = {}
    problems: list[str] = []
    for index, container in enumerate(_list(spec.get("containers"))):
        requests, found = _container_requests(f"container {_container_name(container, index)}", container)
        _add(total, requests)
        problems.extend(found)
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for index, container in enumerate(_list(spec.get("initContainers"))):
        requests, found = _container_requests(f"init container {_container_name(container, index)}", container)
        problems.extend(found)
        if _dict(container).get("restartPolicy") == "Always":
            # A sidecar keeps running: it adds to the main containers and to every later init container.
            _add(total, requests)
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            during = dict(sidecars)
            _add(during, requests)
            _max(init_peak, during)
    _max(total, init_peak)
    for name, value in _dict(spec.get("overhead")).items():
        if is_extended_resource_name(name):
            amount, problem = _integer_or_problem("overhead", name, value)
            if problem:
                problems.append(problem)
            elif amount is not None:
                total[name] = total.get(name, 0) + amount
    return {name: amount for name, amount in total.items() if amount > 0}, problems


def pod_extended_requests(pod: dict) -> dict[str, int]:
    """Effective vendor extended-resource request of the pod (positive integers only); {} for malformed input."""
    return _effective(pod)[0]


def pod_request_problems(pod: dict) -> list[str]:
    """Human-readable problems with the pod's extended-resource requests/limits, in spec order; [] if none."""
    return _effective(pod)[1]


def pod_claim_names(pod: dict) -> list[str]:
    """Names of ResourceClaims the pod uses (direct, generated from templates, extended-resource claim); unique, in order."""
    spec = _dict(_dict(pod).get("spec"))
    status = _dict(_dict(pod).get("status"))
    generated: dict[str, str] = {}
    for entry in _list(status.get("resourceClaimStatuses")):
        entry = _dict(entry)
        if _str(entry.get("name")) and _str(entry.get("resourceClaimName")):
            generated[entry["name"]] = entry["resourceClaimName"]
    names: list[str] = []
    for entry in _list(spec.get("resourceClaims")):
        entry = _dict(entry)
        if _str(entry.get("resourceClaimName")):
            names.append(entry["resourceClaimName"])
        elif _str(entry.get("resourceClaimTemplateName")) and _str(entry.get("name")) in generated:
            names.append(generated[entry["name"]])
    extended = _str(_dict(status.get("extendedResourceClaimStatus")).get("resourceClaimName"))
    if extended:
        names.append(extended)
    return list(dict.fromkeys(names))


def pod_claim_served_resources(pod: dict) -> set[str]:
    """Extended resources of the pod that the scheduler satisfied with a DRA claim instead of a device plugin
    (DRAExtendedResource): the `resourceName`s of `status.extendedResourceClaimStatus.requestMappings`. Those units
    are the generated claim's devices; no device-plugin unit serves them. Empty for malformed input."""
    status = _dict(_dict(pod).get("status"))
    mappings = _list(_dict(status.get("extendedResourceClaimStatus")).get("requestMappings"))
    return {name for entry in mappings if is_extended_resource_name(name := _dict(entry).get("resourceName"))}


def pod_rejected_at_admission(pod: dict) -> bool:
    """True when the kubelet refused the pod after the scheduler bound it (phase Failed, reason
    UnexpectedAdmissionError, e.g. the device plugin's Allocate failed, or OutOf<resource>): no container was
    created and no device was assigned, so the pod never held its extended resources."""
    status = _dict(_dict(pod).get("status"))
    reason = _str(status.get("reason"))
    return _str(status.get("phase")) == "Failed" and (reason == "UnexpectedAdmissionError" or reason.startswith("OutOf"))


def is_accelerator_pod(pod: dict) -> bool:
    """True if the pod requests any vendor extended resource or uses (or will use) any ResourceClaim."""
    if pod_extended_requests(pod) or pod_claim_names(pod):
        return True
    claims = _list(_dict(_dict(pod).get("spec")).get("resourceClaims"))
    return any(
        _str(_dict(c).get("resourceClaimName")) or _str(_dict(c).get("resourceClaimTemplateName")) for c in claims
    )


class Stage(StrEnum):
    PENDING_UNSCHEDULED = "pending-unscheduled"
    BOUND_NOT_STARTED = "bound-not-started"
    RUNNING = "running"
    FAILED_AFTER_START = "failed-after-start"
    SUCCEEDED = "succeeded"
    TERMINATING = "terminating"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class PodStage:
    """Where a pod is in its life and which layer a problem implicates ("" when none is implicated)."""

    stage: Stage
    layer: str
    detail: str
    restarts: int
    exit_code: int | None
    oom_killed: bool


# Terminations that mean the process never started (runtime / CDI / device injection failures).
_NOT_STARTED_REASONS = frozenset(
    {"StartError", "ContainerCannotRun", "CreateContainerError", "CreateContainerConfigError", "RunContainerError"}
)
_RAN_REASONS = frozenset({"Error", "OOMKilled", "Completed"})


@dataclass(frozen=True, slots=True)
class _Container:
    """Normalised view of one container status."""

    name: str
    restarts: int
    running: bool
    waiting: str
    terminated: dict[str, Any]
    last_terminated: dict[str, Any]

    @property
    def ran(self) -> bool:
        if _terminated_ran(self.terminated) or _terminated_ran(self.last_terminated):
            return True
        start_failure = _str(self.terminated.get("reason")) in _NOT_STARTED_REASONS or (
            _str(self.last_terminated.get("reason")) in _NOT_STARTED_REASONS
        )
        return self.restarts > 0 and not start_failure

    @property
    def failing(self) -> bool:
        """Ran and then failed: crash loop, a restart after termination, or a non-zero/OOM exit."""
        if not self.ran:
            return False
        if self.waiting == "CrashLoopBackOff" or (self.restarts > 0 and self.last_terminated):
            return True
        if self.terminated:
            return _int(self.terminated.get("exitCode")) != 0 or self.terminated.get("reason") == "OOMKilled"
        return self.restarts > 0 and not self.running

    @property
    def latest_termination(self) -> dict[str, Any]:
        return self.terminated or self.last_terminated

    @property
    def oom_killed(self) -> bool:
        return "OOMKilled" in (self.terminated.get("reason"), self.last_terminated.get("reason"))


def _terminated_ran(terminated: dict[str, Any]) -> bool:
    """True if a terminated state shows that the process actually started."""
    if not terminated or _str(terminated.get("reason")) in _NOT_STARTED_REASONS:
        return False
    started = _str(terminated.get("startedAt"))
    if started and not started.startswith("1970-01-01"):
        return True
    return _str(terminated.get("reason")) in _RAN_REASONS and _int(terminated.get("exitCode")) is not None


def _containers(status: dict[str, Any]) -> list[_Container]:
    """Init container statuses first, then app containers; malformed entries are skipped."""
    views: list[_Container] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for entry in _list(status.get(key)):
            if not isinstance(entry, dict):
                continue
            state, last = _dict(entry.get("state")), _dict(entry.get("lastState"))
            views.append(
                _Container(
                    name=_str(entry.get("name")),
                    restarts=max(_int(entry.get("restartCount")) or 0, 0),
                    running="running" in state and isinstance(state.get("running"), dict),
                    waiting=_str(_dict(state.get("waiting")).get("reason")),
                    terminated=_dict(state.get("terminated")),
                    last_terminated=_dict(last.get("terminated")),
                )
            )
    return views


def _failure_detail(container: _Container, restarts: int) -> str:
    """E.g. "CrashLoopBackOff (exit 139, 5 restarts)" or "OOMKilled (exit 137, 1 restart)"."""
    termination = container.latest_termination
    reason = _str(termination.get("reason"))
    base = container.waiting if container.waiting and not container.terminated else (reason or "Terminated")
    extras: list[str] = []
    if reason and reason != base and reason not in ("Error", "Completed"):
        extras.append(reason)
    exit_code = _int(termination.get("exitCode"))
    if exit_code is not None:
        extras.append(f"exit {exit_code}")
    if restarts:
        extras.append(f"{restarts} restart" + ("" if restarts == 1 else "s"))
    return f"{base} ({', '.join(extras)})" if extras else base


def _not_started_detail(views: list[_Container], fallback: str) -> str:
    """The first waiting reason or start failure among containers, else ``fallback``."""
    for view in views:
        if view.waiting:
            return view.waiting
        reason = _str(view.latest_termination.get("reason"))
        if reason in _NOT_STARTED_REASONS:
            return reason
    return fallback


def _scheduled_detail(status: dict[str, Any]) -> str:
    for condition in _list(status.get("conditions")):
        condition = _dict(condition)
        if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
            reason, message = _str(condition.get("reason")), _str(condition.get("message"))
            if reason and message:
                return f"{reason}: {message}"
            return reason or message or "Pending"
    return "Pending"


def pod_stage(pod: dict) -> PodStage:
    """Classify a pod's stage and implicated layer per DESIGN §2; malformed input gives Stage.UNKNOWN, never raises."""
    if not isinstance(pod, dict):
        return PodStage(Stage.UNKNOWN, "", "", 0, None, False)
    metadata, spec, status = _dict(pod.get("metadata")), _dict(pod.get("spec")), _dict(pod.get("status"))
    views = _containers(status)
    restarts = sum(view.restarts for view in views)
    oom = any(view.oom_killed for view in views)
    phase = _str(status.get("phase"))
    node = _str(spec.get("nodeName"))
    failing = next((view for view in views if view.failing), None)

    def failed_after_start(view: _Container) -> PodStage:
        exit_code = _int(view.latest_termination.get("exitCode"))
        return PodStage(
            Stage.FAILED_AFTER_START, LAYER_APPLICATION, _failure_detail(view, restarts), restarts, exit_code, oom
        )

    def not_started(detail: str) -> PodStage:
        return PodStage(Stage.BOUND_NOT_STARTED, LAYER_NODE_SETUP, detail, restarts, None, oom)

    if metadata.get("deletionTimestamp"):
        return PodStage(Stage.TERMINATING, "", "Terminating", restarts, None, oom)
    if phase == "Succeeded":
        return PodStage(Stage.SUCCEEDED, "", "Succeeded", restarts, None, oom)
    if phase == "Pending":
        if not node:
            return PodStage(Stage.PENDING_UNSCHEDULED, LAYER_SCHEDULER, _scheduled_detail(status), restarts, None, oom)
        if failing is not None:  # e.g. an init container in a crash loop
            return failed_after_start(failing)
        return not_started(_not_started_detail(views, "Pending"))
    if phase == "Running":
        if failing is not None:
            return failed_after_start(failing)
        if any(view.waiting for view in views):  # e.g. a second container still pulling its image
            return not_started(_not_started_detail(views, "NotStarted"))
        return PodStage(Stage.RUNNING, "", "Running", restarts, None, oom)
    if phase == "Failed":
        reason, message = _str(status.get("reason")), _str(status.get("message"))
        reason_detail = f"{reason}: {message}" if reason and message else (reason or message or "Failed")
        if pod_rejected_at_admission(pod):
            # Kubelet admission rejected the pod, e.g. the device plugin's Allocate call failed.
            return not_started(reason_detail)
        started = failing or next((view for view in views if view.ran), None)
        if started is not None:
            return failed_after_start(started)
        if node:
            return not_started(_not_started_detail(views, reason_detail))
        return PodStage(Stage.PENDING_UNSCHEDULED, LAYER_SCHEDULER, reason_detail, restarts, None, oom)
    return PodStage(Stage.UNKNOWN, "", phase or "", restarts, None, oom)
