"""Layer 4: does the manifest fit the ResourceQuotas of its namespaces (hard - used), key by key?

What is counted (Kubernetes' quota evaluators, kubernetes-gpu-facts §1.6):
- pods: `pods`/`count/pods`, `requests.cpu`/`cpu`, `requests.memory`/`memory`, `limits.*`, `requests.<extended>`
  from the effective pod request; a Job counts its pods that run at once (parallelism, capped by completions);
- `count/jobs.batch`, `count/resourceclaims.resource.k8s.io`, `count/resourceclaimtemplates.resource.k8s.io`;
- DRA devices per claim and class: `<class>.deviceclass.resource.k8s.io/devices`,
  `requests.deviceclass.resource.kubernetes.io/<class>` and `requests.<extendedResourceName>` of the class.
  ExactCount adds `count`, All adds 32 (the worst case), firstAvailable adds per class its largest subrequest.
  A standalone ResourceClaim counts once; a template counts once per pod that uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
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
from inventory.k8s.semantics import as_dict, as_list, as_str
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
class _Demand:
    amounts: dict[str, Fraction] = field(default_factory=dict)
    sources: dict[str, list[int]] = field(default_factory=dict)  # key → contributing document indexes
    notes: list[str] = field(default_factory=list)
    first_index: int = 0
    uncounted_templates: list[tuple[int, str]] = field(default_factory=list)
    holders: list[PodHolder] = field(default_factory=list)

    def add(self, key: str, amount: Fraction | int, index: int) -> None:
        if amount <= 0:
            return
        self.amounts[key] = self.amounts.get(key, Fraction(0)) + amount
        sources = self.sources.setdefault(key, [])
        if index not in sources:
            sources.append(index)


def _device_keys(class_name: str, context: ValidationContext) -> list[str]:
    keys = [f"{class_name}.deviceclass.resource.k8s.io/devices",
            f"requests.deviceclass.resource.kubernetes.io/{class_name}"]
    extended = class_extended_resource_name((context.device_classes or {}).get(class_name))
    if extended:
        keys.append(f"requests.{extended}")
    return keys


def _add_claim(demand: _Demand, spec: dict[str, Any], times: int, index: int, context: ValidationContext) -> None:
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
        demand.holders.append(holder)
        pods, index = holder.pods, holder.index
        if holder.kind == "Job":
            demand.add("count/jobs.batch", 1, index)
            job_spec = as_dict(holder.document.get("spec"))
            parallelism = job_spec.get("parallelism", 1)
            note = (f"Job {show(name_of(holder.document))} counts {pods} pod(s) at a time (parallelism "
                    f"{plain(parallelism)}")
            note += ", capped by completions)" if "completions" in job_spec else ")"
            demand.notes.append(note)
        demand.add("pods", pods, index)
        requests, limits = pod_resource_totals(holder.spec)
        for name, amount in requests.items():
            if name in ("cpu", "memory", "ephemeral-storage") or name.startswith("hugepages-"):
                demand.add(f"requests.{name}", amount * pods, index)
        for name, amount in limits.items():
            if name in ("cpu", "memory", "ephemeral-storage"):
                demand.add(f"limits.{name}", amount * pods, index)
        for name, amount in pod_extended_requests({"spec": holder.spec}).items():
            demand.add(f"requests.{name}", amount * pods, index)
        for entry in as_list(holder.spec.get("resourceClaims")):
            template_name = as_str(as_dict(entry).get("resourceClaimTemplateName"))
            if not template_name:
                continue  # a named ResourceClaim is counted once, as its own document (or already in `used`)
            spec = manifest.templates.get((holder.namespace, template_name))
            if spec is None:
                demand.uncounted_templates.append((index, template_name))
                continue
            _add_claim(demand, spec, pods, index, context)
    for index, document in claims:
        namespace = namespace_of(document, context.default_namespace)
        demand = demand_for(namespace, index)
        kind = type_of(document)
        if kind == CLAIM:
            _add_claim(demand, as_dict(document.get("spec")), 1, index, context)
        else:
            demand.add(COUNT_KEYS[CLAIM_TEMPLATE], 1, index)
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
        for quota in quotas:
            applied |= _compare(namespace, quota, demand, findings)
            findings += _required_resources(quota, demand)
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


def _compare(namespace: str, quota: dict[str, Any], demand: _Demand, findings: list[Finding]) -> bool:
    name = plain(as_str(quota.get("name")) or "?")
    hard, used = as_dict(quota.get("hard")), as_dict(quota.get("used"))
    scoped = bool(quota.get("scoped"))
    applied = False
    notes = "; ".join(demand.notes)
    for key, hard_value in sorted(hard.items()):
        need = demand.amounts.get(ALIASES.get(key, key), Fraction(0))
        if need <= 0:
            continue
        applied = True
        limit = quantity(hard_value)
        consumed = quantity(used.get(key, 0))
        path = document_path(demand.sources.get(ALIASES.get(key, key), [demand.first_index])[0])
        if limit is None or consumed is None:
            findings.append(_finding("warning", path, f"ResourceQuota {name} has an unreadable {plain(key)}; not "
                                     "checked", "quota-unreadable"))
            continue
        left = limit - consumed
        numbers = (f"{plain(key)} needs {_format(key, need)}, {_format(key, max(left, Fraction(0)))} of "
                   f"{_format(key, limit)} left")
        if notes and key not in ("count/jobs.batch", COUNT_KEYS[CLAIM_TEMPLATE]):
            numbers += f" ({notes})"
        if need > left:
            if scoped:
                findings.append(_finding(
                    "warning", path, f"ResourceQuota {name} in {show(namespace)} (scoped, may not apply): {numbers}",
                    "quota-may-be-exceeded"))
                continue
            findings.append(_finding(
                "error", path, f"ResourceQuota {name} in {show(namespace)}: {numbers}", "quota-exceeded",
                "ask for fewer units, wait for running workloads to finish, or request more quota in the portal",
            ))
        else:
            findings.append(_finding("info", path, f"ResourceQuota {name}: {numbers}", "quota-fits"))
    return applied


def _required_resources(quota: dict[str, Any], demand: _Demand) -> list[Finding]:
    """A quota on cpu/memory makes the API server reject pods whose containers do not state that resource."""
    hard = as_dict(quota.get("hard"))
    name = plain(as_str(quota.get("name")) or "?")
    findings = []
    rules: list[tuple[str, Callable[[dict[str, Any], dict[str, Any]], bool]]] = []
    for resource in ("cpu", "memory"):
        if resource in hard or f"requests.{resource}" in hard:
            rules.append((f"requests.{resource}", lambda req, lim, r=resource: r in req or r in lim))
        if f"limits.{resource}" in hard:
            rules.append((f"limits.{resource}", lambda _req, lim, r=resource: r in lim))
    for holder in demand.holders:
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
