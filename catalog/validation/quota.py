"""Layer 4: does the manifest fit the ResourceQuotas of its namespaces (hard - used), key by key?

What is counted (Kubernetes' quota evaluators, kubernetes-gpu-facts §1.6):
- pods: `pods`/`count/pods`, `requests.cpu`/`cpu`, `requests.memory`/`memory`, `limits.*`, `requests.<extended>`
  from the effective pod request; a Job counts its pods that run at once (parallelism, capped by completions);
- `count/jobs.batch`, `count/resourceclaims.resource.k8s.io`, `count/resourceclaimtemplates.resource.k8s.io`;
- DRA devices per claim and class: `<class>.deviceclass.resource.k8s.io/devices`,
  `requests.deviceclass.resource.kubernetes.io/<class>` and `requests.<extendedResourceName>` of the class.
  ExactCount adds `count`, All adds 32 (the worst case), firstAvailable adds per class its largest subrequest.
  A standalone ResourceClaim counts once; a template counts once per pod that uses it.

Pods are counted after the namespace's LimitRange defaults (the API server's LimitRanger runs before quota): a
container without a cpu request gets the LimitRange's `defaultRequest`, and a quota on cpu then counts it.
Every ResourceQuota of the namespace whose scope matches is checked (inventory/k8s/semantics/quota.py: scopes and
`scopeSelector` — Terminating, BestEffort, PriorityClass… — decide per pod; Jobs and ResourceClaims, templates'
claims included, are constrained by unscoped quotas only). Where several quotas constrain one key the tightest
binds: the layer names it and the effective limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import partial
from typing import Any

from catalog.validation.context import ValidationContext, class_extended_resource_name
from catalog.validation.findings import Finding, document_path, plain, show
from catalog.validation.objects import (
    CLAIM,
    CLAIM_TEMPLATE,
    PodHolder,
    containers,
    device_demand,
    name_of,
    namespace_of,
    pod_resource_totals,
    type_of,
)
from catalog.validation.semantics import Manifest
from inventory.k8s.semantics import (
    KeyLimit,
    QuotaLimit,
    as_dict,
    as_list,
    as_str,
    quota_scope_problem,
    quota_scope_text,
    scope_matches_pod,
    with_limit_range_defaults,
)
from inventory.k8s.semantics import quantity_or_none as quantity
from inventory.podstatus import pod_extended_requests

ALIASES = {
    "cpu": "requests.cpu",
    "memory": "requests.memory",
    "ephemeral-storage": "requests.ephemeral-storage",
    "count/pods": "pods",
}
COUNT_KEYS = {
    CLAIM: "count/resourceclaims.resource.k8s.io",
    CLAIM_TEMPLATE: "count/resourceclaimtemplates.resource.k8s.io",
}
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


@dataclass
class _Part:
    """What one pod (or, `pod_spec` None, one object that is not a pod: a Job, a claim) charges to a quota."""

    pod_spec: dict[str, Any] | None
    amounts: dict[str, Fraction] = field(default_factory=dict)
    sources: dict[str, list[int]] = field(default_factory=dict)  # key → contributing document indexes

    def add(self, key: str, amount: Fraction | int, index: int) -> None:
        if amount <= 0:
            return
        self.amounts[key] = self.amounts.get(key, Fraction(0)) + amount
        sources = self.sources.setdefault(key, [])
        if index not in sources:
            sources.append(index)


@dataclass
class _Demand:
    parts: list[_Part] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_index: int = 0
    uncounted_templates: list[tuple[int, str]] = field(default_factory=list)
    holders: list[PodHolder] = field(default_factory=list)

    def part(self, pod_spec: dict[str, Any] | None) -> _Part:
        self.parts.append(_Part(pod_spec))
        return self.parts[-1]

    def for_quota(self, spec: dict[str, Any]) -> _Part:
        """The demand a quota with this spec sees: the parts its scope matches, summed."""
        merged = _Part(None)
        for part in self.parts:
            if scope_matches_pod(spec, part.pod_spec):
                for key, amount in part.amounts.items():
                    merged.amounts[key] = merged.amounts.get(key, Fraction(0)) + amount
                    sources = merged.sources.setdefault(key, [])
                    sources += [index for index in part.sources[key] if index not in sources]
        return merged


def _device_keys(class_name: str, context: ValidationContext) -> list[str]:
    keys = [f"{class_name}.deviceclass.resource.k8s.io/devices",
            f"requests.deviceclass.resource.kubernetes.io/{class_name}"]
    extended = class_extended_resource_name((context.device_classes or {}).get(class_name))
    if extended:
        keys.append(f"requests.{extended}")
    return keys


def _add_claim(demand: _Part, spec: dict[str, Any], times: int, index: int, context: ValidationContext) -> None:
    demand.add(COUNT_KEYS[CLAIM], times, index)
    for class_name, devices in device_demand(spec).items():
        for key in _device_keys(class_name, context):
            demand.add(key, devices * times, index)


def _collect(
    holders: list[PodHolder], claims: list[tuple[int, dict[str, Any]]], context: ValidationContext, manifest: Manifest
) -> dict[str, _Demand]:
    by_namespace: dict[str, _Demand] = {}

    def demand_for(namespace: str, index: int) -> _Demand:
        if namespace not in by_namespace:
            by_namespace[namespace] = _Demand(first_index=index)
        return by_namespace[namespace]

    for holder in holders:
        demand = demand_for(holder.namespace, holder.index)
        # What the API server charges: the pod after the namespace's LimitRange defaults (LimitRanger runs first).
        holder = replace(holder, spec=with_limit_range_defaults(
            holder.spec, (context.limit_ranges or {}).get(holder.namespace, [])))
        demand.holders.append(holder)
        pods, index = holder.pods, holder.index
        pod_part, objects = demand.part(holder.spec), demand.part(None)  # Jobs and claims: unscoped quotas only
        if holder.kind == "Job":
            objects.add("count/jobs.batch", 1, index)
            job_spec = as_dict(holder.document.get("spec"))
            parallelism = job_spec.get("parallelism", 1)
            note = (f"Job {show(name_of(holder.document))} counts {pods} pod(s) at a time (parallelism "
                    f"{plain(parallelism)}")
            note += ", capped by completions)" if "completions" in job_spec else ")"
            demand.notes.append(note)
        pod_part.add("pods", pods, index)
        requests, limits = pod_resource_totals(holder.spec)
        for name, amount in requests.items():
            if name in ("cpu", "memory", "ephemeral-storage") or name.startswith("hugepages-"):
                pod_part.add(f"requests.{name}", amount * pods, index)
        for name, amount in limits.items():
            if name in ("cpu", "memory", "ephemeral-storage"):
                pod_part.add(f"limits.{name}", amount * pods, index)
        for name, units in pod_extended_requests({"spec": holder.spec}).items():
            pod_part.add(f"requests.{name}", units * pods, index)
        for entry in as_list(holder.spec.get("resourceClaims")):
            template_name = as_str(as_dict(entry).get("resourceClaimTemplateName"))
            if not template_name:
                continue  # a named ResourceClaim is counted once, as its own document (or already in `used`)
            spec = manifest.templates.get((holder.namespace, template_name))
            if spec is None:
                demand.uncounted_templates.append((index, template_name))
                continue
            _add_claim(objects, spec, pods, index, context)
    for index, document in claims:
        namespace = namespace_of(document, context.default_namespace)
        part = demand_for(namespace, index).part(None)
        kind = type_of(document)
        if kind == CLAIM:
            _add_claim(part, as_dict(document.get("spec")), 1, index, context)
        else:
            part.add(COUNT_KEYS[CLAIM_TEMPLATE], 1, index)
    return by_namespace


def _format(key: str, value: Fraction) -> str:
    if value.denominator == 1:
        number = int(value)
        if any(word in key for word in ("memory", "storage", "hugepages")) and number:
            for suffix, size in _BINARY:
                if number % size == 0:
                    return f"{number // size}{suffix}"
        return str(number)
    if "cpu" in key and (value * 1000).denominator == 1:
        return f"{int(value * 1000)}m"
    return f"{float(value):g}"


def _finding(severity: str, path: str, message: str, code: str, fix: str = "") -> Finding:
    return Finding("quota", severity, path, message, fix, code)


def check_quota(
    holders: list[PodHolder], claims: list[tuple[int, dict[str, Any]]], context: ValidationContext, manifest: Manifest
) -> list[Finding]:
    if context.quotas is None:
        return []
    findings: list[Finding] = []
    for namespace, demand in _collect(holders, claims, context, manifest).items():
        quotas = [as_dict(q) for q in as_list(context.quotas.get(namespace))]
        applied = False
        limits: dict[str, list[QuotaLimit]] = {}
        for quota in quotas:
            spec = as_dict(quota.get("spec"))
            problem = quota_scope_problem(spec)
            if problem:
                findings.append(_finding("warning", document_path(demand.first_index),
                                         f"ResourceQuota {plain(as_str(quota.get('name')) or '?')} has an unreadable "
                                         f"scope ({plain(problem)}); not checked", "quota-unreadable"))
                continue
            applied |= _compare(namespace, quota, demand.for_quota(spec), demand.notes, findings, limits)
            findings += _required_resources(quota, [h for h in demand.holders if scope_matches_pod(spec, h.spec)])
        findings += _effective(namespace, limits, demand)
        if not applied:
            findings.append(_finding("info", document_path(demand.first_index),
                                     f"no ResourceQuota in namespace {show(namespace)} limits what this manifest "
                                     "asks for", "no-quota"))
        if demand.uncounted_templates and any(
            ".deviceclass." in key for quota in quotas for key in as_dict(quota.get("hard"))
        ):
            for index, name in demand.uncounted_templates:
                findings.append(_finding("info", document_path(index),
                                         f"ResourceClaimTemplate {show(name)} is not in this manifest: its devices "
                                         "are not counted against the quota here", "template-not-counted"))
    return findings


def _effective(namespace: str, limits: dict[str, list[QuotaLimit]], demand: _Demand) -> list[Finding]:
    """Where several quotas constrain one key, the effective limit and the quota that binds (refuses first)."""
    findings = []
    for key, found in sorted(limits.items()):
        if len(found) < 2:
            continue
        effective = KeyLimit(key, tuple(found))
        binding = effective.binding
        others = ", ".join(f"{plain(q.quota)} {_format(key, q.headroom)} of {_format(key, q.hard)}"
                           for q in found if q is not binding)
        findings.append(_finding(
            "info", document_path(demand.first_index),
            f"{plain(key)} in {show(namespace)}: {len(found)} ResourceQuotas apply, the tightest binds — "
            f"ResourceQuota {plain(binding.quota)} with {_format(key, binding.headroom)} of "
            f"{_format(key, binding.hard)} left (also {others})", "quota-effective"))
    return findings


def _compare(namespace: str, quota: dict[str, Any], demand: _Part, notes_list: list[str], findings: list[Finding],
             limits: dict[str, list[QuotaLimit]]) -> bool:
    name = plain(as_str(quota.get("name")) or "?")
    hard, used = as_dict(quota.get("hard")), as_dict(quota.get("used"))
    scope = quota_scope_text(quota.get("spec"))
    shown = f"{name} (scope {plain(scope)})" if scope else name
    applied = False
    notes = "; ".join(notes_list)
    for key, hard_value in sorted(hard.items()):
        need = demand.amounts.get(ALIASES.get(key, key), Fraction(0))
        if need <= 0:
            continue
        applied = True
        limit = quantity(hard_value)
        consumed = quantity(used.get(key, 0))
        path = document_path(demand.sources.get(ALIASES.get(key, key), [0])[0])
        if limit is None or consumed is None:
            findings.append(_finding("warning", path, f"ResourceQuota {name} has an unreadable {plain(key)}; not "
                                     "checked", "quota-unreadable"))
            continue
        limits.setdefault(ALIASES.get(key, key), []).append(QuotaLimit(name, limit, consumed, scope))
        left = limit - consumed
        numbers = (f"{plain(key)} needs {_format(key, need)}, {_format(key, max(left, Fraction(0)))} of "
                   f"{_format(key, limit)} left")
        if notes and key not in ("count/jobs.batch", COUNT_KEYS[CLAIM_TEMPLATE]):
            numbers += f" ({notes})"
        if need > left:
            findings.append(_finding(
                "error", path, f"ResourceQuota {shown} in {show(namespace)}: {numbers}", "quota-exceeded",
                "ask for fewer units, wait for running workloads to finish, or request more quota in the portal",
            ))
        else:
            findings.append(_finding("info", path, f"ResourceQuota {shown}: {numbers}", "quota-fits"))
    return applied


def _sets_request_or_limit(resource: str, requests: dict[str, Any], limits: dict[str, Any]) -> bool:
    return resource in requests or resource in limits  # a limit alone defaults the request to it


def _sets_limit(resource: str, _requests: dict[str, Any], limits: dict[str, Any]) -> bool:
    return resource in limits


def _required_resources(quota: dict[str, Any], holders: list[PodHolder]) -> list[Finding]:
    """A quota on cpu/memory makes the API server reject pods whose containers do not state that resource."""
    hard = as_dict(quota.get("hard"))
    name = plain(as_str(quota.get("name")) or "?")
    findings = []
    rules: list[tuple[str, Callable[[dict[str, Any], dict[str, Any]], bool]]] = []
    for resource in ("cpu", "memory"):
        if resource in hard or f"requests.{resource}" in hard:
            rules.append((f"requests.{resource}", partial(_sets_request_or_limit, resource)))
        if f"limits.{resource}" in hard:
            rules.append((f"limits.{resource}", partial(_sets_limit, resource)))
    for holder in holders:
        for key, states in rules:
            missing = [
                path for _what, container, path in containers(holder.spec, holder.spec_path)
                if not states(as_dict(as_dict(container.get("resources")).get("requests")),
                              as_dict(as_dict(container.get("resources")).get("limits")))
            ]
            if missing:
                findings.append(_finding(
                    "warning", missing[0],
                    f"ResourceQuota {name} tracks {key}: the API server rejects pods whose containers do not set it, "
                    "unless a LimitRange supplies a default", "quota-requires-resource",
                    f"set {key.replace('.', ' ', 1)} on every container",
                ))
    return findings
