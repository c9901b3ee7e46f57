"""ResourceQuota admission for pods, as the API server's `ResourceQuota` admission plugin and quota controller do it.

- A pod is charged to every ResourceQuota of its namespace whose scopes match it (`spec.scopes` and
  `spec.scopeSelector`: Terminating, NotTerminating, BestEffort, NotBestEffort, PriorityClass,
  CrossNamespacePodAffinity — pkg/quota/v1/evaluator/core/pods.go); if any one of them would go over its `hard`
  for a key the pod uses, the create is refused (403, `exceeded quota: <name>, requested: …, used: …, limited: …`).
  Dry runs are checked and charge nothing.
- Usage of the pod keys (`pods`, `count/pods`, `cpu`/`requests.cpu`, `limits.cpu`, the same for memory and
  ephemeral-storage, `requests.<extended resource>`) is recomputed from the namespace's non-terminal pods whenever a
  pod is admitted or a quota is written, so `status.used` is always what the pods hold (the quota controller's
  job); other keys (object counts, DRA devices) keep the scenario's figures. `status.hard` follows `spec.hard`.

kubesim must not import the portal: this is its own small copy of the rules (tests hold both to the same answers).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from .errors import ApiError
from .scenario import ScenarioError, parse_quantity
from .store import Store

QOS_RESOURCES = ("cpu", "memory")
COMPUTE = ("cpu", "memory", "ephemeral-storage")
SCOPES = {"Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
          "CrossNamespacePodAffinity"}


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _q(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except (ScenarioError, ValueError, ZeroDivisionError):
        return None


def _container_amounts(container: Any) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    resources = _d(_d(container).get("resources"))
    limits = {k: q for k, v in _d(resources.get("limits")).items() if (q := _q(v)) is not None}
    requests = {k: q for k, v in _d(resources.get("requests")).items() if (q := _q(v)) is not None}
    for name, amount in limits.items():
        requests.setdefault(name, amount)  # API defaulting: a limit without a request requests the limit
    return requests, limits


def pod_usage(spec: Any) -> dict[str, Fraction]:
    """The quota keys one pod charges: max(sum of containers, each init container) plus overhead."""
    spec = _d(spec)
    totals: list[dict[str, Fraction]] = [{}, {}]
    for container in _l(spec.get("containers")):
        for total, amounts in zip(totals, _container_amounts(container), strict=True):
            for name, amount in amounts.items():
                total[name] = total.get(name, Fraction(0)) + amount
    for container in _l(spec.get("initContainers")):
        for total, amounts in zip(totals, _container_amounts(container), strict=True):
            for name, amount in amounts.items():
                total[name] = max(total.get(name, Fraction(0)), amount)
    for name, value in _d(spec.get("overhead")).items():
        overhead = _q(value)
        if overhead is not None:
            for total in totals:
                if name in total or total is totals[0]:
                    total[name] = total.get(name, Fraction(0)) + overhead
    requests, limits = totals
    usage = {"pods": Fraction(1), "count/pods": Fraction(1)}
    for name in COMPUTE:
        if name in requests:
            usage[f"requests.{name}"] = usage[name] = requests[name]
        if name in limits:
            usage[f"limits.{name}"] = limits[name]
    for name, amount in requests.items():
        if "/" in name or name.startswith("hugepages-"):
            usage[f"requests.{name}"] = amount
    return usage


def _best_effort(spec: dict[str, Any]) -> bool:
    for container in [*_l(spec.get("initContainers")), *_l(spec.get("containers"))]:
        for part in _container_amounts(container):
            if any(part.get(name) for name in QOS_RESOURCES):
                return False
    return True


def _scope_matches(requirement: dict[str, Any], spec: dict[str, Any]) -> bool:
    name, operator = requirement.get("scopeName"), requirement.get("operator")
    if name in ("Terminating", "NotTerminating"):
        deadline = spec.get("activeDeadlineSeconds")
        terminating = isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 0
        return bool(terminating == (name == "Terminating"))
    if name in ("BestEffort", "NotBestEffort"):
        return bool(_best_effort(spec) == (name == "BestEffort"))
    if name == "PriorityClass":
        value = spec.get("priorityClassName") if isinstance(spec.get("priorityClassName"), str) else ""
        values = _l(requirement.get("values"))
        return {"Exists": bool(value), "DoesNotExist": not value, "In": bool(value) and value in values,
                "NotIn": not value or value not in values}.get(str(operator), False)
    if name == "CrossNamespacePodAffinity":
        affinity = _d(spec.get("affinity"))
        for kind in ("podAffinity", "podAntiAffinity"):
            block = _d(affinity.get(kind))
            terms = _l(block.get("requiredDuringSchedulingIgnoredDuringExecution")) + [
                _d(t).get("podAffinityTerm") for t in _l(block.get("preferredDuringSchedulingIgnoredDuringExecution"))]
            if any(_l(_d(t).get("namespaces")) or _d(t).get("namespaceSelector") is not None for t in terms):
                return True
    return False


def quota_matches(quota: dict[str, Any], pod_spec: dict[str, Any]) -> bool:
    spec = _d(quota.get("spec"))
    requirements = [{"scopeName": s, "operator": "Exists"} for s in _l(spec.get("scopes"))]
    requirements += [_d(r) for r in _l(_d(spec.get("scopeSelector")).get("matchExpressions"))]
    if any(r.get("scopeName") not in SCOPES for r in requirements):
        return False
    return all(_scope_matches(r, pod_spec) for r in requirements)


def _fmt(value: Fraction, key: str = "") -> str:
    if value.denominator == 1:
        number = int(value)
        if number and ("memory" in key or "storage" in key):
            for suffix, power in (("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
                if number % 2**power == 0:
                    return f"{number >> power}{suffix}"
        return str(number)
    if (value * 1000).denominator == 1:
        return f"{int(value * 1000)}m"
    return str(float(value))


def _listed(values: dict[str, Any], keys: list[str]) -> str:
    """`requests.nvidia.com/gpu=4,pods=1`, as the API server lists quota figures."""
    return ",".join(f"{key}={_fmt(values[key], key) if isinstance(values[key], Fraction) else values[key]}"
                    for key in keys)


def _pod_keys(key: str) -> bool:
    return key in ("pods", "count/pods", *COMPUTE) or key.startswith(("requests.", "limits."))


class QuotaAdmission:
    """Charges pods to the quotas of their namespace; keeps `status` of quotas in step with the pods."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def _used(self, namespace: str, quota: dict[str, Any], exclude: str = "") -> dict[str, Fraction]:
        hard = _d(_d(quota.get("spec")).get("hard"))
        used = {key: Fraction(0) for key in hard if _pod_keys(key)}
        for so in self._store.sorted_objects("pods"):
            pod = so.obj
            meta = _d(pod.get("metadata"))
            if meta.get("namespace") != namespace or meta.get("name") == exclude:
                continue
            if _d(pod.get("status")).get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
                continue
            spec = _d(pod.get("spec"))
            if not quota_matches(quota, spec):
                continue
            for key, amount in pod_usage(spec).items():
                if key in used:
                    used[key] += amount
        return used

    def _status(self, quota: dict[str, Any], used: dict[str, Fraction]) -> dict[str, Any]:
        hard = dict(_d(_d(quota.get("spec")).get("hard")))
        previous = _d(_d(quota.get("status")).get("used"))
        shown = {key: _fmt(used[key], key) if key in used else str(previous.get(key, "0")) for key in hard}
        return {"hard": hard, "used": shown}

    def quota_written(self, obj: dict[str, Any]) -> None:
        """A quota created or its spec changed: status follows (hard from spec, used from the pods)."""
        namespace = _d(obj.get("metadata")).get("namespace") or ""
        obj["status"] = self._status(obj, self._used(namespace, obj))

    def scoped_usage(self) -> None:
        """After a scenario load: the scenario counts every pod of a namespace; a scoped quota counts only the pods
        its scopes match (what the quota controller would show)."""
        for so in self._store.sorted_objects("resourcequotas"):
            spec = _d(so.obj.get("spec"))
            if spec.get("scopes") or spec.get("scopeSelector"):
                quota = so.copy()
                quota["status"] = self._status(quota, self._used(so.key[0], quota))
                self._store.update("resourcequotas", quota, subresource="status", check_rv=False)

    def limit_range_defaults(self, pod: dict[str, Any]) -> None:
        """The LimitRanger admission plugin (it runs before quota): every container and init container gets, for
        each resource it does not state, the `default` limit and the `defaultRequest` request of the namespace's
        LimitRanges of type Container (a request still defaults to the container's own limit first)."""
        namespace = _d(pod.get("metadata")).get("namespace") or ""
        defaults: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for so in self._store.sorted_objects("limitranges"):
            if so.key[0] != namespace:
                continue
            for item in _l(_d(so.obj.get("spec")).get("limits")):
                if _d(item).get("type") == "Container":
                    defaults.append((_d(item.get("default")), _d(item.get("defaultRequest"))))
        if not defaults:
            return
        spec = _d(pod.get("spec"))
        for container in [*_l(spec.get("initContainers")), *_l(spec.get("containers"))]:
            if not isinstance(container, dict):
                continue
            resources = container.setdefault("resources", {})
            if not isinstance(resources, dict):
                continue
            limits, requests = resources.setdefault("limits", {}), resources.setdefault("requests", {})
            if not isinstance(limits, dict) or not isinstance(requests, dict):
                continue
            for name, value in limits.items():
                requests.setdefault(name, value)
            for default, default_request in defaults:
                for name, value in default.items():
                    limits.setdefault(name, value)
                for name, value in default_request.items():
                    requests.setdefault(name, value)
                for name, value in default.items():
                    requests.setdefault(name, value)  # no defaultRequest: the request defaults to the limit
            for key in ("limits", "requests"):
                if not resources[key]:
                    del resources[key]

    def admit_pod(self, pod: dict[str, Any], *, dry_run: bool) -> None:
        """Refuse the pod if any matching quota would be exceeded; otherwise charge it (unless a dry run)."""
        meta = _d(pod.get("metadata"))
        namespace, name, spec = meta.get("namespace") or "", meta.get("name") or "", _d(pod.get("spec"))
        usage = pod_usage(spec)
        charged: list[tuple[dict[str, Any], dict[str, Fraction]]] = []
        for so in self._store.sorted_objects("resourcequotas"):
            quota = so.obj
            if _d(quota.get("metadata")).get("namespace") != namespace or not quota_matches(quota, spec):
                continue
            used = self._used(namespace, quota, exclude=name)
            hard = _d(_d(quota.get("spec")).get("hard"))
            over = [key for key in sorted(hard) if key in used and usage.get(key)
                    and (limit := _q(hard[key])) is not None and used[key] + usage[key] > limit]
            if over:
                quota_name = _d(quota.get("metadata")).get("name")
                raise ApiError(403, "Forbidden", f'pods "{name}" is forbidden: exceeded quota: {quota_name}, '
                               f"requested: {_listed(usage, over)}, used: {_listed(used, over)}, "
                               f"limited: {_listed(hard, over)}", {"name": name, "kind": "pods"})
            charged.append((quota, {key: used[key] + usage.get(key, Fraction(0)) for key in used}))
        if dry_run:
            return
        for quota, used in charged:
            updated = {**quota, "status": self._status(quota, used)}
            self._store.update("resourcequotas", updated, subresource="status", check_rv=False)
