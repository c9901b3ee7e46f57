"""The scheduler: the Filter phase (resources, selectors, taints, claims), placement and its FailedScheduling message."""

from __future__ import annotations

import math
from typing import Any

from .common import SHARED_REQUEST_ERROR, ScenarioError, _suffix, _uid
from .state import FINISHED_RUN, ClaimState, NodeState, _fits_history, _tolerates


class SchedulerMixin:
    """Place a pod on a node the way kube-scheduler's Filter phase would, or say why not."""

    @staticmethod
    def _node_split(node: NodeState, req: dict[str, int], extended: dict[str, str]) -> tuple[dict, dict]:
        """(what the node's device plugins must serve, what DRA serves): an extended resource that a DeviceClass
        maps goes to DRA on a node that does not advertise it (the scheduler's DynamicResources plugin), and stays
        with NodeResourcesFit on a node that does."""
        dra = {r: n for r, n in req.items() if r in extended and n and not node.alloc.get(r)}
        return {r: n for r, n in req.items() if r not in dra}, dra

    @staticmethod
    def _extended_requests(dra: dict[str, int], extended: dict[str, str]) -> list[dict]:
        """The generated claim's requests: one per container and resource, named like the scheduler names them."""
        return [
            {"name": f"container-0-request-{j}", "deviceClassName": extended[r], "count": n, "mode": "ExactCount",
             "admin": False, "match": {}, "selectors": [], "capacity": {}, "resource": r}
            for j, (r, n) in enumerate(sorted(dra.items()))
        ]

    @staticmethod
    def _admission_error(node: NodeState, plugin_req: dict[str, int]) -> str:
        """The kubelet's rejection when the device plugin's Allocate refuses the (only) container's request: more
        than one unit of a shared resource whose pool fails such requests. "" when the kubelet admits the pod."""
        for resource in sorted(node.single_unit):
            count = plugin_req.get(resource, 0)
            if count > 1:
                cause = SHARED_REQUEST_ERROR.format(resource=resource, count=count)
                return f"Allocate failed due to rpc error: code = Unknown desc = {cause}, which is unexpected"
        return ""

    def _extended_claim(
        self, claim: ClaimState, ns: str, pod_name: str, pod_uid: str, created: float, state: str, ctx: str
    ) -> dict[str, Any]:
        """Name the claim the scheduler generated for a placed pod and return the pod's extendedResourceClaimStatus.
        A finished pod's claim is gone (deleted with the pod's completion); only the status names it."""
        claim.name = f"{pod_name}-extended-resources-{_suffix(5, self.seed, 'extended', ns, pod_name)}"[:253]
        claim.namespace, claim.uid, claim.created = ns, _uid(self.seed, "ResourceClaim", ns, claim.name), created + 1
        claim.owner_pod = (pod_name, pod_uid)
        if state not in ("failed", "succeeded"):
            if (ns, claim.name) in self.claims:
                raise ScenarioError(f"{ctx}: generated claim name collision {ns}/{claim.name}")
            claim.reserved.append({"resource": "pods", "name": pod_name, "uid": pod_uid})
            self.claims[(ns, claim.name)] = claim
            self.claim_order.append(claim)
        return {
            "resourceClaimName": claim.name,
            "requestMappings": [
                {"containerName": "main", "requestName": r["name"], "resourceName": r["resource"]} for r in claim.requests
            ],
        }

    def _filter_reasons(
        self,
        node: NodeState,
        selector: dict,
        tolerations: list[dict],
        req: dict[str, int],
        claims: list[ClaimState],
        extended: dict[str, str] | None = None,
    ) -> list[str]:
        if node.unschedulable:
            return ["node(s) were unschedulable"]
        for t in node.taints:
            if t["effect"] in ("NoSchedule", "NoExecute") and not _tolerates(t, tolerations):
                if self.taint_style == "generic":
                    return ["node(s) had untolerated taint(s)"]
                return [f"node(s) had untolerated taint {{{t['key']}: {t.get('value', '')}}}"]
        for k, v in selector.items():
            if node.labels.get(k) != v:
                return ["node(s) didn't match Pod's node affinity/selector"]
        reasons = []
        req, dra = self._node_split(node, req, extended or {})
        if dra:
            claims = [*claims, ClaimState("", "", "", self._extended_requests(dra, extended or {}), [], 0, extended=True)]
        if node.pod_count + 1 > node.alloc["pods"]:
            reasons.append("Too many pods")
        for rname, amount in req.items():
            if amount and node.used.get(rname, 0) + amount > node.alloc.get(rname, 0):
                reasons.append(f"Insufficient {rname}")
        if reasons:
            return reasons
        if claims and self._try_allocate(node, claims) is None:
            return ["cannot allocate all claims"]
        return []

    def _place(
        self,
        pool: str | None,
        selector: dict,
        tolerations: list[dict],
        req: dict[str, int],
        claims: list[ClaimState],
        consume: bool,
        extended: dict[str, str] | None = None,
        created: float = 0.0,
    ) -> tuple[NodeState | None, ClaimState | None, str]:
        """(the node the scheduler binds the pod to, the claim it generated for DRA-backed extended resources, the
        kubelet's admission error or ""). A pod the kubelet rejects holds nothing: nothing is consumed.

        A finished pod (`consume` false) consumes nothing now, but it ran once: it goes only where its requests fitted
        beside the pods that ran there at the time, and a running pod only where it fits beside the finished pods
        that ran after its creation (so that the history the scenario tells never had more on a node than it has)."""
        extended = extended or {}
        fixed = {c.node for c in claims if c.results is not None}
        if len(fixed) > 1:
            return None, None, ""
        nodes = self.pool_nodes[pool] if pool else self.nodes
        if fixed:
            nodes = [self.nodes_by_name[fixed.pop()]]
        if not nodes:
            return None, None, ""
        key = pool or ""
        start = self.pool_cursor.get(key, 0) % len(nodes) if len(nodes) > 1 else 0
        for k in range(len(nodes)):
            node = nodes[(start + k) % len(nodes)]
            plugin_req, dra = self._node_split(node, req, extended)
            generated = ClaimState("", "", "", self._extended_requests(dra, extended), [], 0, extended=True) if dra \
                else None
            rejected = self._admission_error(node, plugin_req)
            if not consume:
                if not self._filter_reasons(node, selector, tolerations, {}, []) and (
                        rejected or _fits_history(node, created, created + FINISHED_RUN, plugin_req)):
                    if not rejected:
                        node.finished.append((created, created + FINISHED_RUN, plugin_req))
                    return node, generated if not rejected else None, rejected
                continue
            if self._filter_reasons(node, selector, tolerations, plugin_req, []):
                continue
            if not rejected and not _fits_history(node, created, math.inf, plugin_req):
                continue
            wanted = [*claims, *([generated] if generated else [])]
            picks = self._try_allocate(node, wanted) if wanted else []
            if picks is None:
                continue
            if len(nodes) > 1:
                self.pool_cursor[key] = (start + k) % len(nodes)
            if rejected:  # bound by the scheduler, refused by the kubelet: no device, no claim, nothing used
                return node, None, rejected
            self._commit(node, picks)
            node.pod_count += 1
            for rname, amount in plugin_req.items():
                node.used[rname] = node.used.get(rname, 0) + amount
            node.running_since.append((created, plugin_req))
            return node, generated, ""
        return None, None, ""

    def _unschedulable_message(
        self,
        selector: dict,
        tolerations: list[dict],
        req: dict[str, int],
        claims: list[ClaimState],
        ctx: str,
        extended: dict[str, str] | None = None,
        fits_ok: bool = False,
    ) -> str:
        """The FailedScheduling message; a node where the pod fits is an error in the scenario, unless `fits_ok`
        (the placement found no room for a "scheduled" pod: such a node is left out of the histogram)."""
        hist: dict[str, int] = {}
        unresolvable = 0
        for node in self.nodes:
            reasons = self._filter_reasons(node, selector, tolerations, req, claims, extended)
            if not reasons and fits_ok:
                continue
            if not reasons:
                raise ScenarioError(
                    f"{ctx}: declared pending but it fits on node {node.name}; request more than is "
                    "free, or fill the target pool first"
                )
            for r in reasons:
                hist[r] = hist.get(r, 0) + 1
            if not (
                reasons[0].startswith("Insufficient") or reasons[0] in ("Too many pods", "cannot allocate all claims")
            ):
                unresolvable += 1
        n = len(self.nodes)
        if n == 0:
            return "no nodes available to schedule pods"
        parts = sorted(f"{c} {r}" for r, c in hist.items())
        pre = []
        if n - unresolvable:
            pre.append(f"{n - unresolvable} No preemption victims found for incoming pod")
        if unresolvable:
            pre.append(f"{unresolvable} Preemption is not helpful for scheduling")
        dra = "no new claims to deallocate, " if self.has_dra or self.classes else ""
        return (
            f"0/{n} nodes are available: {', '.join(parts)}. {dra}preemption: 0/{n} nodes are available: "
            f"{', '.join(sorted(pre))}."
        )
