"""Parser for kube-scheduler FailedScheduling / PodScheduled=False messages: real formats, edge cases, garbage."""

from __future__ import annotations

from typing import Any

import pytest

from inventory.scheduling import (
    CATEGORIES,
    MAX_MESSAGE_LENGTH,
    Reason,
    SchedulingFailure,
    categorize_reason,
    parse_scheduling_message,
    summarize,
)

AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REAL_EXTENDED = (
    "0/5 nodes are available: 1 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector. "
    "no new claims to deallocate, preemption: 0/5 nodes are available: 1 No preemption victims found for incoming pod, "
    "4 Preemption is not helpful for scheduling."
)


def histogram(failure: SchedulingFailure) -> list[tuple[int, str, str, str, str]]:
    return [(r.count, r.reason, r.category, r.resource, r.taint) for r in failure.reasons]


@pytest.mark.parametrize(
    ("message", "total", "expected"),
    [
        pytest.param(
            "0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
            "{dedicated: training}, 2 node(s) didn't match Pod's node affinity/selector.",
            6,
            [
                (2, "Insufficient nvidia.com/gpu", "insufficient-resource", "nvidia.com/gpu", ""),
                (
                    2,
                    "node(s) had untolerated taint {dedicated: training}",
                    "untolerated-taint",
                    "",
                    "dedicated: training",
                ),
                (2, AFFINITY, "node-affinity", "", ""),
            ],
            id="design-example",
        ),
        pytest.param(
            "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient nvidia.com/mig-1g.10gb.",
            3,
            [
                (1, "node(s) had untolerated taint(s)", "untolerated-taint", "", ""),
                (2, "Insufficient nvidia.com/mig-1g.10gb", "insufficient-resource", "nvidia.com/mig-1g.10gb", ""),
            ],
            id="new-taint-form-and-mig-resource-with-period",
        ),
        pytest.param(
            "0/4 nodes are available: 4 node(s) had taints that the pod didn't tolerate.",
            4,
            [(4, "node(s) had taints that the pod didn't tolerate", "untolerated-taint", "", "")],
            id="ancient-taint-form",
        ),
        pytest.param(
            "0/2 nodes are available: 1 node(s) had taint {node.kubernetes.io/not-ready: }, that the pod didn't "
            "tolerate, 1 Insufficient cpu.",
            2,
            [
                (
                    1,
                    "node(s) had taint {node.kubernetes.io/not-ready: }, that the pod didn't tolerate",
                    "untolerated-taint",
                    "",
                    "node.kubernetes.io/not-ready:",
                ),
                (1, "Insufficient cpu", "insufficient-resource", "cpu", ""),
            ],
            id="pre-1.18-taint-form-with-inner-comma",
        ),
        pytest.param(
            "0/3 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
            "2 Insufficient memory.",
            3,
            [
                (
                    1,
                    "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }",
                    "untolerated-taint",
                    "",
                    "node-role.kubernetes.io/control-plane:",
                ),
                (2, "Insufficient memory", "insufficient-resource", "memory", ""),
            ],
            id="empty-taint-value",
        ),
        pytest.param(
            "0/2 nodes are available: 1 node(s) had untolerated taint {example.com/pool: a.b, c}, 1 Too many pods.",
            2,
            [
                (
                    1,
                    "node(s) had untolerated taint {example.com/pool: a.b, c}",
                    "untolerated-taint",
                    "",
                    "example.com/pool: a.b, c",
                ),
                (1, "Too many pods", "too-many-pods", "", ""),
            ],
            id="taint-value-with-comma-and-period",
        ),
        pytest.param(
            "0/12 nodes are available: 10 Insufficient nvidia.com/gpu, 2 node(s) were unschedulable.",
            12,
            [
                (10, "Insufficient nvidia.com/gpu", "insufficient-resource", "nvidia.com/gpu", ""),
                (2, "node(s) were unschedulable", "unschedulable", "", ""),
            ],
            id="lexicographic-order-kept",
        ),
        pytest.param(
            "0/3 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, "
            "2 node(s) had volume node affinity conflict.",
            3,
            [
                (1, "node(s) didn't match PersistentVolume's node affinity", "volume-affinity", "", ""),
                (2, "node(s) had volume node affinity conflict", "volume-affinity", "", ""),
            ],
            id="both-volume-forms",
        ),
        pytest.param(
            "0/4 nodes are available: 1 cannot allocate all claims, 1 resourceclaim in use, "
            "1 timed out trying to allocate devices, 1 cannot schedule extended resource claim.",
            4,
            [
                (1, "cannot allocate all claims", "dra", "", ""),
                (1, "resourceclaim in use", "dra", "", ""),
                (1, "timed out trying to allocate devices", "dra", "", ""),
                (1, "cannot schedule extended resource claim", "dra", "", ""),
            ],
            id="dra-reasons",
        ),
        pytest.param(
            '0/1 nodes are available: 1 waiting for dynamic resource controller to create the resourceclaim "gpu-x".',
            1,
            [
                (
                    1,
                    'waiting for dynamic resource controller to create the resourceclaim "gpu-x"',
                    "dra",
                    "",
                    "",
                )
            ],
            id="old-dra-waiting",
        ),
        pytest.param(
            "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules.",
            3,
            [(3, "node(s) didn't match pod anti-affinity rules", "other", "", "")],
            id="unknown-reason-is-other",
        ),
        pytest.param(
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu",
            3,
            [(3, "Insufficient nvidia.com/gpu", "insufficient-resource", "nvidia.com/gpu", "")],
            id="no-trailing-period",
        ),
        pytest.param(
            "  0/3 nodes are available: 3 Insufficient example.com/fpga.  \n",
            3,
            [(3, "Insufficient example.com/fpga", "insufficient-resource", "example.com/fpga", "")],
            id="surrounding-whitespace",
        ),
    ],
)
def test_histogram(message: str, total: int, expected: list[tuple[int, str, str, str, str]]) -> None:
    failure = parse_scheduling_message(message)
    assert failure.parsed
    assert failure.raw == message
    assert failure.total_nodes == total
    assert histogram(failure) == expected
    assert failure.prefilter_message == ""
    assert all(r.category in CATEGORIES for r in failure.reasons)


