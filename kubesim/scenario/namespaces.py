"""Namespaces and ConfigMaps of a scenario."""

from __future__ import annotations

from typing import Any

from .common import CONFIG_KEY, SYSTEM_NAMESPACES, ScenarioError, _ts, _uid
from .spec import _check_keys, _int, _label, _list, _subdomain


class NamespacesMixin:
    """`namespaces:` and `configmaps:`, and the namespace patterns workloads and claims name."""

    def build_namespaces(self) -> list[dict]:
        out = []
        declared = _list(self.spec, "namespaces", "scenario")
        entries: list[dict] = [{"name": n} for n in SYSTEM_NAMESPACES]
        for i, ns in enumerate(declared):
            ctx = f"namespaces[{i}]"
            _check_keys(ns, {"name", "labels", "annotations", "count", "tenantLabel"}, ctx, ("name",))
            _label(ns["name"], f"{ctx}.name")
            expanded = [ns]
            if "count" in ns:
                n = _int(ns["count"], f"{ctx}.count", 1)
                width = max(2, len(str(n)))
                expanded = []
                for k in range(1, n + 1):
                    nname = _label(f"{ns['name']}-{k:0{width}d}", f"{ctx}.name")
                    labels = dict(ns.get("labels") or {})
                    if ns.get("tenantLabel"):
                        labels[str(ns["tenantLabel"])] = nname
                    expanded.append({"name": nname, "labels": labels, "annotations": ns.get("annotations")})
            for e in expanded:
                if e["name"] in SYSTEM_NAMESPACES:
                    entries = [x for x in entries if x["name"] != e["name"]]
                elif any(x["name"] == e["name"] for x in entries):
                    raise ScenarioError(f"{ctx}: duplicate namespace {e['name']!r}")
                entries.append(e)
        for i, ns in enumerate(entries):
            name = ns["name"]
            labels = {
                "kubernetes.io/metadata.name": name,
                **{str(k): str(v) for k, v in (ns.get("labels") or {}).items()},
            }
            meta: dict[str, Any] = {
                "name": name,
                "uid": _uid(self.seed, "Namespace", "", name),
                "creationTimestamp": _ts(-90 * 86400 + i * 60),
                "labels": labels,
            }
            if ns.get("annotations"):
                meta["annotations"] = {str(k): str(v) for k, v in ns["annotations"].items()}
            obj = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": meta,
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
            self.namespaces[name] = obj
            out.append(obj)
        return out

    def build_configmaps(self) -> list[dict]:
        out = []
        seen: set[tuple[str, str]] = set()
        for i, cm in enumerate(_list(self.spec, "configmaps", "scenario")):
            ctx = f"configmaps[{i}]"
            _check_keys(cm, {"name", "namespace", "data"}, ctx, ("name", "namespace"))
            name = _subdomain(cm["name"], f"{ctx}.name")
            ns = self._ns(cm["namespace"], f"{ctx}.namespace")
            if (ns, name) in seen:
                raise ScenarioError(f"{ctx}: duplicate ConfigMap {ns}/{name}")
            seen.add((ns, name))
            data = cm.get("data") or {}
            if not isinstance(data, dict):
                raise ScenarioError(f"{ctx}.data: expected a mapping")
            for key in data:
                if not isinstance(key, str) or not CONFIG_KEY.match(key):
                    raise ScenarioError(f"{ctx}.data: {key!r} is not a valid config key (alphanumerics, '-', '_', '.')")
            meta = {
                "name": name,
                "namespace": ns,
                "uid": _uid(self.seed, "ConfigMap", ns, name),
                "creationTimestamp": _ts(-7 * 86400 + i * 60),
            }
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": meta,
                    "data": {k: str(v) for k, v in data.items()},
                }
            )
        return out

    def _ns_list(self, pattern: Any, ctx: str) -> list[str]:
        """A namespace name, or ``prefix-*`` for every declared namespace starting with ``prefix-``."""
        if isinstance(pattern, str) and pattern.endswith("*"):
            found = [n for n in self.namespaces if n.startswith(pattern[:-1])]
            if not found:
                raise ScenarioError(f"{ctx}: pattern {pattern!r} matches no declared namespace")
            return found
        return [self._ns(pattern, ctx)]

    def _ns(self, name: Any, ctx: str) -> str:
        if name not in self.namespaces:
            raise ScenarioError(f"{ctx}: namespace {name!r} is not declared under namespaces")
        return name
