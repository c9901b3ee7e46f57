"""ResourceQuota composition: which quotas of a namespace constrain an object, and the effective limit per key.

The API server's quota admission charges a new object to *every* ResourceQuota of its namespace that matches it, and
refuses it if any one of them would be exceeded: the effective limit of a key is the tightest matching quota, never
the sum. What "matches" means (k8s.io/kubernetes/pkg/quota/v1/evaluator/core/pods.go `podMatchesScopeFunc`,
pkg/quota/v1/generic `Matches`):

- `spec.scopes` are `scopeSelector` requirements with operator `Exists`; all requirements are ANDed.
- Terminating: `spec.activeDeadlineSeconds` set and >= 0; NotTerminating: the rest.
- BestEffort: the pod's QoS class is BestEffort (no container nor init container, nor pod-level `resources`, sets a
  cpu or memory request or limit — extended resources do not count); NotBestEffort: the rest.
- PriorityClass: `Exists` = the pod names a priority class; otherwise a label selector over
  `{"PriorityClass": spec.priorityClassName}` where a pod without a class has no such label (so `NotIn` and
  `DoesNotExist` match it, `In` does not).
- CrossNamespacePodAffinity: a pod (anti-)affinity term with `namespaces` or a `namespaceSelector`.
- An object that is not a pod (a ResourceClaim) is matched by unscoped quotas only (`MatchesNoScopeFunc`).

LimitRange (the LimitRanger admission plugin, which runs before quota): each container and init container gets, for
every resource it does not state, the `default` limit and the `defaultRequest` request of the namespace's
LimitRanges of type Container (a container's request first defaults to its own limit; a LimitRange without
`defaultRequest` defaults the request to `default`). That is what quota then charges.

A quota whose scope cannot be read (unknown scope name or operator) matches nothing and is reported as unreadable;
nothing here raises for malformed input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from inventory.k8s.semantics.matching import requirement_matches
from inventory.k8s.semantics.quantity import quantity_or_none
from inventory.k8s.semantics.values import as_dict, as_int, as_list, as_str

__all__ = [
    "QUOTA_SCOPES",
    "KeyLimit",
    "QuotaLimit",
    "effective_limits",
    "is_best_effort",
    "limit_range_defaults",
    "quota_scope_problem",
    "quota_scope_text",
    "quota_scopes",
    "scope_matches_pod",
    "with_limit_range_defaults",
]

QUOTA_SCOPES = frozenset({"Terminating", "NotTerminating", "BestEffort", "NotBestEffort", "PriorityClass",
                          "CrossNamespacePodAffinity"})
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
_QOS_RESOURCES = ("cpu", "memory")


def quota_scopes(spec: Any) -> list[dict[str, Any]]:
    """Every scope requirement of a ResourceQuota spec: `scopes` as `Exists`, then `scopeSelector.matchExpressions`
    (upstream `getScopeSelectorsFromQuota`)."""
    spec = as_dict(spec)
    selectors: list[dict[str, Any]] = [{"scopeName": as_str(s), "operator": "Exists"} for s in as_list(spec.get("scopes"))]
    selectors += [as_dict(e) for e in as_list(as_dict(spec.get("scopeSelector")).get("matchExpressions"))]
    return selectors


def quota_scope_problem(spec: Any) -> str:
    """Why a quota's scopes cannot be evaluated ("" when they can)."""
    for requirement in quota_scopes(spec):
        name, operator = as_str(requirement.get("scopeName")), as_str(requirement.get("operator"))
        if name not in QUOTA_SCOPES:
            return f"unknown quota scope {name[:60]!r}"
        if operator not in _OPERATORS:
            return f"unknown scope operator {operator[:20]!r}"
        values = requirement.get("values")
        if operator in ("In", "NotIn") and not (isinstance(values, list) and values
                                                 and all(isinstance(v, str) for v in values)):
            return f"scope {name} {operator} needs a list of values"
    return ""


