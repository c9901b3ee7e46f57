"""DeviceClasses, ResourceClaimTemplates and ResourceClaims: their validation and their Kubernetes objects."""

from __future__ import annotations

import copy
from typing import Any

from .common import DRIVER, EXTENDED_CLAIM_ANNOTATION, IMPLICIT_EXTENDED_PREFIX, ScenarioError, _ts, _uid
from .quantities import parse_quantity
from .spec import _check_keys, _int, _label, _list, _match_to_cel, _subdomain
from .state import ClaimState


class ClaimsMixin:
    """`deviceClasses:`, `claimTemplates:` and `claims:`, and the ResourceClaim objects at the end."""

    def build_device_classes(self) -> list[dict]:
        out = []
        for i, dc in enumerate(_list(self.spec, "deviceClasses", "scenario")):
            ctx = f"deviceClasses[{i}]"
            _check_keys(dc, {"name", "match", "selectors", "extendedResourceName", "config"}, ctx, ("name",))
            name = _subdomain(dc["name"], f"{ctx}.name")
            if name in self.classes:
                raise ScenarioError(f"{ctx}: duplicate device class {name!r}")
            match = dc.get("match") or {"driver": DRIVER}
            selectors = [{"cel": {"expression": _match_to_cel(match, f"{ctx}.match", True)}}]
            for j, expr in enumerate(_list(dc, "selectors", ctx)):
                if not isinstance(expr, str):
                    raise ScenarioError(f"{ctx}.selectors[{j}]: expected a CEL expression string")
                selectors.append({"cel": {"expression": expr}})
            spec: dict[str, Any] = {"selectors": selectors}
            # DRAExtendedResource: pods may ask for the class through resources.limits, by its implicit name or its
            # extendedResourceName; when two classes share a name, the one created later (listed later) wins.
            self.extended_classes[f"{IMPLICIT_EXTENDED_PREFIX}{name}"] = name
            if dc.get("extendedResourceName"):
                extended = str(dc["extendedResourceName"])
                if "/" not in extended or extended.startswith(("kubernetes.io/", "requests.")):
                    raise ScenarioError(f"{ctx}.extendedResourceName: {extended!r} is not an extended resource name")
                spec["extendedResourceName"] = extended
                self.extended_classes[extended] = name
            if dc.get("config"):
                spec["config"] = copy.deepcopy(dc["config"])
            self.classes[name] = {"match": match, "config": dc.get("config") or []}
            out.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {
                        "name": name,
                        "uid": _uid(self.seed, "DeviceClass", "", name),
                        "creationTimestamp": _ts(-60 * 86400 + i * 10),
                        "generation": 1,
                    },
                    "spec": spec,
                }
            )
        return out

    def _norm_requests(self, reqs: Any, ctx: str) -> list[dict]:
        if not isinstance(reqs, list) or not reqs:
            raise ScenarioError(f"{ctx}.requests: expected a non-empty list")
        out = []
        for i, r in enumerate(reqs):
            rctx = f"{ctx}.requests[{i}]"
            _check_keys(
                r,
                {"name", "deviceClassName", "count", "allocationMode", "adminAccess", "match", "selectors", "capacity"},
                rctx,
                ("deviceClassName",),
            )
            capacity = r.get("capacity") or {}
            if not isinstance(capacity, dict):
                raise ScenarioError(f"{rctx}.capacity: expected a mapping like {{memory: 20Gi}}")
            for cname, qty in capacity.items():
                if parse_quantity(qty, f"{rctx}.capacity.{cname}") < 0:
                    raise ScenarioError(f"{rctx}.capacity.{cname}: must not be negative")
            cls = r["deviceClassName"]
            if cls not in self.classes:
                raise ScenarioError(f"{rctx}.deviceClassName: device class {cls!r} is not declared")
            mode = r.get("allocationMode", "ExactCount")
            if mode not in ("ExactCount", "All"):
                raise ScenarioError(f"{rctx}.allocationMode: must be ExactCount or All")
            match = r.get("match") or {}
            _check_keys(match, {"attributes"}, f"{rctx}.match")
            out.append(
                {
                    "name": _label(r.get("name", "gpu" if i == 0 else f"gpu{i}"), f"{rctx}.name"),
                    "deviceClassName": cls,
                    "count": _int(r.get("count", 1), f"{rctx}.count", 1),
                    "mode": mode,
                    "admin": bool(r.get("adminAccess", False)),
                    "match": match.get("attributes") or {},
                    "selectors": [str(s) for s in _list(r, "selectors", rctx)],
                    "capacity": {str(k): str(v) for k, v in capacity.items()},
                }
            )
        return out

    @staticmethod
    def _constraints(spec: dict, requests: list[dict], ctx: str) -> list[dict]:
        """`constraints: [{matchAttribute: <qualified attribute>, requests: [names]}]` (requests: default all)."""
        out = []
        names = {r["name"] for r in requests}
        for ci, raw in enumerate(_list(spec, "constraints", ctx)):
            cctx = f"{ctx}.constraints[{ci}]"
            _check_keys(raw, {"matchAttribute", "requests"}, cctx, ("matchAttribute",))
            if not isinstance(raw["matchAttribute"], str) or not raw["matchAttribute"]:
                raise ScenarioError(f"{cctx}.matchAttribute: an attribute name such as resource.kubernetes.io/pcieRoot")
            covered = [str(n) for n in _list(raw, "requests", cctx)]
            unknown = sorted(set(covered) - names)
            if unknown:
                raise ScenarioError(f"{cctx}.requests: unknown request {unknown[0]!r}")
            out.append({"matchAttribute": raw["matchAttribute"], **({"requests": covered} if covered else {})})
        return out

    def _request_spec(self, requests: list[dict], config: list, constraints: list[dict] | None = None) -> dict:
        reqs = []
        for r in requests:
            exactly: dict[str, Any] = {"deviceClassName": r["deviceClassName"], "allocationMode": r["mode"]}
            if r["mode"] == "ExactCount":
                exactly["count"] = r["count"]
            sels = []
            if r["match"]:
                driver = self.classes[r["deviceClassName"]]["match"].get("driver", DRIVER)
                sels.append(
                    {"cel": {"expression": _match_to_cel({"driver": driver, "attributes": r["match"]}, "match", False)}}
                )
            sels += [{"cel": {"expression": s}} for s in r["selectors"]]
            if sels:
                exactly["selectors"] = sels
            if r["admin"]:
                exactly["adminAccess"] = True
            if r["capacity"]:
                exactly["capacity"] = {"requests": dict(r["capacity"])}
            reqs.append({"name": r["name"], "exactly": exactly})
        devices: dict[str, Any] = {"requests": reqs}
        if constraints:
            devices["constraints"] = copy.deepcopy(constraints)
        if config:
            devices["config"] = copy.deepcopy(config)
        return {"devices": devices}

    def _check_admin(self, namespace: str, requests: list[dict], ctx: str) -> None:
        if any(r["admin"] for r in requests):
            labels = self.namespaces[namespace]["metadata"]["labels"]
            if labels.get("resource.kubernetes.io/admin-access") != "true":
                raise ScenarioError(
                    f"{ctx}: admin access to devices requires the `resource.kubernetes.io/admin-access:"
                    f" true` label on the containing namespace {namespace!r}"
                )

    def build_templates(self) -> list[dict]:
        out = []
        for i, t in enumerate(_list(self.spec, "claimTemplates", "scenario")):
            ctx = f"claimTemplates[{i}]"
            _check_keys(t, {"name", "namespace", "requests", "config", "constraints"}, ctx,
                        ("name", "namespace", "requests"))
            name = _subdomain(t["name"], f"{ctx}.name")
            requests = self._norm_requests(t["requests"], ctx)
            config = _list(t, "config", ctx)
            constraints = self._constraints(t, requests, ctx)
            for ns in self._ns_list(t["namespace"], f"{ctx}.namespace"):
                if (ns, name) in self.templates:
                    raise ScenarioError(f"{ctx}: duplicate template {ns}/{name}")
                self._check_admin(ns, requests, ctx)
                self.templates[(ns, name)] = {"requests": requests, "config": config, "constraints": constraints}
                out.append(
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaimTemplate",
                        "metadata": {
                            "name": name,
                            "namespace": ns,
                            "uid": _uid(self.seed, "ResourceClaimTemplate", ns, name),
                            "creationTimestamp": _ts(-7 * 86400 + i * 60),
                        },
                        "spec": {"spec": self._request_spec(requests, config, constraints)},
                    }
                )
        return out

    def declare_claims(self) -> None:
        for i, c in enumerate(_list(self.spec, "claims", "scenario")):
            ctx = f"claims[{i}]"
            _check_keys(
                c,
                {"name", "namespace", "requests", "config", "allocated", "pool"},
                ctx,
                ("name", "namespace", "requests"),
            )
            name, ns = _subdomain(c["name"], f"{ctx}.name"), self._ns(c["namespace"], f"{ctx}.namespace")
            if (ns, name) in self.claims:
                raise ScenarioError(f"{ctx}: duplicate claim {ns}/{name}")
            requests = self._norm_requests(c["requests"], ctx)
            self._check_admin(ns, requests, ctx)
            pool = c.get("pool")
            if pool is not None and pool not in self.pool_nodes:
                raise ScenarioError(f"{ctx}.pool: unknown node pool {pool!r}")
            claim = ClaimState(
                name,
                ns,
                _uid(self.seed, "ResourceClaim", ns, name),
                requests,
                _list(c, "config", ctx),
                -3 * 86400 + i * 60,
                want_allocated=bool(c.get("allocated", False)),
                pool=pool,
            )
            self.claims[(ns, name)] = claim
            self.claim_order.append(claim)

    def _claim_object(self, c: ClaimState) -> dict:
        meta: dict[str, Any] = {
            "name": c.name,
            "namespace": c.namespace,
            "uid": c.uid,
            "creationTimestamp": _ts(c.created),
        }
        if c.owner_pod and c.extended:
            meta["annotations"] = {EXTENDED_CLAIM_ANNOTATION: "true"}
        elif c.owner_pod:
            meta["annotations"] = {"resource.kubernetes.io/pod-claim-name": c.pod_claim_name}
        if c.owner_pod:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": c.owner_pod[0],
                    "uid": c.owner_pod[1],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        obj: dict[str, Any] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": meta,
            "spec": self._request_spec(c.requests, c.config, c.constraints),
            "status": {},
        }
        if c.results is not None:
            meta["finalizers"] = ["resource.kubernetes.io/delete-protection"]
            alloc: dict[str, Any] = {"devices": {"results": c.results}}
            cfg = []
            seen = set()
            for req in c.requests:
                cls = req["deviceClassName"]
                if cls in seen:
                    continue
                seen.add(cls)
                names = [r["name"] for r in c.requests if r["deviceClassName"] == cls]
                cfg += [
                    {"source": "FromClass", "requests": names, "opaque": copy.deepcopy(e["opaque"])}
                    for e in self.classes[cls]["config"]
                    if isinstance(e, dict) and "opaque" in e
                ]
            cfg += [
                {"source": "FromClaim", "requests": list(e.get("requests", [])), "opaque": copy.deepcopy(e["opaque"])}
                for e in c.config
                if isinstance(e, dict) and "opaque" in e
            ]
            if cfg:
                alloc["devices"]["config"] = cfg
            alloc["nodeSelector"] = {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [c.node]}]}]
            }
            # The scheduler allocates a moment after creation (API 1.34+ records when).
            alloc["allocationTimestamp"] = _ts(c.created + 2)
            obj["status"]["allocation"] = alloc
            if c.reserved:
                obj["status"]["reservedFor"] = c.reserved
        return obj
