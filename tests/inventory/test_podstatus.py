"""Accelerator pods from raw Pod dicts: extended requests (Kubernetes rules), claims, and failure stage typing."""

from __future__ import annotations

from typing import Any

import pytest

from inventory.podstatus import (
    LAYER_APPLICATION,
    LAYER_NODE_SETUP,
    LAYER_SCHEDULER,
    PodStage,
    Stage,
    is_accelerator_pod,
    pod_claim_names,
    pod_claim_served_resources,
    pod_extended_requests,
    pod_request_problems,
    pod_stage,
)

GPU = "nvidia.com/gpu"


def container(
    name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "nvcr.io/nvidia/pytorch:25.01-py3", "resources": resources, **extra}


def pod(containers: list[Any] | None = None, init: list[Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": containers if containers is not None else [], **spec}
    if init is not None:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train", "namespace": "ml"}, "spec": body}


# --- extended requests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec_pod", "expected"),
    [
        pytest.param(
            pod([container("a", limits={GPU: "2", "cpu": "4", "memory": "16Gi"})]), {GPU: 2}, id="limits-only"
        ),
        pytest.param(pod([container("a", requests={GPU: 1}, limits={GPU: 1})]), {GPU: 1}, id="equal-int"),
        pytest.param(pod([container("a", limits={GPU: "1e3"})]), {GPU: 1000}, id="exponent"),
        pytest.param(
            pod([container("a", limits={GPU: "1"}), container("b", limits={GPU: "2", "nvidia.com/mig-1g.10gb": "1"})]),
            {GPU: 3, "nvidia.com/mig-1g.10gb": 1},
            id="sum-of-containers",
        ),
        pytest.param(
            pod([container("a", limits={GPU: "1"})], init=[container("warm", limits={GPU: "4"})]),
            {GPU: 4},
            id="init-max-wins",
        ),
        pytest.param(
            pod([container("a", limits={GPU: "3"})], init=[container("warm", limits={GPU: "2"})]),
            {GPU: 3},
            id="containers-win",
        ),
        pytest.param(
            pod(
                [container("a", limits={GPU: "1"})],
                init=[
                    container("proxy", limits={GPU: "1"}, restartPolicy="Always"),
                    container("warm", limits={GPU: "1"}),
                ],
            ),
            {GPU: 2},
            id="sidecar-adds-to-containers-and-later-init",
        ),
        pytest.param(
            pod(
                [container("a", limits={GPU: "1"})],
                init=[
                    container("warm", limits={GPU: "3"}),
                    container("proxy", limits={GPU: "1"}, restartPolicy="Always"),
                ],
            ),
            {GPU: 3},
            id="init-before-sidecar-not-added",
        ),
        pytest.param(
            pod(
                [container("a", limits={GPU: "1"})],
                init=[
                    container("proxy", limits={GPU: "2"}, restartPolicy="Always"),
                    container("warm", limits={GPU: "2"}),
                ],
            ),
            {GPU: 4},
            id="init-plus-earlier-sidecar",
        ),
        pytest.param(
            pod([container("a", limits={GPU: "1"})], overhead={"cpu": "250m", "example.com/vf": "1"}),
            {GPU: 1, "example.com/vf": 1},
            id="overhead",
        ),
        pytest.param(
            pod([container("a", limits={"hugepages-2Mi": "1Gi", "cpu": "1", "ephemeral-storage": "1Gi"})]),
            {},
            id="native-and-hugepages-ignored",
        ),
        pytest.param(pod([container("a", limits={GPU: "0"})]), {}, id="zero-dropped"),
        pytest.param(pod([container("a", limits={GPU: "0.5"})]), {}, id="fraction-skipped"),
        pytest.param(pod([container("a", limits={GPU: "lots"})]), {}, id="unparsable-skipped"),
        pytest.param(
            pod([container("a", requests={GPU: "1"}, limits={GPU: "2"})]), {GPU: 1}, id="mismatch-uses-request"
        ),
        pytest.param(pod([container("a", requests={GPU: "1"})]), {GPU: 1}, id="requests-only-counted"),
        pytest.param(
            pod([container("a", limits={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"})]),
            {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1},
            id="dra-implicit-extended-name",
        ),
    ],
)
def test_pod_extended_requests(spec_pod: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_extended_requests(spec_pod) == expected


MALFORMED: list[Any] = [
    None,
    [],
    "pod",
    42,
    {},
    {"spec": None},
    {"spec": []},
    {"spec": {"containers": None}},
    {"spec": {"containers": {"name": "a"}}},
    {"spec": {"containers": [None, 3, "x", []]}},
    {"spec": {"containers": [{"resources": None}]}},
    {"spec": {"containers": [{"resources": {"limits": ["nvidia.com/gpu"]}}]}},
    {"spec": {"containers": [{"resources": {"limits": {GPU: None}}}]}},
    {"spec": {"containers": [{"resources": {"limits": {GPU: True}}}]}},
    {"spec": {"containers": [{"resources": {"limits": {3: "1"}}}]}},
    {"spec": {"initContainers": "x", "overhead": [], "resourceClaims": {"a": 1}}},
    {"spec": {"resourceClaims": [None, "x", {"name": None}]}, "status": {"resourceClaimStatuses": "x"}},
    {"spec": {}, "status": {"extendedResourceClaimStatus": []}},
    {"metadata": [], "spec": {"nodeName": 5}, "status": {"phase": 3, "containerStatuses": {"a": 1}}},
    {"status": {"phase": "Running", "containerStatuses": [None, {"state": [], "lastState": "x", "restartCount": "3"}]}},
    {"status": {"phase": "Failed", "initContainerStatuses": [{"state": {"terminated": None}}], "conditions": None}},
    {"status": {"phase": "Pending", "conditions": [None, {"type": "PodScheduled", "status": "False", "reason": 3}]}},
]


@pytest.mark.parametrize("value", MALFORMED)
def test_malformed_input_never_raises(value: Any) -> None:
    assert isinstance(pod_extended_requests(value), dict)
    assert isinstance(pod_request_problems(value), list)
    assert isinstance(pod_claim_names(value), list)
    assert pod_claim_served_resources(value) == set()
    assert isinstance(is_accelerator_pod(value), bool)
    result = pod_stage(value)
    assert isinstance(result, PodStage)
    assert isinstance(result.stage, Stage)


@pytest.mark.parametrize(
    ("spec_pod", "expected"),
    [
        (pod([container("a", limits={GPU: "1"})]), []),
        (
            pod([container("a", requests={GPU: "1"}, limits={GPU: "2"})]),
            ["container a: nvidia.com/gpu request 1 != limit 2"],
        ),
        (pod([container("a", limits={GPU: "0.5"})]), ["container a: nvidia.com/gpu must be an integer, got 0.5"]),
        (pod([container("a", limits={GPU: 0.5})]), ["container a: nvidia.com/gpu must be an integer, got 0.5"]),
        (pod([container("a", limits={GPU: "500m"})]), ["container a: nvidia.com/gpu must be an integer, got 500m"]),
        (pod([container("a", requests={GPU: "1"})]), ["container a: nvidia.com/gpu in requests only, without a limit"]),
        (
            pod([container("a", limits={GPU: "many"})]),
            ["container a: nvidia.com/gpu is not a valid quantity, got 'many'"],
        ),
        (pod([container("a", limits={GPU: "-1"})]), ["container a: nvidia.com/gpu must not be negative, got -1"]),
        (
            pod([], init=[container("warm", requests={GPU: "2"}, limits={GPU: "1"})]),
            ["init container warm: nvidia.com/gpu request 2 != limit 1"],
        ),
        (pod([container("a", limits={"cpu": "0.5"})]), []),
        (
            pod([container("a", limits={GPU: "1"})], overhead={"example.com/vf": "0.5"}),
            ["overhead: example.com/vf must be an integer, got 0.5"],
        ),
        (
            pod([{"resources": {"limits": {GPU: "x"}}}]),
            ["container #0: nvidia.com/gpu is not a valid quantity, got 'x'"],
        ),
    ],
)
def test_pod_request_problems(spec_pod: dict[str, Any], expected: list[str]) -> None:
    assert pod_request_problems(spec_pod) == expected


# --- claims -----------------------------------------------------------------------------------------------------


def test_pod_claim_names_all_sources() -> None:
    value = pod(
        [container("a")],
        resourceClaims=[
            {"name": "shared", "resourceClaimName": "team-gpu"},
            {"name": "own", "resourceClaimTemplateName": "one-gpu"},
            {"name": "pending", "resourceClaimTemplateName": "one-gpu"},
            {"name": "dup", "resourceClaimName": "team-gpu"},
        ],
    )
    value["status"] = {
        "resourceClaimStatuses": [{"name": "own", "resourceClaimName": "train-own-x7k2p"}, {"name": "pending"}],
        "extendedResourceClaimStatus": {
            "resourceClaimName": "train-extended-resources-abcde",
            "requestMappings": [{"containerName": "a", "requestName": "container-0-request-0", "resourceName": GPU}],
        },
    }
    assert pod_claim_names(value) == ["team-gpu", "train-own-x7k2p", "train-extended-resources-abcde"]
    # The extended resource the generated claim serves: its units are the claim's devices, not a device plugin's.
    assert pod_claim_served_resources(value) == {GPU}
    value["status"]["extendedResourceClaimStatus"]["requestMappings"] += [None, {"resourceName": "cpu"}, {}]
    assert pod_claim_served_resources(value) == {GPU}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (pod([container("a", limits={GPU: "1"})]), True),
        (pod([container("a", limits={"cpu": "1", "memory": "1Gi"})]), False),
        (pod([container("a", limits={GPU: "0"})]), False),
        (pod([container("a")], resourceClaims=[{"name": "g", "resourceClaimTemplateName": "gpu"}]), True),
        (pod([container("a")], resourceClaims=[{"name": "g", "resourceClaimName": "gpu"}]), True),
        ({"spec": {"containers": [{}]}, "status": {"extendedResourceClaimStatus": {"resourceClaimName": "c"}}}, True),
        (pod([container("a")], resourceClaims=[{"name": "g"}]), False),
    ],
)
def test_is_accelerator_pod(value: dict[str, Any], expected: bool) -> None:
    assert is_accelerator_pod(value) is expected


# --- stage ------------------------------------------------------------------------------------------------------

UNSCHEDULABLE = (
    "0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint {dedicated: training}, "
    "2 node(s) didn't match Pod's node affinity/selector."
)


def status_pod(
    phase: str | None, *, node: str | None = "gpu-node-1", statuses: list[Any] | None = None, **status: Any
) -> dict[str, Any]:
    value = pod([container("main", limits={GPU: "1"})])
    if node:
        value["spec"]["nodeName"] = node
    body: dict[str, Any] = dict(status)
    if phase is not None:
        body["phase"] = phase
    if statuses is not None:
        body["containerStatuses"] = statuses
    value["status"] = body
    return value


def cstatus(
    name: str = "main", *, state: dict[str, Any], last: dict[str, Any] | None = None, restarts: int = 0
) -> dict[str, Any]:
    return {
        "name": name,
        "state": state,
        "lastState": last or {},
        "restartCount": restarts,
        "ready": "running" in state,
    }


RUNNING_STATE = {"running": {"startedAt": "2026-05-01T10:00:00Z"}}


def terminated(reason: str, code: int, started: str | None = "2026-05-01T10:00:00Z") -> dict[str, Any]:
    body: dict[str, Any] = {"reason": reason, "exitCode": code, "finishedAt": "2026-05-01T10:05:00Z"}
    if started is not None:
        body["startedAt"] = started
    return {"terminated": body}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message}}


STAGE_CASES = [
    pytest.param(
        status_pod(
            "Pending",
            node=None,
            conditions=[
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}
            ],
        ),
        PodStage(Stage.PENDING_UNSCHEDULED, LAYER_SCHEDULER, f"Unschedulable: {UNSCHEDULABLE}", 0, None, False),
        id="unschedulable",
    ),
    pytest.param(
        status_pod(
            "Pending", node=None, conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
        ),
        PodStage(Stage.PENDING_UNSCHEDULED, LAYER_SCHEDULER, "SchedulingGated", 0, None, False),
        id="scheduling-gated",
    ),
    pytest.param(
        status_pod("Pending", node=None),
        PodStage(Stage.PENDING_UNSCHEDULED, LAYER_SCHEDULER, "Pending", 0, None, False),
        id="pending-no-conditions",
    ),
    *[
        pytest.param(
            status_pod("Pending", statuses=[cstatus(state=waiting(reason, "details"))]),
            PodStage(Stage.BOUND_NOT_STARTED, LAYER_NODE_SETUP, reason, 0, None, False),
            id=f"bound-{reason}",
        )
        for reason in (
            "ContainerCreating",
            "PodInitializing",
            "ImagePullBackOff",
            "ErrImagePull",
            "CreateContainerConfigError",
            "CreateContainerError",
            "RunContainerError",
        )
    ],
    pytest.param(
        status_pod("Pending"),
        PodStage(Stage.BOUND_NOT_STARTED, LAYER_NODE_SETUP, "Pending", 0, None, False),
        id="bound-no-container-statuses",
    ),
    pytest.param(
        status_pod(
            "Pending",
            statuses=[cstatus(state=waiting("PodInitializing"))],
            initContainerStatuses=[cstatus("init", state=waiting("ContainerCreating"))],
        ),
        PodStage(Stage.BOUND_NOT_STARTED, LAYER_NODE_SETUP, "ContainerCreating", 0, None, False),
        id="bound-init-first",
    ),
    pytest.param(
        status_pod(
            "Pending",
            statuses=[cstatus(state=waiting("PodInitializing"))],
            initContainerStatuses=[
                cstatus("check-driver", state=waiting("CrashLoopBackOff"), last=terminated("Error", 1), restarts=3)
            ],
        ),
        PodStage(Stage.FAILED_AFTER_START, LAYER_APPLICATION, "CrashLoopBackOff (exit 1, 3 restarts)", 3, 1, False),
        id="init-crash-loop-ran",
    ),
    pytest.param(
        status_pod(
            "Running",
            statuses=[
                cstatus(
                    state=waiting("CrashLoopBackOff"),
                    last=terminated("StartError", 128, "1970-01-01T00:00:00Z"),
                    restarts=4,
                )
            ],
        ),
        PodStage(Stage.BOUND_NOT_STARTED, LAYER_NODE_SETUP, "CrashLoopBackOff", 4, None, False),
        id="cdi-start-error-loop-never-ran",
    ),
    pytest.param(
        status_pod("Running", statuses=[cstatus(state=RUNNING_STATE), cstatus("sidecar", state=RUNNING_STATE)]),
        PodStage(Stage.RUNNING, "", "Running", 0, None, False),
        id="running",
    ),
    pytest.param(
        status_pod(
            "Running", statuses=[cstatus(state=RUNNING_STATE), cstatus("sidecar", state=waiting("ImagePullBackOff"))]
        ),
        PodStage(Stage.BOUND_NOT_STARTED, LAYER_NODE_SETUP, "ImagePullBackOff", 0, None, False),
        id="running-with-container-not-started",
    ),
    pytest.param(
        status_pod(
            "Running", statuses=[cstatus(state=waiting("CrashLoopBackOff"), last=terminated("Error", 139), restarts=5)]
        ),
        PodStage(Stage.FAILED_AFTER_START, LAYER_APPLICATION, "CrashLoopBackOff (exit 139, 5 restarts)", 5, 139, False),
        id="crash-loop-segfault",
    ),
    pytest.param(
        status_pod(
            "Running",
            statuses=[cstatus(state=waiting("CrashLoopBackOff"), last=terminated("OOMKilled", 137), restarts=2)],
        ),
        PodStage(
            Stage.FAILED_AFTER_START,
            LAYER_APPLICATION,
            "CrashLoopBackOff (OOMKilled, exit 137, 2 restarts)",
            2,
            137,
            True,
        ),
        id="crash-loop-oom",
    ),
    pytest.param(
        status_pod("Running", statuses=[cstatus(state=RUNNING_STATE, last=terminated("OOMKilled", 137), restarts=1)]),
        PodStage(Stage.FAILED_AFTER_START, LAYER_APPLICATION, "OOMKilled (exit 137, 1 restart)", 1, 137, True),
        id="running-again-after-oom",
    ),
    pytest.param(
        status_pod(
            "Running",
            statuses=[cstatus(state=RUNNING_STATE), cstatus("exporter", state=terminated("Error", 2), restarts=0)],
        ),
        PodStage(Stage.FAILED_AFTER_START, LAYER_APPLICATION, "Error (exit 2)", 0, 2, False),
        id="running-one-container-exited-nonzero",
    ),
    pytest.param(
        status_pod(
            "Running", statuses=[cstatus(state=RUNNING_STATE), cstatus("setup", state=terminated("Completed", 0))]
        ),
        PodStage(Stage.RUNNING, "", "Running", 0, None, False),
        id="running-one-container-completed",
    ),
    pytest.param(
        status_pod("Succeeded", statuses=[cstatus(state=terminated("Completed", 0))]),
        PodStage(Stage.SUCCEEDED, "", "Succeeded", 0, None, False),
        id="succeeded",
    ),
    pytest.param(
        status_pod("Failed", statuses=[cstatus(state=terminated("Error", 1))]),
        PodStage(Stage.FAILED_AFTER_START, LAYER_APPLICATION, "Error (exit 1)", 0, 1, False),
        id="failed-error",
    ),
    pytest.param(
        status_pod("Failed", statuses=[cstatus(state=terminated("OOMKilled", 137, started=None))]),
        PodStage(Stage.FAILED_AFTER_START, LAYER_APPLICATION, "OOMKilled (exit 137)", 0, 137, True),
        id="failed-oom-without-startedAt",
    ),
    pytest.param(
        status_pod(
            "Failed",
            reason="UnexpectedAdmissionError",
            message="Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected",
        ),
        PodStage(
            Stage.BOUND_NOT_STARTED,
            LAYER_NODE_SETUP,
            "UnexpectedAdmissionError: Allocate failed due to requested number of devices unavailable for nvidia.com/gpu. "
            "Requested: 1, Available: 0, which is unexpected",
            0,
            None,
            False,
        ),
        id="admission-allocate-failure",
    ),
    pytest.param(
        status_pod("Failed", reason="OutOfnvidia.com/gpu", message="Node didn't have enough resource: nvidia.com/gpu"),
        PodStage(
            Stage.BOUND_NOT_STARTED,
            LAYER_NODE_SETUP,
            "OutOfnvidia.com/gpu: Node didn't have enough resource: nvidia.com/gpu",
            0,
            None,
            False,
        ),
        id="admission-out-of-gpu",
    ),
    pytest.param(
        status_pod("Failed", statuses=[cstatus(state=terminated("StartError", 128, "1970-01-01T00:00:00Z"))]),
        PodStage(Stage.BOUND_NOT_STARTED, LAYER_NODE_SETUP, "StartError", 0, None, False),
        id="failed-cdi-start-error",
    ),
    pytest.param(
        status_pod("Failed", reason="Evicted", message="The node was low on resource: memory."),
        PodStage(
            Stage.BOUND_NOT_STARTED, LAYER_NODE_SETUP, "Evicted: The node was low on resource: memory.", 0, None, False
        ),
        id="failed-evicted-before-start",
    ),
    pytest.param(
        status_pod("Failed", node=None, reason="NodeAffinity"),
        PodStage(Stage.PENDING_UNSCHEDULED, LAYER_SCHEDULER, "NodeAffinity", 0, None, False),
        id="failed-never-bound",
    ),
    pytest.param(
        {
            **status_pod("Running", statuses=[cstatus(state=RUNNING_STATE)]),
            "metadata": {"name": "x", "deletionTimestamp": "2026-05-01T11:00:00Z"},
        },
        PodStage(Stage.TERMINATING, "", "Terminating", 0, None, False),
        id="terminating",
    ),
    pytest.param(
        status_pod("Unknown"),
        PodStage(Stage.UNKNOWN, "", "Unknown", 0, None, False),
        id="phase-unknown",
    ),
    pytest.param(status_pod(None), PodStage(Stage.UNKNOWN, "", "", 0, None, False), id="no-phase"),
    pytest.param({}, PodStage(Stage.UNKNOWN, "", "", 0, None, False), id="empty"),
    pytest.param(None, PodStage(Stage.UNKNOWN, "", "", 0, None, False), id="none"),
]


@pytest.mark.parametrize(("value", "expected"), STAGE_CASES)
def test_pod_stage(value: Any, expected: PodStage) -> None:
    assert pod_stage(value) == expected


def test_restarts_sum_over_all_containers() -> None:
    value = status_pod(
        "Running",
        statuses=[
            cstatus(state=RUNNING_STATE, last=terminated("Error", 1), restarts=2),
            cstatus("b", state=RUNNING_STATE, last=terminated("Error", 1), restarts=3),
        ],
        initContainerStatuses=[cstatus("proxy", state=RUNNING_STATE, last=terminated("Error", 1), restarts=1)],
    )
    result = pod_stage(value)
    assert result.stage is Stage.FAILED_AFTER_START
    assert result.restarts == 6


def test_stage_values() -> None:
    assert [s.value for s in Stage] == [
        "pending-unscheduled",
        "bound-not-started",
        "running",
        "failed-after-start",
        "succeeded",
        "terminating",
        "unknown",
    ]