def quota_scope_text(spec: Any) -> str:
    """`PriorityClass In [high], NotBestEffort` ("" for an unscoped quota)."""
    parts = []
    for requirement in quota_scopes(spec):
        name, operator = as_str(requirement.get("scopeName"))[:60], as_str(requirement.get("operator"))[:20]
        values = [str(v)[:60] for v in as_list(requirement.get("values"))[:8]]
        parts.append(name if operator == "Exists" and name != "PriorityClass" else
                     f"{name} {operator}" + (f" [{', '.join(values)}]" if values else ""))
    return ", ".join(parts)


def is_best_effort(pod_spec: Any) -> bool:
    """QoS class BestEffort (`qos.GetPodQOS`): no cpu/memory request or limit anywhere (zero amounts ignored)."""
    spec = as_dict(pod_spec)
    resources = [as_dict(spec.get("resources"))]
    for group in ("initContainers", "containers"):
        resources += [as_dict(as_dict(c).get("resources")) for c in as_list(spec.get(group))]
    for block in resources:
        for part in ("requests", "limits"):
            amounts = as_dict(block.get(part))
            for name in _QOS_RESOURCES:
                if name in amounts and (quantity_or_none(amounts[name]) or Fraction(0)) != 0:
                    return False
    return True


def _cross_namespace_affinity(pod_spec: dict[str, Any]) -> bool:
    affinity = as_dict(pod_spec.get("affinity"))
    for kind in ("podAffinity", "podAntiAffinity"):
        block = as_dict(affinity.get(kind))
        terms = list(as_list(block.get("requiredDuringSchedulingIgnoredDuringExecution")))
        terms += [as_dict(t).get("podAffinityTerm") for t in
                  as_list(block.get("preferredDuringSchedulingIgnoredDuringExecution"))]
        if any(as_list(as_dict(t).get("namespaces")) or as_dict(t).get("namespaceSelector") is not None
               for t in terms):
            return True
    return False


def _requirement_matches_pod(requirement: Mapping[str, Any], pod_spec: dict[str, Any]) -> bool:
    name, operator = as_str(requirement.get("scopeName")), as_str(requirement.get("operator"))
    if name in ("Terminating", "NotTerminating"):
        deadline = as_int(pod_spec.get("activeDeadlineSeconds"))
        terminating = deadline is not None and deadline >= 0
        return terminating if name == "Terminating" else not terminating
    if name in ("BestEffort", "NotBestEffort"):
        return is_best_effort(pod_spec) == (name == "BestEffort")
    if name == "PriorityClass":
        priority_class = as_str(pod_spec.get("priorityClassName"))
        if operator == "Exists":
            return bool(priority_class)
        labels = {"PriorityClass": priority_class} if priority_class else {}
        return requirement_matches({"key": "PriorityClass", "operator": operator,
                                    "values": as_list(requirement.get("values"))}, labels)
    if name == "CrossNamespacePodAffinity":
        return _cross_namespace_affinity(pod_spec)
    return False


def scope_matches_pod(quota_spec: Any, pod_spec: Any | None) -> bool:
    """Does a ResourceQuota (its spec) constrain this pod (its spec)? `pod_spec` None: an object that is not a pod,
    which only unscoped quotas constrain. Unreadable scopes match nothing."""
    scopes = quota_scopes(quota_spec)
    if not scopes:
        return True
    if pod_spec is None or quota_scope_problem(quota_spec):
        return False
    spec = as_dict(pod_spec)
    return all(_requirement_matches_pod(requirement, spec) for requirement in scopes)


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    """One quota's figures for one key."""

    quota: str
    hard: Fraction
    used: Fraction
    scope: str = ""

    @property
    def headroom(self) -> Fraction:
        return max(self.hard - self.used, Fraction(0))


