"""Kueue's queue positions: read from its visibility API where the cluster serves it, kept on the mirrored Workloads.

Where discovery shows `visibility.kueue.x-k8s.io` serving `clusterqueues/pendingworkloads`, each live ClusterQueue's
pending Workloads are read in Kueue's order (inventory/k8s/visibility.py) and stored on the Workload rows
(`queue_position`, `queue_waiting`, `local_queue_position`, `position_cluster_queue`, `position_observed_at`); a
Workload that had a position in that ClusterQueue and is no longer listed loses it. The sync's upsert leaves these
columns alone (Workload.NOT_SYNCED_FIELDS).

- Runs under the lease of the cluster's `queuepositions` sync state (one reader per cluster; its fencing token
  guards every write, as for the watchers), and an observation never overwrites a newer one.
- A malformed answer is refused whole, with a logged warning: nothing of that ClusterQueue changes.
- An unreachable API (transport errors, 429, 5xx — an aggregated API whose backend is down answers 503) stops the
  round: the positions already stored stay, with the time they were observed, and the pages judge their freshness
  (inventory/selectors.py `position_is_fresh`).
- Network I/O happens between the transactions, never inside one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q
from django.utils import timezone

from inventory.errors import ClusterRequestError
from inventory.k8s.client import ClusterClient
from inventory.k8s.visibility import PendingQueue, VisibilityAnswerError
from inventory.leases import Lease
from inventory.models import ClusterQueue, SyncState, Workload
from inventory.services.discovery import discovery_current
from inventory.services.sync import fenced

logger = logging.getLogger(__name__)

# The sync state (lease, fencing token, last success and error, "not served" reason) of a cluster's position reads.
POSITIONS_KIND = "queuepositions"
_POSITION_FIELDS = ["queue_position", "queue_waiting", "local_queue_position", "position_cluster_queue",
                    "position_observed_at"]


@dataclass
class PositionsResult:
    """What one round of position reads did for a cluster."""

    served: bool
    reason: str = ""  # why positions cannot be read here (not served)
    version: str = ""
    queues: int = 0  # ClusterQueues whose answer was stored
    positioned: int = 0  # Workload rows given a position
    cleared: int = 0  # Workload rows that lost theirs (no longer pending in that ClusterQueue)
    refused: list[str] = field(default_factory=list)  # ClusterQueues whose answer was malformed or refused


def queue_positions_state(*, cluster_id: int) -> SyncState:
    state, _ = SyncState.objects.get_or_create(cluster_id=cluster_id, kind=POSITIONS_KIND)
    return state


def queue_positions_sync(*, cluster_id: int, client: ClusterClient, lease: Lease) -> PositionsResult:
    """One round for a cluster: every live ClusterQueue's pending Workloads from Kueue's visibility API, stored.
    Idempotent. Raises ClusterUnreachableError (the caller records it; stored positions stay) and LeaseLostError."""
    with lease.renewing():  # re-reading discovery may wait behind the cluster's change lock
        discovery = discovery_current(cluster_id=cluster_id, client=client)
    version = discovery.pending_workloads_version()
    if not version:
        result = PositionsResult(served=False, reason=discovery.pending_workloads_reason())
        SyncState.objects.filter(pk=lease.state_id).update(
            phase=SyncState.Phase.UNSERVED, served_version="", unavailable_reason=result.reason)
        return result
    result = PositionsResult(served=True, version=version)
    names = list(ClusterQueue.objects.live().filter(cluster_id=cluster_id).order_by("name")
                 .values_list("name", flat=True))
    for name in names:
        lease.keep()
        observed_at = timezone.now()  # before the request: an answer is at least this recent
        try:
            queue = client.pending_workloads(name, version=version)
        except VisibilityAnswerError as exc:
            logger.warning("queue positions: cluster %s: %s; answer refused, positions unchanged", cluster_id, exc)
            result.refused.append(name)
            continue
        except ClusterRequestError as exc:  # 404: a ClusterQueue Kueue does not know (yet); 403: no RBAC
            logger.warning("queue positions: cluster %s: %s; positions unchanged", cluster_id, exc)
            result.refused.append(name)
            continue
        positioned, cleared = workload_positions_record(cluster_id=cluster_id, cluster_queue=name, queue=queue,
                                                        observed_at=observed_at, lease=lease)
        result.queues += 1
        result.positioned += positioned
        result.cleared += cleared
    SyncState.objects.filter(pk=lease.state_id).update(
        phase=SyncState.Phase.IDLE, served_version=f"visibility.kueue.x-k8s.io/{version}", unavailable_reason="",
        last_success_at=timezone.now(),
        **({"last_error": "", "last_error_at": None} if not result.refused else {
            "last_error": f"answers refused for ClusterQueue {', '.join(result.refused)}"[:2000],
            "last_error_at": timezone.now()}),
    )
    return result


def workload_positions_record(*, cluster_id: int, cluster_queue: str, queue: PendingQueue, observed_at: datetime,
                              lease: Lease) -> tuple[int, int]:
    """Store one ClusterQueue's positions on the live Workloads it lists; those that had a position there and are not
    listed lose it. One fenced transaction; rows holding a newer observation are left alone. Returns (positioned,
    cleared)."""
    listed = {(item.namespace, item.name): item for item in queue.items}
    waiting = len(queue.items) if queue.complete else None
    with fenced(lease.state_id, lease.token):
        older = (Workload.objects.live().filter(cluster_id=cluster_id)
                 .filter(Q(position_observed_at__isnull=True) | Q(position_observed_at__lte=observed_at)))
        rows = list(older.filter(namespace__in={ns for ns, _ in listed}, name__in={n for _, n in listed})
                    .only("pk", "namespace", "name", *_POSITION_FIELDS))
        updated = []
        for row in rows:
            item = listed.get((row.namespace, row.name))
            if item is None:
                continue
            row.queue_position = item.position_in_cluster_queue + 1
            row.queue_waiting = waiting
            row.local_queue_position = item.position_in_local_queue + 1
            row.position_cluster_queue = cluster_queue
            row.position_observed_at = observed_at
            updated.append(row)
        Workload.objects.bulk_update(updated, _POSITION_FIELDS, batch_size=500)
        cleared = (older.filter(position_cluster_queue=cluster_queue).exclude(pk__in=[row.pk for row in updated])
                   .update(queue_position=None, queue_waiting=None, local_queue_position=None,
                           position_cluster_queue="", position_observed_at=observed_at))
    return len(updated), cleared
