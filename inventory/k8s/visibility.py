"""Kueue's visibility API (`visibility.kueue.x-k8s.io`), read as plain data: which Workloads wait in a ClusterQueue,
in Kueue's own order.

An aggregated API served by Kueue's controller where its VisibilityOnDemand feature is on: GET
`/apis/visibility.kueue.x-k8s.io/<version>/clusterqueues/<name>/pendingworkloads?offset=&limit=` answers a
`PendingWorkloadsSummary` whose `items` are `PendingWorkload`s (metadata name/namespace, `priority`,
`localQueueName`, `positionInClusterQueue` and `positionInLocalQueue`, both counted from 0). Kueue returns at most
`limit` items (1000 by default) from `offset`. Pure: the client fetches, this module refuses what is not such an
answer, whole (a malformed answer changes nothing, inventory/services/queue_positions.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inventory.errors import ClusterError

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")  # best first: v1beta2 from Kueue 0.15, v1beta1 since 0.9 (0.6 as alpha)
PENDING_WORKLOADS = "clusterqueues/pendingworkloads"  # the subresource discovery must list
PAGE_LIMIT = 1000  # Kueue's default limit


class VisibilityAnswerError(ClusterError):
    """The visibility API answered something that is not a PendingWorkloadsSummary (or not a consistent one): refused
    whole, never retried as if the cluster were unreachable."""


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    """One Workload waiting in a ClusterQueue, where Kueue says it stands (positions from 0, as Kueue counts)."""

    namespace: str
    name: str
    local_queue: str
    priority: int
    position_in_cluster_queue: int
    position_in_local_queue: int


@dataclass(frozen=True, slots=True)
class PendingQueue:
    """A ClusterQueue's pending Workloads in Kueue's order; `complete` is False when only the head was read."""

    items: tuple[PendingWorkload, ...]
    complete: bool = True


def _int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise VisibilityAnswerError(f"{where}: not a non-negative integer: {value!r:.40}")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 253:
        raise VisibilityAnswerError(f"{where}: not a name: {value!r:.40}")
    return value


def _item(item: Any, where: str) -> PendingWorkload:
    if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
        raise VisibilityAnswerError(f"{where}: not a PendingWorkload")
    meta = item["metadata"]
    priority = item.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise VisibilityAnswerError(f"{where}.priority: not an integer: {priority!r:.40}")
    return PendingWorkload(
        namespace=_name(meta.get("namespace"), f"{where}.metadata.namespace"),
        name=_name(meta.get("name"), f"{where}.metadata.name"),
        local_queue=_name(item.get("localQueueName"), f"{where}.localQueueName"),
        priority=priority,
        position_in_cluster_queue=_int(item.get("positionInClusterQueue"), f"{where}.positionInClusterQueue"),
        position_in_local_queue=_int(item.get("positionInLocalQueue"), f"{where}.positionInLocalQueue"),
    )


def pending_workloads_parse(doc: Any, *, offset: int = 0) -> list[PendingWorkload]:
    """The items of one page (requested from `offset`), or VisibilityAnswerError: not a summary, an item without a
    name or with a negative position, a Workload twice, or ClusterQueue positions below `offset` or not increasing
    (Kueue numbers the page it sends offset, offset+1, ...; gaps are tolerated, disorder is not)."""
    if not isinstance(doc, dict):
        raise VisibilityAnswerError("the answer is not an object")
    if doc.get("kind") not in (None, "PendingWorkloadsSummary"):
        raise VisibilityAnswerError(f"kind is {doc.get('kind')!r:.60}, not PendingWorkloadsSummary")
    items = doc.get("items")
    if items is None:
        items = []  # Go's omitted empty list
    if not isinstance(items, list):
        raise VisibilityAnswerError("items is not a list")
    out = [_item(item, f"items[{i}]") for i, item in enumerate(items)]
    seen: set[tuple[str, str]] = set()
    previous = offset - 1
    for i, workload in enumerate(out):
        if workload.position_in_cluster_queue <= previous:
            raise VisibilityAnswerError(f"items[{i}].positionInClusterQueue is {workload.position_in_cluster_queue}, "
                                        f"expected more than {previous}")
        previous = workload.position_in_cluster_queue
        if (workload.namespace, workload.name) in seen:
            raise VisibilityAnswerError(f"items[{i}]: {workload.namespace}/{workload.name} appears twice")
        seen.add((workload.namespace, workload.name))
    return out