def test_real_extended_resource_example_with_dra_postfilter() -> None:
    failure = parse_scheduling_message(REAL_EXTENDED)
    assert failure.parsed
    assert failure.total_nodes == 5
    assert histogram(failure) == [
        (1, "Insufficient nvidia.com/gpu", "insufficient-resource", "nvidia.com/gpu", ""),
        (4, AFFINITY, "node-affinity", "", ""),
    ]
    assert failure.postfilter_prefix == "no new claims to deallocate"
    assert failure.preemption_total == 5
    assert failure.preemption_reasons == (
        Reason(1, "No preemption victims found for incoming pod", "preemption"),
        Reason(4, "Preemption is not helpful for scheduling", "preemption"),
    )


@pytest.mark.parametrize(
    "message",
    [
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
        "3 Preemption is not helpful for scheduling.",
        # Older builds end the preemption message with a double period.
        "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
        "3 Preemption is not helpful for scheduling..",
    ],
)
def test_preemption_tail_without_prefix(message: str) -> None:
    failure = parse_scheduling_message(message)
    assert histogram(failure) == [(3, "Insufficient cpu", "insufficient-resource", "cpu", "")]
    assert failure.postfilter_prefix == ""
    assert failure.preemption_total == 3
    assert failure.preemption_reasons == (Reason(3, "Preemption is not helpful for scheduling", "preemption"),)


def test_preemption_not_eligible_is_kept_verbatim() -> None:
    failure = parse_scheduling_message(
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: not eligible due to preemptionPolicy=Never.."
    )
    assert histogram(failure) == [(1, "Insufficient nvidia.com/gpu", "insufficient-resource", "nvidia.com/gpu", "")]
    assert failure.preemption_total is None
    assert failure.preemption_reasons == ()
    assert failure.postfilter_message == "preemption: not eligible due to preemptionPolicy=Never"


def test_unmarked_postfilter_message_is_split_from_last_entry() -> None:
    failure = parse_scheduling_message("0/2 nodes are available: 2 Insufficient cpu. some custom postfilter text.")
    assert histogram(failure) == [(2, "Insufficient cpu", "insufficient-resource", "cpu", "")]
    assert failure.postfilter_prefix == "some custom postfilter text"


@pytest.mark.parametrize(
    ("message", "prefilter", "preemption_total"),
    [
        (
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: "
            "0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
            "pod has unbound immediate PersistentVolumeClaims",
            3,
        ),
        (
            '0/4 nodes are available: resourceclaim "train-gpu" not found.',
            'resourceclaim "train-gpu" not found',
            None,
        ),
        (
            "0/4 nodes are available: cannot allocate all claims. no new claims to deallocate, preemption: "
            "0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
            "cannot allocate all claims",
            4,
        ),
    ],
)
def test_prefilter_message(message: str, prefilter: str, preemption_total: int | None) -> None:
    failure = parse_scheduling_message(message)
    assert failure.parsed
    assert failure.reasons == ()
    assert failure.prefilter_message == prefilter
    assert failure.preemption_total == preemption_total


@pytest.mark.parametrize(
    "message",
    [
        "",
        "   ",
        "garbage",
        "nodes are available",
        "Successfully assigned default/pod to node-1",
        "0/x nodes are available: 1 Insufficient cpu.",
        'running PreBind plugin "VolumeBinding": binding volumes: timed out waiting for the condition',
        "\x00\xff" * 100,
        "0/3 nodes are available",  # truncated before the colon
    ],
)
def test_not_a_scheduler_message(message: str) -> None:
    failure = parse_scheduling_message(message)
    assert not failure.parsed
    assert failure.raw == message
    assert failure.total_nodes is None
    assert failure.reasons == ()


@pytest.mark.parametrize("value", [None, 42, b"0/1 nodes are available: 1 Insufficient cpu.", ["x"], {"a": 1}])
def test_non_string_input_does_not_raise(value: Any) -> None:
    failure = parse_scheduling_message(value)
    assert not failure.parsed
    assert isinstance(failure.raw, str)