@dataclass(frozen=True, slots=True)
class KeyLimit:
    """The effective limit of one key over every matching quota: `limit` is the smallest hard, `headroom` the
    smallest hard - used, and `binding` the quota with that smallest headroom (it refuses first)."""

    key: str
    quotas: tuple[QuotaLimit, ...] = field(default_factory=tuple)

    @property
    def binding(self) -> QuotaLimit:
        return min(self.quotas, key=lambda q: (q.headroom, q.hard, q.quota))

    @property
    def limit(self) -> Fraction:
        return min(q.hard for q in self.quotas)

    @property
    def used(self) -> Fraction:
        return self.binding.used

    @property
    def headroom(self) -> Fraction:
        return self.binding.headroom


def effective_limits(quotas: Iterable[Mapping[str, Any]], pod_spec: Any | None = None, *,
                     match_all: bool = False) -> tuple[dict[str, KeyLimit], list[str]]:
    """Per key, the effective limit over the quotas that constrain the object, and the names of quotas skipped for
    unreadable scopes or amounts.

    Each quota is `{"name", "hard", "used", "spec"}` (the spec carries `scopes`/`scopeSelector`). `pod_spec` is the
    pod's spec (None: not a pod). `match_all` counts every quota whatever its scope (the namespace's overall view)."""
    per_key: dict[str, list[QuotaLimit]] = {}
    unreadable: list[str] = []
    for quota in quotas:
        name = as_str(quota.get("name")) or "?"
        spec = as_dict(quota.get("spec"))
        problem = quota_scope_problem(spec)
        if problem:
            unreadable.append(name)
            continue
        if not match_all and not scope_matches_pod(spec, pod_spec):
            continue
        used = as_dict(quota.get("used"))
        scope = quota_scope_text(spec)
        for key, hard_value in as_dict(quota.get("hard")).items():
            hard, consumed = quantity_or_none(hard_value), quantity_or_none(used.get(key, 0))
            if hard is None or consumed is None:
                unreadable.append(name)
                continue
            per_key.setdefault(key, []).append(QuotaLimit(name, hard, consumed, scope))
    return ({key: KeyLimit(key, tuple(sorted(found, key=lambda q: q.quota))) for key, found in sorted(per_key.items())},
            sorted(set(unreadable)))


def limit_range_defaults(limit_ranges: Iterable[Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The Container (`default`, `defaultRequest`) pairs of LimitRange specs, in order; malformed items skipped."""
    out = []
    for spec in limit_ranges:
        for item in as_list(as_dict(spec).get("limits")):
            item = as_dict(item)
            if item.get("type") == "Container" and (item.get("default") or item.get("defaultRequest")):
                default = {k: v for k, v in as_dict(item.get("default")).items() if quantity_or_none(v) is not None}
                request = {k: v for k, v in as_dict(item.get("defaultRequest")).items()
                           if quantity_or_none(v) is not None}
                if default or request:
                    out.append((default, {**default, **request}))
    return out


def with_limit_range_defaults(pod_spec: Any, defaults: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """A copy of the pod spec with the LimitRange defaults applied (the input is left alone). Returns the spec
    itself when there is nothing to default."""
    spec = as_dict(pod_spec)
    if not defaults:
        return spec
    out = dict(spec)
    for group in ("initContainers", "containers"):
        if group not in spec:
            continue
        containers = []
        for container in as_list(spec.get(group)):
            if not isinstance(container, dict):
                containers.append(container)
                continue
            resources = as_dict(container.get("resources"))
            limits, requests = dict(as_dict(resources.get("limits"))), dict(as_dict(resources.get("requests")))
            for name, value in limits.items():
                requests.setdefault(name, value)
            for default, default_request in defaults:
                for name, value in default.items():
                    limits.setdefault(name, value)
                for name, value in default_request.items():
                    requests.setdefault(name, value)
            defaulted = {**resources, **({"limits": limits} if limits else {}),
                         **({"requests": requests} if requests else {})}
            containers.append({**container, "resources": defaulted})
        out[group] = containers
    return out
