"""A minimal Kueue admission model for the simulator (kubesim is standalone: its own small copy of the rules).

What it does, after every write to a Kueue object through the API (never at scenario load, whose statuses are
taken as written):
- a ClusterQueue's usage per (flavor, resource) is the sum of its admitted Workloads' `status.admission`
  resourceUsage;
- pending Workloads (no QuotaReserved=True) are tried in queue order (spec.priority, then age): per resource group of
  their ClusterQueue, the first flavor in order whose nominal quota still holds every resource the group covers
  (count x pod requests, summed over pod sets); when every group has one, the Workload is admitted
  (QuotaReserved and Admitted conditions, status.admission with the flavors and the usage);
- otherwise it stays pending with Kueue's kind of message ("couldn't assign flavors to pod set main: insufficient
  unused quota for nvidia.com/gpu in flavor h100, 4 more needed"); a resource no group covers is "unavailable in
  ClusterQueue";
- ClusterQueue and LocalQueue status (flavorsUsage, flavorsReservation, workload counts) follow.
Not modelled (said in docs/queues.md): borrowing and lending within a cohort, preemption, fair sharing, admission
checks, topology-aware scheduling, and starting the Job's pods.

The visibility API (`visibility.kueue.x-k8s.io`, `pending_workloads`) answers from the same model: a ClusterQueue's
pending Workloads are those without QuotaReserved=True (and not Finished) whose LocalQueue points at it, in the order
admission tries them — spec.priority (higher first), then creationTimestamp (older first), then namespace and name
(a tie-break Kueue leaves to its heap; the simulator makes it deterministic). Positions count from 0, as Kueue's do.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from .apis import KUEUE_GROUP
from .quota import pod_usage
from .scenario import ScenarioError, parse_quantity
from .store import Store

TIME = "2026-01-15T08:00:00Z"


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _q(value: Any) -> Fraction:
    try:
        return parse_quantity(value)
    except (ScenarioError, ValueError, ZeroDivisionError):
        return Fraction(0)


def _fmt(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def _reserved(workload: dict[str, Any]) -> bool:
    return any(_d(c).get("type") == "QuotaReserved" and _d(c).get("status") == "True"
               for c in _l(_d(workload.get("status")).get("conditions")))


def _finished(workload: dict[str, Any]) -> bool:
    return any(_d(c).get("type") == "Finished" and _d(c).get("status") == "True"
               for c in _l(_d(workload.get("status")).get("conditions")))


def queue_order(workload: dict[str, Any]) -> tuple[int, str, str, str]:
    """Where a pending Workload stands in its ClusterQueue: priority (higher first), then age, then namespace/name."""
    meta, spec = _d(workload.get("metadata")), _d(workload.get("spec"))
    priority = spec.get("priority")
    priority = priority if isinstance(priority, int) and not isinstance(priority, bool) else 0
    return (-priority, str(meta.get("creationTimestamp") or ""), str(meta.get("namespace") or ""),
            str(meta.get("name") or ""))


def _pod_set_requests(pod_set: dict[str, Any]) -> dict[str, Fraction]:
    usage = pod_usage(_d(_d(pod_set.get("template")).get("spec")))
    out = {name: amount for name, amount in usage.items() if name in ("cpu", "memory")}
    out.update({name.removeprefix("requests."): amount for name, amount in usage.items()
                if name.startswith("requests.") and name.removeprefix("requests.") not in ("cpu", "memory",
                                                                                         "ephemeral-storage")})
    return out


class KueueAdmission:
    def __init__(self, store: Store) -> None:
        self._store = store

    def written(self, group: str, subresource: str, dry_run: bool) -> None:
        if group == KUEUE_GROUP and not dry_run and subresource != "status":
            self.reconcile()

    def reconcile(self) -> None:
        store = self._store
        with store.lock:
            queues = {so.key[1]: so.copy() for so in store.sorted_objects("clusterqueues")}
            local = {so.key: str(_d(so.obj.get("spec")).get("clusterQueue") or "")
                     for so in store.sorted_objects("localqueues")}
            workloads = [so.copy() for so in store.sorted_objects("workloads")]
            used: dict[str, dict[tuple[str, str], Fraction]] = {name: {} for name in queues}
            for wl in workloads:
                admission = _d(_d(wl.get("status")).get("admission"))
                if not _reserved(wl) or admission.get("clusterQueue") not in used:
                    continue
                for assignment in _l(admission.get("podSetAssignments")):
                    flavors = _d(_d(assignment).get("flavors"))
                    for resource, amount in _d(_d(assignment).get("resourceUsage")).items():
                        key = (str(flavors.get(resource, "")), str(resource))
                        used[admission["clusterQueue"]][key] = used[admission["clusterQueue"]].get(key, 0) + _q(amount)
            pending = sorted((wl for wl in workloads if not _reserved(wl)), key=queue_order)
            for wl in pending:
                meta = _d(wl.get("metadata"))
                target = local.get((meta.get("namespace", ""), _d(wl.get("spec")).get("queueName")), "")
                if target not in queues:
                    continue
                self._try(wl, target, queues[target], used[target])
            self._write_queue_status(queues, local, workloads, used)

    def _try(self, wl: dict[str, Any], target: str, queue: dict[str, Any], used: dict[tuple[str, str], Fraction]) -> None:
        groups = _l(_d(queue.get("spec")).get("resourceGroups"))
        assignments = []
        for pod_set in _l(_d(wl.get("spec")).get("podSets")):
            pod_set = _d(pod_set)
            count: int = pod_set["count"] if isinstance(pod_set.get("count"), int) else 1
            demand = {r: a * count for r, a in _pod_set_requests(pod_set).items() if a > 0}
            flavors, message = self._assign(groups, demand, used)
            if message:
                self._pending(wl, f"couldn't assign flavors to pod set {pod_set.get('name', 'main')}: {message}")
                return
            assignments.append((pod_set, count, flavors, demand))
        for _pod_set, _count, flavors, demand in assignments:
            for resource, amount in demand.items():
                key = (flavors[resource], resource)
                used[key] = used.get(key, Fraction(0)) + amount
        status = _d(wl.get("status"))
        status["admission"] = {"clusterQueue": target, "podSetAssignments": [
            {"name": pod_set.get("name", "main"), "count": count, "flavors": flavors,
             "resourceUsage": {r: _fmt(a) for r, a in demand.items()}}
            for pod_set, count, flavors, demand in assignments]}
        status["conditions"] = [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
             "message": f"Quota reserved in ClusterQueue {target}", "lastTransitionTime": TIME},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted",
             "lastTransitionTime": TIME},
        ]
        wl["status"] = status
        self._store.update("workloads", wl, subresource="status", check_rv=False)

    @staticmethod
    def _assign(groups: list[Any], demand: dict[str, Fraction],
                used: dict[tuple[str, str], Fraction]) -> tuple[dict[str, str], str]:
        chosen: dict[str, str] = {}
        for resource in demand:
            if not any(resource in _l(_d(g).get("coveredResources")) for g in groups):
                return {}, f"resource {resource} unavailable in ClusterQueue"
        for group in groups:
            covered = [r for r in _l(_d(group).get("coveredResources")) if r in demand]
            if not covered:
                continue
            shortest = ""
            for flavor in _l(_d(group).get("flavors")):
                name = str(_d(flavor).get("name", ""))
                nominal = {str(_d(c).get("name")): _q(_d(c).get("nominalQuota")) for c in _l(_d(flavor).get("resources"))}
                gaps = [(r, demand[r] - (nominal.get(r, Fraction(0)) - used.get((name, r), Fraction(0))))
                        for r in covered]
                gaps = [(r, gap) for r, gap in gaps if gap > 0]
                if not gaps:
                    chosen.update(dict.fromkeys(covered, name))
                    break
                if not shortest:
                    r, gap = gaps[0]
                    shortest = f"insufficient unused quota for {r} in flavor {name}, {_fmt(gap)} more needed"
            else:
                return {}, shortest
        return chosen, ""

    def _pending(self, wl: dict[str, Any], message: str) -> None:
        status = _d(wl.get("status"))
        current = [c for c in _l(status.get("conditions")) if _d(c).get("type") == "QuotaReserved"]
        if current and _d(current[0]).get("message") == message:
            return
        status["conditions"] = [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": message,
                                 "lastTransitionTime": TIME}]
        wl["status"] = status
        self._store.update("workloads", wl, subresource="status", check_rv=False)

    def _write_queue_status(self, queues: dict[str, dict[str, Any]], local: dict[tuple[str, str], str],
                            workloads: list[dict[str, Any]], used: dict[str, dict[tuple[str, str], Fraction]]) -> None:
        counts: dict[str, list[int]] = {name: [0, 0] for name in queues}  # pending, admitted
        lq_counts: dict[tuple[str, str], list[int]] = {key: [0, 0] for key in local}
        for so in self._store.sorted_objects("workloads"):
            meta, spec = _d(so.obj.get("metadata")), _d(so.obj.get("spec"))
            key = (meta.get("namespace", ""), spec.get("queueName"))
            which = 1 if _reserved(so.obj) else 0
            if key in lq_counts:
                lq_counts[key][which] += 1
                if local[key] in counts:
                    counts[local[key]][which] += 1
        for name, queue in queues.items():
            by_flavor: dict[str, list[dict[str, str]]] = {}
            for (flavor, resource), amount in sorted(used[name].items()):
                by_flavor.setdefault(flavor, []).append({"name": resource, "total": _fmt(amount), "borrowed": "0"})
            flavors = [{"name": f, "resources": rs} for f, rs in by_flavor.items()]
            queue["status"] = {**_d(queue.get("status")), "flavorsUsage": flavors, "flavorsReservation": flavors,
                               "pendingWorkloads": counts[name][0], "reservingWorkloads": counts[name][1],
                               "admittedWorkloads": counts[name][1]}
            self._store.update("clusterqueues", queue, subresource="status", check_rv=False)
        for so in self._store.sorted_objects("localqueues"):
            pending, admitted = lq_counts.get(so.key, [0, 0])
            lq = so.copy()
            lq["status"] = {**_d(lq.get("status")), "pendingWorkloads": pending, "reservingWorkloads": admitted,
                            "admittedWorkloads": admitted}
            self._store.update("localqueues", lq, subresource="status", check_rv=False)

    # ------------------------------------------------------------------ visibility.kueue.x-k8s.io
    def pending_workloads(self, cluster_queue: str = "", *, local_queue: tuple[str, str] | None = None,
                          offset: int = 0, limit: int = 1000) -> list[dict[str, Any]] | None:
        """The PendingWorkload items of a ClusterQueue, or of one LocalQueue (namespace, name) (positions still counted
        over its ClusterQueue), in queue order, `offset`/`limit` applied as Kueue does; None when there is no such
        queue."""
        store = self._store
        with store.lock:
            local = {so.key: str(_d(so.obj.get("spec")).get("clusterQueue") or "")
                     for so in store.sorted_objects("localqueues")}
            if local_queue is not None:
                if local_queue not in local:
                    return None
                cluster_queue = local[local_queue]
            elif store.get_stored("clusterqueues", None, cluster_queue) is None:
                return None
            waiting = sorted((so.obj for so in store.sorted_objects("workloads")
                              if not _reserved(so.obj) and not _finished(so.obj)
                              and local.get((_d(so.obj.get("metadata")).get("namespace", ""),
                                             _d(so.obj.get("spec")).get("queueName"))) == cluster_queue),
                             key=queue_order)
        items: list[dict[str, Any]] = []
        in_local: dict[tuple[str, str], int] = {}
        for position, wl in enumerate(waiting):
            meta, spec = _d(wl.get("metadata")), _d(wl.get("spec"))
            key = (str(meta.get("namespace") or ""), str(spec.get("queueName") or ""))
            local_position = in_local.get(key, 0)
            in_local[key] = local_position + 1
            if local_queue is not None and key != local_queue:
                continue
            items.append({
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                             "creationTimestamp": meta.get("creationTimestamp"),
                             **({"ownerReferences": meta["ownerReferences"]} if meta.get("ownerReferences") else {})},
                "priority": -queue_order(wl)[0],
                "localQueueName": key[1],
                "positionInClusterQueue": position,
                "positionInLocalQueue": local_position,
            })
        return items[offset:offset + limit]