@pytest.mark.parametrize(
    "message",
    [
        "x" * 1_000_000,
        "0/3 nodes are available: " + "1 a, " * 200_000,
        "0/3 nodes are available: 1 node(s) had untolerated taint {" + "a: b, " * 170_000 + "}.",
        "0/3 nodes are available: " + "preemption: " * 90_000,
    ],
)
def test_megabyte_input_is_rejected(message: str) -> None:
    assert len(message) > MAX_MESSAGE_LENGTH
    failure = parse_scheduling_message(message)
    assert not failure.parsed
    assert failure.raw == message
    assert summarize(failure).endswith("…")


@pytest.mark.parametrize(
    "message",
    [
        "0/3 nodes are available: " + ", ".join(f"{i} reason number {i}" for i in range(1, 2000)) + ".",
        "0/3 nodes are available: " + "1 " * 20_000,
        "0/3 nodes are available: 1 x" + ", " * 20_000 + ".",
        "0/3 nodes are available: 1 a. " + "preemption: 0/3 nodes are available: " * 1000,
    ],
)
def test_large_adversarial_input_below_cap_is_handled(message: str) -> None:
    assert len(message) <= MAX_MESSAGE_LENGTH
    failure = parse_scheduling_message(message)
    assert failure.parsed
    assert failure.total_nodes == 3
    assert isinstance(summarize(failure), str)


def test_many_entries_keep_order() -> None:
    entries = [f"{i} Insufficient example.com/r{i}" for i in (10, 11, 2, 3)]
    failure = parse_scheduling_message("0/26 nodes are available: " + ", ".join(entries) + ".")
    assert [r.count for r in failure.reasons] == [10, 11, 2, 3]
    assert [r.resource for r in failure.reasons] == [
        "example.com/r10",
        "example.com/r11",
        "example.com/r2",
        "example.com/r3",
    ]


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("Insufficient nvidia.com/gpu", ("insufficient-resource", "nvidia.com/gpu", "")),
        (
            "Insufficient deviceclass.resource.kubernetes.io/gpu.nvidia.com",
            ("insufficient-resource", "deviceclass.resource.kubernetes.io/gpu.nvidia.com", ""),
        ),
        ("Too many pods", ("too-many-pods", "", "")),
        (
            "node(s) had untolerated taint {nvidia.com/gpu: present}",
            ("untolerated-taint", "", "nvidia.com/gpu: present"),
        ),
        ("node(s) had untolerated taint(s)", ("untolerated-taint", "", "")),
        ("node(s) didn't match node selector", ("node-affinity", "", "")),
        ("node(s) were unschedulable", ("unschedulable", "", "")),
        ("No preemption victims found for incoming pod", ("preemption", "", "")),
        ("something new", ("other", "", "")),
        ("", ("other", "", "")),
    ],
)
def test_categorize_reason(reason: str, expected: tuple[str, str, str]) -> None:
    assert categorize_reason(reason) == expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint "
            "{dedicated: training}, 2 node(s) didn't match Pod's node affinity/selector.",
            "2 nodes lack nvidia.com/gpu; 2 nodes have a taint the pod does not tolerate (dedicated: training); "
            "2 nodes do not match the pod's node selector/affinity",
        ),
        (
            REAL_EXTENDED,
            "1 node lacks nvidia.com/gpu; 4 nodes do not match the pod's node selector/affinity; "
            "preempting other pods would not help",
        ),
        (
            "0/3 nodes are available: 1 node(s) were unschedulable, 1 Too many pods, 1 node(s) had untolerated taint(s).",
            "1 node is cordoned (unschedulable); 1 node is at the pod limit; 1 node has a taint the pod does not tolerate",
        ),
        (
            "0/2 nodes are available: 2 cannot allocate all claims.",
            "2 nodes: dynamic resource allocation failed (cannot allocate all claims)",
        ),
        (
            "0/2 nodes are available: 2 node(s) had volume node affinity conflict.",
            "2 nodes do not match the volume's node affinity",
        ),
        (
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
            "blocked before node filtering: pod has unbound immediate PersistentVolumeClaims",
        ),
        ("0/0 nodes are available:", "no node out of 0 is available"),
        ("not a scheduler message", "not a scheduler message"),
        ("", "No scheduling information."),
    ],
)
def test_summarize(message: str, expected: str) -> None:
    assert summarize(parse_scheduling_message(message)) == expected


def test_summarize_mentions_helpful_preemption_reasons() -> None:
    failure = parse_scheduling_message(
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
        "2 Insufficient nvidia.com/gpu."
    )
    assert summarize(failure) == "2 nodes lack nvidia.com/gpu; preemption: 2 nodes: Insufficient nvidia.com/gpu"


@pytest.mark.parametrize(
    "value", [None, "text", 3, SchedulingFailure(raw="", total_nodes=None, reasons=(), parsed=False)]
)
def test_summarize_never_raises(value: Any) -> None:
    assert summarize(value)
