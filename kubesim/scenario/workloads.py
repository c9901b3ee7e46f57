"""Workloads: validation and expansion into pods (names, claims, placement requests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .common import ADMISSION_ERROR_REASON, POOL_LABEL, STATES, ScenarioError, _frac, _suffix, _uid
from .quantities import parse_quantity
from .spec import _check_keys, _int, _label, _list, _subdomain
from .state import ClaimState, NodeState


@dataclass
class _Workload:
    """A validated `workloads:` entry: what all of its pods share."""

    index: int
    spec: dict
    ctx: str
    name: str
    namespaces: list[str]
    count: int
    state: str
    pool: str | None
    controller: str
    restart: str
    cpu: int
    mem: int
    ext: dict[str, int]
    refs: list[dict]
    node_selector: dict[str, str]
    tolerations: list[dict]
    req: dict[str, int]
    extended: dict[str, str]
    labels: dict[str, str]
    image: str
    per_ns: int
    created_at: int | None


class WorkloadsMixin:
    """`workloads:` expanded into pods, placed by the scheduler."""

    WORKLOAD_KEYS = {
        "name",
        "namespace",
        "count",
        "pool",
        "state",
        "image",
        "cpu",
        "memory",
        "resources",
        "claimTemplate",
        "claim",
        "resourceClaims",
        "controller",
        "restartPolicy",
        "exitReason",
        "nodeSelector",
        "tolerations",
        "labels",
        "serviceAccountName",
        "serviceAccount",
        "privileged",
        "hostDevice",
        "priorityClassName",
        "command",
        "createdAt",
    }

    @staticmethod
    def _check_pod_security(w: dict, ctx: str) -> None:
        """`privileged` (bool), `hostDevice` (absolute path) and `serviceAccount` (alias of serviceAccountName)."""
        if not isinstance(w.get("privileged", False), bool):
            raise ScenarioError(f"{ctx}.privileged: expected true or false, got {w['privileged']!r}")
        device = w.get("hostDevice")
        if device is not None and (not isinstance(device, str) or not device.startswith("/")):
            raise ScenarioError(
                f"{ctx}.hostDevice: expected an absolute host path like /dev/infiniband, got {device!r}"
            )
        if "serviceAccount" in w and "serviceAccountName" in w:
            raise ScenarioError(f"{ctx}: give serviceAccount or serviceAccountName, not both")
        account = w.get("serviceAccount", w.get("serviceAccountName", "default"))
        _subdomain(account, f"{ctx}.serviceAccount")

    def build_workloads(self) -> None:
        for wi, w in enumerate(_list(self.spec, "workloads", "scenario")):
            ctx = f"workloads[{wi}]"
            _check_keys(w, self.WORKLOAD_KEYS, ctx, ("name", "namespace"))
            self._check_pod_security(w, ctx)
            self._expand_workload(wi, w, ctx)
        # claims that should be allocated but no running pod placed them
        for claim in self.claim_order:
            if claim.want_allocated and claim.results is None and claim.template is None:
                nodes = self.pool_nodes[claim.pool] if claim.pool else self.nodes
                for node in nodes:
                    picks = self._try_allocate(node, [claim])
                    if picks:
                        self._commit(node, picks)
                        break
                else:
                    raise ScenarioError(
                        f"claim {claim.namespace}/{claim.name}: allocated: true but no node has free matching devices"
                    )

    def _expand_workload(self, wi: int, w: dict, ctx: str) -> None:
        wl = self._workload(wi, w, ctx)
        for i in range(wl.count):
            self._expand_replica(wl, i)

    def _workload(self, wi: int, w: dict, ctx: str) -> _Workload:
        """Validate a workload (in the order its errors are reported) into what all its pods share."""
        name = _label(w["name"], f"{ctx}.name")
        nss = self._ns_list(w["namespace"], f"{ctx}.namespace")
        count = _int(w.get("count", 1), f"{ctx}.count")
        state = w.get("state", "running")
        if state not in STATES:
            raise ScenarioError(f"{ctx}.state: {state!r} is not one of {', '.join(STATES)}")
        pool = w.get("pool")
        if pool is not None and pool not in self.pool_nodes:
            raise ScenarioError(f"{ctx}.pool: unknown node pool {pool!r}")
        controller, restart = self._workload_controller(w, state, ctx)
        cpu = int(parse_quantity(w.get("cpu", "1"), f"{ctx}.cpu") * 1000)
        mem = int(parse_quantity(w.get("memory", "2Gi"), f"{ctx}.memory"))
        ext = self._workload_extended_resources(w, ctx)
        norm_refs = self._workload_claim_refs(w, nss, ctx)
        node_selector = {POOL_LABEL: pool} if pool else {}
        node_selector.update({str(k): str(v) for k, v in (w.get("nodeSelector") or {}).items()})
        tolerations = self._pool_tolerations(pool) + list(_list(w, "tolerations", ctx))
        # Extended resources a DeviceClass serves (DRAExtendedResource): on a node that does not advertise them the
        # scheduler allocates them through a claim it generates for the pod.
        extended = {r: self.extended_classes[r] for r in ext if r in self.extended_classes}
        labels = {"app.kubernetes.io/name": name, **{str(k): str(v) for k, v in (w.get("labels") or {}).items()}}
        image = str(w.get("image", "nvcr.io/nvidia/pytorch:25.01-py3" if ext or norm_refs else "python:3.12-slim"))
        per_ns = -(-count // len(nss))
        created_at = w.get("createdAt")
        if created_at is not None and (isinstance(created_at, bool) or not isinstance(created_at, int)
                                       or not -30 * 86400 < created_at < 0):
            raise ScenarioError(f"{ctx}.createdAt: seconds before the scenario's epoch, between -2592000 and 0 "
                                f"(exclusive), got {created_at!r}")
        return _Workload(
            index=wi, spec=w, ctx=ctx, name=name, namespaces=nss, count=count, state=state, pool=pool,
            controller=controller, restart=restart, cpu=cpu, mem=mem, ext=ext, refs=norm_refs,
            node_selector=node_selector, tolerations=tolerations, req={"cpu": cpu, "memory": mem, **ext},
            extended=extended, labels=labels, image=image, per_ns=per_ns, created_at=created_at,
        )

    @staticmethod
    def _workload_controller(w: dict, state: str, ctx: str) -> tuple[str, str]:
        """The owning controller kind (or "None") and the pods' restartPolicy."""
        controller = w.get("controller", "Job" if state in ("failed", "succeeded") else "Deployment")
        if controller not in ("Job", "Deployment", "StatefulSet", "None"):
            raise ScenarioError(f"{ctx}.controller: must be Job, Deployment, StatefulSet or None")
        restart = w.get("restartPolicy", "Never" if controller == "Job" else "Always")
        if state in ("failed", "succeeded") and restart == "Always":
            raise ScenarioError(f"{ctx}: a {state} pod needs restartPolicy Never or OnFailure")
        return controller, restart

    @staticmethod
    def _workload_extended_resources(w: dict, ctx: str) -> dict[str, int]:
        """`resources:`: extended resource name -> count (positive integers only)."""
        ext: dict[str, int] = {}
        for rname, qty in (w.get("resources") or {}).items():
            q = parse_quantity(qty, f"{ctx}.resources.{rname}")
            if q.denominator != 1 or q < 1:
                raise ScenarioError(
                    f"{ctx}.resources.{rname}: extended resources must be positive integers, got {qty!r}"
                )
            ext[str(rname)] = int(q)
        return ext

    def _workload_claim_refs(self, w: dict, nss: list[str], ctx: str) -> list[dict]:
        """The pod's resourceClaims (with the `claimTemplate`/`claim` shorthands), each declared in every namespace."""
        refs = list(_list(w, "resourceClaims", ctx))
        if w.get("claimTemplate"):
            refs.append({"name": "gpu", "template": w["claimTemplate"]})
        if w.get("claim"):
            refs.append({"name": "gpu" if not refs else "shared", "claim": w["claim"]})
        norm_refs = []
        for ri, r in enumerate(refs):
            rctx = f"{ctx}.resourceClaims[{ri}]"
            _check_keys(r, {"name", "template", "claim"}, rctx, ("name",))
            if ("template" in r) == ("claim" in r):
                raise ScenarioError(f"{rctx}: give exactly one of template or claim")
            for ns in nss:
                if "template" in r and (ns, r["template"]) not in self.templates:
                    raise ScenarioError(f"{rctx}: ResourceClaimTemplate {ns}/{r['template']} is not declared")
                if "claim" in r and (ns, r["claim"]) not in self.claims:
                    raise ScenarioError(f"{rctx}: ResourceClaim {ns}/{r['claim']} is not declared")
            norm_refs.append({"name": _label(r["name"], f"{rctx}.name"), **r})
        return norm_refs

    def _pool_tolerations(self, pool: str | None) -> list[dict]:
        """Tolerations for the pool's node taints (all but the cordon taint), from its first node."""
        if not pool or not self.pool_specs.get(pool) or not self.pool_nodes[pool]:
            return []
        return [
            {"key": t["key"], "operator": "Equal", "value": t.get("value", ""), "effect": t["effect"]}
            if t.get("value")
            else {"key": t["key"], "operator": "Exists", "effect": t["effect"]}
            for t in self.pool_nodes[pool][0].taints
            if t["key"] != "node.kubernetes.io/unschedulable"
        ]

    def _expand_replica(self, wl: _Workload, i: int) -> None:
        """Replica `i` of a workload: its claims, its placement, the Pod object and its events."""
        nss = wl.namespaces
        # "scheduled": the simulator's scheduler decides, pod by pod in order: bound where it fits now,
        # else Pending with the scheduler's message (a gang's pods after the first that finds no room).
        pod_state = "running" if wl.state == "scheduled" else wl.state
        ns = nss[i % len(nss)]
        tmpl_hash = _suffix(10, self.seed, "rs", ns, wl.name)
        pod_name = self._pod_name(ns, wl.name, wl.controller, i // len(nss), wl.per_ns, tmpl_hash)
        pod_uid = _uid(self.seed, "Pod", ns, pod_name)
        created = (
            (wl.created_at + i * 13) if wl.created_at is not None else -2 * 86400 + (wl.index * 997 + i * 13) % 86400
        )
        pod_claims = self._replica_claims(wl, ns, pod_name, pod_uid, pod_state, created)
        node, pod_state, extended_status, rejected = self._bind_replica(
            wl, ns, pod_name, pod_uid, created, pod_state, pod_claims
        )
        message = None
        if pod_state == "pending":
            if wl.index not in self.pending_cache:
                self.pending_cache[wl.index] = self._unschedulable_message(
                    wl.node_selector, wl.tolerations, wl.req, [c for _, c in pod_claims],
                    f"{wl.ctx} ({ns}/{pod_name})", wl.extended, fits_ok=wl.state == "scheduled",
                )
            message = self.pending_cache[wl.index]
        pod = self._pod_object(
            wl.spec,
            ns,
            wl.name,
            pod_name,
            pod_uid,
            i // len(nss),
            created,
            pod_state,
            wl.controller,
            wl.restart,
            wl.image,
            wl.cpu,
            wl.mem,
            wl.ext,
            wl.refs,
            pod_claims,
            node,
            wl.node_selector,
            wl.tolerations,
            wl.labels,
            tmpl_hash,
            message,
            extended_status,
            rejected,
        )
        self.pods.append(pod)
        if pod_state not in ("failed", "succeeded") and not rejected:
            self.pod_usage.append((ns, wl.req))
        self._replica_event(ns, pod_name, pod_uid, created, pod_state, node, message, rejected)

    def _replica_claims(
        self, wl: _Workload, ns: str, pod_name: str, pod_uid: str, pod_state: str, created: float
    ) -> list[tuple[dict, ClaimState]]:
        """The replica's claims: shared ones by name, and one generated from each template (unless it finished)."""
        pod_claims: list[tuple[dict, ClaimState]] = []
        for r in wl.refs:
            if "claim" in r:
                pod_claims.append((r, self.claims[(ns, r["claim"])]))
            elif pod_state not in ("failed", "succeeded"):
                tpl = self.templates[(ns, r["template"])]
                cname = f"{pod_name}-{r['name']}-{_suffix(5, self.seed, 'claim', ns, pod_name, r['name'])}"[:253]
                claim = ClaimState(
                    cname,
                    ns,
                    _uid(self.seed, "ResourceClaim", ns, cname),
                    tpl["requests"],
                    tpl["config"],
                    created,
                    template=r["template"],
                    owner_pod=(pod_name, pod_uid),
                    pod_claim_name=r["name"],
                    constraints=tpl["constraints"],
                )
                if (ns, cname) in self.claims:
                    raise ScenarioError(f"{wl.ctx}: generated claim name collision {ns}/{cname}")
                self.claims[(ns, cname)] = claim
                self.claim_order.append(claim)
                pod_claims.append((r, claim))
        return pod_claims

    def _bind_replica(
        self,
        wl: _Workload,
        ns: str,
        pod_name: str,
        pod_uid: str,
        created: float,
        pod_state: str,
        pod_claims: list[tuple[dict, ClaimState]],
    ) -> tuple[NodeState | None, str, dict[str, Any] | None, str]:
        """Place a replica that has (or had) a node: (node, its state after placement, the status of the claim
        generated for extended resources, the kubelet's admission error)."""
        if pod_state not in ("running", "creating", "crashloop", "failed", "succeeded"):
            return None, pod_state, None, ""
        node, ext_claim, rejected = self._place(
            wl.pool,
            wl.node_selector,
            wl.tolerations,
            wl.req,
            [c for _, c in pod_claims],
            consume=pod_state not in ("failed", "succeeded"),
            extended=wl.extended,
            created=created,
        )
        if node is None and wl.state == "scheduled":
            pod_state = "pending"
        elif node is None:
            raise ScenarioError(
                f"{wl.ctx}: no node {'in pool ' + repr(wl.pool) if wl.pool else ''} has room for pod "
                f"{ns}/{pod_name} ({pod_state}); add nodes or lower the request"
            )
        extended_status = None
        if ext_claim is not None:
            extended_status = self._extended_claim(ext_claim, ns, pod_name, pod_uid, created, pod_state, wl.ctx)
        for _, claim in pod_claims:
            if node is not None and pod_state not in ("failed", "succeeded") and not rejected \
                    and len(claim.reserved) < 256:
                claim.reserved.append({"resource": "pods", "name": pod_name, "uid": pod_uid})
        return node, pod_state, extended_status, rejected

    def _replica_event(
        self,
        ns: str,
        pod_name: str,
        pod_uid: str,
        created: float,
        pod_state: str,
        node: NodeState | None,
        message: str | None,
        rejected: str,
    ) -> None:
        """The one event a replica gets: FailedScheduling, the kubelet's admission error, or Scheduled."""
        if message:
            self._event(
                ns,
                pod_name,
                pod_uid,
                created,
                "Warning",
                "FailedScheduling",
                message,
                1 + int(_frac(self.seed, "evcount", pod_uid) * 40),
                "default-scheduler",
                "Scheduling",
            )
        elif rejected:
            self._event(ns, pod_name, pod_uid, created + 2, "Warning", ADMISSION_ERROR_REASON, rejected, 1,
                        "kubelet", "")
        elif pod_state == "creating":
            self._event(
                ns,
                pod_name,
                pod_uid,
                created,
                "Normal",
                "Scheduled",
                f"Successfully assigned {ns}/{pod_name} to {node.name}",
                1,
                "default-scheduler",
                "Binding",
            )

    def _pod_name(self, ns: str, name: str, controller: str, i: int, count: int, tmpl_hash: str) -> str:
        for attempt in range(50):
            if controller == "StatefulSet":
                pod_name = f"{name}-{i}"
            elif controller == "None":
                pod_name = name if count == 1 else f"{name}-{i}"
            elif controller == "Job":
                pod_name = f"{name}-{_suffix(5, self.seed, 'pod', ns, name, i, attempt)}"
            else:
                pod_name = f"{name}-{tmpl_hash}-{_suffix(5, self.seed, 'pod', ns, name, i, attempt)}"
            if (ns, pod_name) not in self.pod_names:
                if len(pod_name) > 63:
                    raise ScenarioError(f"workload {ns}/{name}: pod name {pod_name!r} is longer than 63 characters")
                self.pod_names.add((ns, pod_name))
                return pod_name
            if controller in ("StatefulSet", "None"):
                break
        raise ScenarioError(f"workload {ns}/{name}: pod name collision for {name!r} in namespace {ns}")
