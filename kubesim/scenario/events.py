"""Events: what the scheduler and the kubelet record about a pod."""

from __future__ import annotations

from .common import _digest, _ts, _uid


class EventsMixin:
    """Event objects (core/v1 shape) for pods."""

    def _event(
        self,
        ns: str,
        pod: str,
        pod_uid: str,
        created: float,
        etype: str,
        reason: str,
        message: str,
        count: int,
        component: str,
        action: str,
    ) -> None:
        name = f"{pod}.{_digest(self.seed, 'event', ns, pod, reason).hex()[:16]}"
        self.events.append(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": _uid(self.seed, "Event", ns, name),
                    "creationTimestamp": _ts(created + 1),
                },
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": pod, "uid": pod_uid},
                "reason": reason,
                "message": message,
                "type": etype,
                "count": count,
                "firstTimestamp": _ts(created + 1),
                "lastTimestamp": _ts(created + 1 + (count - 1) * 300),
                "source": {"component": component},
                "reportingComponent": component,
                "reportingInstance": f"{component}-control-plane-0",
                "action": action,
            }
        )
