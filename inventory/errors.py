"""Errors of the inventory: talking to clusters, leases, the change feed. Their base, `PortalError`, is in core."""

from core.errors import PortalError, StateConflictError


class ClusterError(PortalError):
    """Talking to a cluster failed."""


class ClusterUnreachableError(ClusterError):
    """Transient: connection refused/reset, timeouts, 5xx, 429. Safe to retry (after `retry_after` if given)."""

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status


class ClusterRequestError(ClusterError):
    """Permanent: the cluster refused the request (4xx other than 410/429). Retrying will not help."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ResourceExpiredError(ClusterError):
    """HTTP 410 Gone: the resourceVersion or continue token was compacted; relist from scratch."""


class HistoryRewoundError(ResourceExpiredError):
    """The server's history is behind what we saved: it answered "Too large resource version" (504 Timeout, cause
    ResourceVersionTooLarge) or sent a resourceVersion lower than the one we watch from. Its etcd was restored or the
    cluster rebuilt behind the same endpoint: relist from scratch and record an incident."""


class ClusterConfigError(ClusterError):
    """The cluster's connection settings are unusable (bad kubeconfig, unknown context)."""


class LeaseLostError(StateConflictError):
    """This watcher no longer holds its lease (a successor has a higher fencing token); stop writing (409 in the API)."""


class ChangeFeedCursorError(PortalError):
    """A change-feed cursor that this portal did not issue (the API answers 400)."""


class ChangeFeedGoneError(PortalError):
    """The cursor points before the retained history: events it has not seen were pruned (the API answers 410)."""
