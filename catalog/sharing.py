"""How many shared units one container may ask for: the NVIDIA device plugin's rule, written once for the generator
and the validator.

The device plugin's `Allocate` (NVIDIA/k8s-device-plugin, internal/rm/rm.go `ValidateRequest`) refuses a container's
request for more than one replica of a shared GPU:

- with MPS, always (the plugin ignores `failRequestsGreaterThanOne` for MPS);
- with time-slicing, only when its config sets `sharing.timeSlicing.failRequestsGreaterThanOne: true` (the default
  is false: two replicas are then granted, possibly of the same card, which is not twice a card).

The scheduler does not know: it binds the pod, and the kubelet then rejects it at admission (phase Failed, reason
`UnexpectedAdmissionError`, the plugin's error in the message). The limit is per container, because the kubelet
calls `Allocate` once per container.

How the portal knows the setting. Nothing on the node advertises it: GPU feature discovery labels the sharing strategy
(`nvidia.com/gpu.sharing-strategy`), the replica count and the renamed resource, but `failRequestsGreaterThanOne` lives
in the device plugin's config (a ConfigMap of the GPU operator, selected per node by `nvidia.com/device-plugin.config`)
that the portal does not read. So the catalog carries it: the curated offering of a time-sliced pool states whether
its pool fails such requests (`Offering.fail_requests_greater_than_one`). MPS needs no declaration: the node label
`nvidia.com/gpu.sharing-strategy=mps` is enough.
"""

from __future__ import annotations

from collections.abc import Mapping

SHARED_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")  # what the plugin replicates (renameByDefault: .shared)
ADMISSION_REASON = "UnexpectedAdmissionError"
TIME_SLICING, MPS = "time-slicing", "mps"


def refuses_more_than_one(unit_kind: str, fail_requests_greater_than_one: bool) -> bool:
    """Whether the device plugin refuses more than one unit per container for a pool selling this unit kind."""
    return unit_kind == MPS or (unit_kind == TIME_SLICING and fail_requests_greater_than_one)


def node_sharing(labels: Mapping[str, str], resource: str) -> str:
    """How the node's device plugin shares `resource` according to GPU feature discovery: "mps", "time-slicing" or
    "" (whole units). A renamed resource (`….shared`) is time-sliced even without the strategy label."""
    if resource not in SHARED_RESOURCES:
        return ""
    strategy = labels.get("nvidia.com/gpu.sharing-strategy", "")
    replicas = labels.get("nvidia.com/gpu.replicas", "1")
    if strategy in (MPS, TIME_SLICING) and replicas.isdigit() and int(replicas) > 1:
        return strategy
    return TIME_SLICING if resource.endswith(".shared") else ""


def plugin_error(resource: str, count: int) -> str:
    """The device plugin's Allocate error, verbatim (internal/plugin/server.go wraps rm.ValidateRequest's error)."""
    return (f'invalid allocation request for "{resource}": invalid request: maximum request size for shared '
            f"resources is 1; found {count}")


def admission_message(resource: str, count: int) -> str:
    """What the kubelet reports for the rejected pod (its Warning event; the pod's status message adds
    "Pod was rejected: " in front)."""
    return (f"Allocate failed due to rpc error: code = Unknown desc = {plugin_error(resource, count)}, which is "
            "unexpected")


def refused_message(resource: str, count: int) -> str:
    """Why a container asking for `count` > 1 of a pool that refuses it cannot run (generator and validator)."""
    return (f"the device plugin gives at most one {resource} per container on this pool, so the scheduler binds the "
            f"pod and the kubelet then rejects it ({ADMISSION_REASON}): {plugin_error(resource, count)}")


def not_additive_message(unit: str, count: int) -> str:
    """Why `count` > 1 time-slice replicas are not worth asking for even where the pool grants them."""
    return (f"{count} {unit}s are not {count} cards: a replica is a scheduling ticket, not a fraction of memory or "
            "compute, and two of them may even be the same card")
