"""Accelerator pods from raw Kubernetes Pod dicts: effective extended requests, claims, and failure stage.

Failure typing follows DESIGN §2: Pending without nodeName → scheduler/quota/claims; bound but not started →
device plugin Allocate / runtime / CDI / image; ran then exited → driver/library/model/memory.
Pure Python, no Kubernetes client. Every public function accepts malformed input and never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from inventory.k8s.semantics import as_dict as _dict
from inventory.k8s.semantics import as_int as _int
from inventory.k8s.semantics import as_list as _list
from inventory.k8s.semantics import as_str as _str
from inventory.k8s.semantics import is_extended_resource, pod_resources

__all__ = [
    "LAYER_APPLICATION",
    "LAYER_NODE_SETUP",
    "LAYER_SCHEDULER",
    "PodStage",
    "Stage",
    "is_accelerator_pod",
    "pod_claim_names",
    "pod_claim_served_resources",
    "pod_extended_requests",
    "pod_rejected_at_admission",
    "pod_request_problems",
    "pod_stage",
]

LAYER_SCHEDULER = "scheduler/quota/claims"
LAYER_NODE_SETUP = "device-plugin/runtime/CDI/image"
LAYER_APPLICATION = "driver/library/model/memory"


def pod_extended_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Effective vendor extended-resource request of the pod (positive integers only); {} for malformed input."""
    return pod_resources(pod).extended_requests()


def pod_request_problems(pod: dict[str, Any]) -> list[str]:
    """Human-readable problems with the pod's extended-resource requests/limits, in spec order; [] if none."""
    return pod_resources(pod).extended_messages


def pod_claim_names(pod: dict[str, Any]) -> list[str]:
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


def pod_claim_served_resources(pod: dict[str, Any]) -> set[str]:
    """Extended resources of the pod that the scheduler satisfied with a DRA claim instead of a device plugin
    (DRAExtendedResource): the `resourceName`s of `status.extendedResourceClaimStatus.requestMappings`. Those units
    are the generated claim's devices; no device-plugin unit serves them. Empty for malformed input."""
    status = _dict(_dict(pod).get("status"))
    mappings = _list(_dict(status.get("extendedResourceClaimStatus")).get("requestMappings"))
    return {name for entry in mappings
            if isinstance(name := _dict(entry).get("resourceName"), str) and is_extended_resource(name)}


def pod_rejected_at_admission(pod: dict[str, Any]) -> bool:
    """True when the kubelet refused the pod after the scheduler bound it (phase Failed, reason
    UnexpectedAdmissionError, e.g. the device plugin's Allocate failed, or OutOf<resource>): no container was
    created and no device was assigned, so the pod never held its extended resources."""
    status = _dict(_dict(pod).get("status"))
    reason = _str(status.get("reason"))
    return _str(status.get("phase")) == "Failed" and (reason == "UnexpectedAdmissionError" or reason.startswith("OutOf"))


def is_accelerator_pod(pod: dict[str, Any]) -> bool:
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


def pod_stage(pod: dict[str, Any]) -> PodStage:
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
