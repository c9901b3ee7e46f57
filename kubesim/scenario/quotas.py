"""ResourceQuotas: validation, scoping and the usage kubesim computes for them."""

from __future__ import annotations

from .common import ALL_MODE_QUOTA, ScenarioError, _ts, _uid
from .quantities import _fmt_bytes, _fmt_cpu, parse_quantity
from .spec import _check_keys, _label, _list, _subdomain


class QuotasMixin:
    """`quotas:` expanded into ResourceQuota objects with their status.used."""

    def build_quotas(self) -> list[dict]:
        out = []
        usage: dict[str, dict[str, int]] = {}
        for ns, req in self.pod_usage:
            u = usage.setdefault(ns, {})
            u["pods"] = u.get("pods", 0) + 1
            for k, v in req.items():
                u[k] = u.get(k, 0) + v
        claim_count: dict[str, int] = {}
        class_devices: dict[tuple[str, str], int] = {}
        for c in self.claim_order:
            claim_count[c.namespace] = claim_count.get(c.namespace, 0) + 1
            for r in c.requests:
                key = (c.namespace, r["deviceClassName"])
                class_devices[key] = class_devices.get(key, 0) + (
                    r["count"] if r["mode"] == "ExactCount" else ALL_MODE_QUOTA
                )
        seen: set[tuple[str, str]] = set()
        for i, q in enumerate(_list(self.spec, "quotas", "scenario")):
            ctx = f"quotas[{i}]"
            _check_keys(q, {"name", "namespace", "hard", "scopes", "scopeSelector", "fieldManager"}, ctx,
                        ("namespace", "hard"))
            scoping = self._quota_scoping(q, ctx)
            if not isinstance(q["hard"], dict) or not q["hard"]:
                raise ScenarioError(f"{ctx}.hard: expected a non-empty mapping")
            for ns in self._ns_list(q["namespace"], f"{ctx}.namespace"):
                name = _subdomain(q.get("name", "gpu-quota"), f"{ctx}.name")
                if (ns, name) in seen:
                    raise ScenarioError(f"{ctx}: duplicate ResourceQuota {ns}/{name}; give each quota a name")
                seen.add((ns, name))
                u = usage.get(ns, {})
                hard, used = {}, {}
                for key, value in q["hard"].items():
                    key = str(key)
                    parse_quantity(value, f"{ctx}.hard.{key}")
                    hard[key] = str(value)
                    used[key] = self._quota_used(key, u, claim_count.get(ns, 0), class_devices, ns, ctx)
                metadata = {
                    "name": name,
                    "namespace": ns,
                    "uid": _uid(self.seed, "ResourceQuota", ns, name),
                    "creationTimestamp": _ts(-60 * 86400 + i * 60),
                }
                if q.get("fieldManager"):
                    # Written by someone else (e.g. a platform team's kubectl): they own spec.hard's keys.
                    metadata["managedFields"] = [{
                        "manager": _label(q["fieldManager"], f"{ctx}.fieldManager"), "operation": "Update",
                        "apiVersion": "v1", "time": metadata["creationTimestamp"], "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:spec": {"f:hard": {f"f:{key}": {} for key in hard},
                                                **{f"f:{k}": {} for k in scoping}}},
                    }]
                out.append(
                    {
                        "apiVersion": "v1",
                        "kind": "ResourceQuota",
                        "metadata": metadata,
                        "spec": {"hard": hard, **scoping},
                        "status": {"hard": dict(hard), "used": used},
                    }
                )
        return out

    @staticmethod
    def _quota_scoping(q: dict, ctx: str) -> dict:
        """`scopes` (a list of scope names) and `scopeSelector` ({matchExpressions: [...]}) as given, checked for
        shape; usage is the scenario's (scoped quotas count every pod of the namespace until a pod is admitted)."""
        out: dict = {}
        if "scopes" in q:
            if not isinstance(q["scopes"], list) or not all(isinstance(x, str) for x in q["scopes"]):
                raise ScenarioError(f"{ctx}.scopes: expected a list of scope names")
            out["scopes"] = list(q["scopes"])
        if "scopeSelector" in q:
            selector = q["scopeSelector"]
            if not isinstance(selector, dict) or not isinstance(selector.get("matchExpressions"), list):
                raise ScenarioError(f"{ctx}.scopeSelector: expected {{matchExpressions: [...]}}")
            out["scopeSelector"] = {"matchExpressions": [dict(e) for e in selector["matchExpressions"]]}
        return out

    @staticmethod
    def _quota_used(key: str, u: dict[str, int], claims: int, class_devices: dict, ns: str, ctx: str) -> str:
        if key in ("pods", "count/pods"):
            return str(u.get("pods", 0))
        if key in ("cpu", "requests.cpu", "limits.cpu"):
            return _fmt_cpu(u.get("cpu", 0))
        if key in ("memory", "requests.memory", "limits.memory"):
            return _fmt_bytes(u.get("memory", 0)) if u.get("memory") else "0"
        if key == "count/resourceclaims.resource.k8s.io":
            return str(claims)
        if key.endswith(".deviceclass.resource.k8s.io/devices"):
            cls = key[: -len(".deviceclass.resource.k8s.io/devices")]
            return str(class_devices.get((ns, cls), 0))
        if key.startswith("requests."):
            return str(u.get(key[len("requests.") :], 0))
        raise ScenarioError(f"{ctx}.hard: kubesim cannot compute usage for quota key {key!r}")
