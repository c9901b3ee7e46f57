"""Kueue's rules, once (kueue.x-k8s.io v1beta2 shape): a ClusterQueue's quota table and usage, a Workload's state
from its conditions and what all its pods request together. Pure and tolerant of malformed input: every problem is
reported in `problems`, nothing raises.

Facts (Kueue's apis/kueue/v1beta2): `spec.resourceGroups[].flavors[].resources[]` carry `nominalQuota` and the
optional `borrowingLimit` / `lendingLimit`; `status.flavorsUsage[].resources[]` carry `total` and `borrowed`. A
Workload's conditions `QuotaReserved`, `Admitted`, `Evicted`, `Finished` say where it stands; `status.admission`
names the ClusterQueue and, per pod set, the flavor chosen for each resource.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from inventory.k8s.semantics.quantity import format_quantity, quantity_or_none
from inventory.k8s.semantics.requests import pod_resources
from inventory.k8s.semantics.values import as_dict, as_list

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One (flavor, resource) cell of a ClusterQueue's quota table; limits None = not set (unlimited)."""

    flavor: str
    resource: str
    nominal: Fraction
    borrowing_limit: Fraction | None = None
    lending_limit: Fraction | None = None
    group: int = 0  # index of its resource group (flavors are tried in order within a group)

    def to_json(self) -> dict[str, str | int | None]:
        return {
            "group": self.group,
            "flavor": self.flavor,
            "resource": self.resource,
            "nominal": format_quantity(self.nominal),
            "borrowingLimit": None if self.borrowing_limit is None else format_quantity(self.borrowing_limit),
            "lendingLimit": None if self.lending_limit is None else format_quantity(self.lending_limit),
        }


def _quantity(value: Any, where: str, problems: list[str], *, optional: bool = False) -> Fraction | None:
    if value is None and optional:
        return None
    parsed = quantity_or_none(value)
    if parsed is None or parsed < 0:
        problems.append(f"{where}: not a quantity: {str(value)[:40]!r}")
        return None
    return parsed


def cluster_queue_quotas(spec: Any, problems: list[str]) -> list[FlavorQuota]:
    """The quota table of a ClusterQueue (or Cohort) spec, in spec order. A resource a flavor lists but its group
    does not cover, or a covered resource a flavor leaves out, is a problem (Kueue refuses such a queue)."""
    out: list[FlavorQuota] = []
    for g, group in enumerate(as_list(as_dict(spec).get("resourceGroups"))):
        covered = [str(r) for r in as_list(as_dict(group).get("coveredResources"))]
        for f, flavor in enumerate(as_list(as_dict(group).get("flavors"))):
            name = str(as_dict(flavor).get("name") or "")
            where = f"spec.resourceGroups[{g}].flavors[{f}]"
            if not name:
                problems.append(f"{where}.name: missing")
                continue
            listed = []
            for r, item in enumerate(as_list(as_dict(flavor).get("resources"))):
                item = as_dict(item)
                resource = str(item.get("name") or "")
                cell = f"{where}.resources[{r}]"
                nominal = _quantity(item.get("nominalQuota", "0"), f"{cell}.nominalQuota", problems)
                if not resource or nominal is None:
                    continue
                listed.append(resource)
                if covered and resource not in covered:
                    problems.append(f"{cell}: {resource} is not among the group's coveredResources")
                out.append(FlavorQuota(
                    name, resource, nominal,
                    _quantity(item.get("borrowingLimit"), f"{cell}.borrowingLimit", problems, optional=True),
                    _quantity(item.get("lendingLimit"), f"{cell}.lendingLimit", problems, optional=True),
                    g,
                ))
            missing = [r for r in covered if r not in listed]
            if missing:
                problems.append(f"{where} ({name}): no quota for covered {', '.join(missing)}")
    return out


def flavor_usage(status: Any, problems: list[str]) -> list[dict[str, str]]:
    """`status.flavorsUsage` as a list of {flavor, resource, total, borrowed} (quantity strings, normalised)."""
    out: list[dict[str, str]] = []
    for f, flavor in enumerate(as_list(as_dict(status).get("flavorsUsage"))):
        name = str(as_dict(flavor).get("name") or "")
        for r, item in enumerate(as_list(as_dict(flavor).get("resources"))):
            item = as_dict(item)
            where = f"status.flavorsUsage[{f}].resources[{r}]"
            total = _quantity(item.get("total", "0"), f"{where}.total", problems)
            borrowed = _quantity(item.get("borrowed", "0"), f"{where}.borrowed", problems)
            if name and item.get("name") and total is not None:
                out.append({"flavor": name, "resource": str(item["name"]), "total": format_quantity(total),
                            "borrowed": format_quantity(borrowed or Fraction(0))})
    return out


@dataclass(frozen=True, slots=True)
class WorkloadState:
    state: str  # pending | quota_reserved | admitted | evicted | finished
    reason: str = ""
    message: str = ""


_STATE_ORDER = (("Finished", "finished"), ("Evicted", "evicted"), ("Admitted", "admitted"),
                ("QuotaReserved", "quota_reserved"))


def workload_state(status: Any) -> WorkloadState:
    """Where a Workload stands, from its conditions: the first of Finished, Evicted, Admitted, QuotaReserved that is
    True; otherwise pending, with the reason and message of the QuotaReserved=False condition (why Kueue could not
    reserve quota: "couldn't assign flavors to pod set main: insufficient unused quota …")."""
    conditions = {str(as_dict(c).get("type")): as_dict(c) for c in as_list(as_dict(status).get("conditions"))}
    for condition_type, state in _STATE_ORDER:
        condition = conditions.get(condition_type)
        if condition and condition.get("status") == "True":
            return WorkloadState(state, str(condition.get("reason") or ""), str(condition.get("message") or ""))
    waiting = conditions.get("QuotaReserved") or {}
    return WorkloadState("pending", str(waiting.get("reason") or ""), str(waiting.get("message") or ""))


def workload_requests(spec: Any, problems: list[str]) -> tuple[int, dict[str, Fraction]]:
    """(pods, total requests) of a Workload: each pod set's effective pod requests times its count, summed."""
    pods = 0
    totals: dict[str, Fraction] = {}
    for i, pod_set in enumerate(as_list(as_dict(spec).get("podSets"))):
        pod_set = as_dict(pod_set)
        count = pod_set.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            problems.append(f"spec.podSets[{i}].count: not a count: {str(count)[:20]!r}")
            continue
        resources = pod_resources(as_dict(pod_set.get("template")))
        problems.extend(f"spec.podSets[{i}]: {message}" for message in resources.messages)
        pods += count
        for name, amount in resources.requests.items():
            totals[name] = totals.get(name, Fraction(0)) + amount * count
    return pods, totals


def topology_levels(spec: Any, problems: list[str]) -> list[str]:
    """A Topology's levels (`spec.levels[].nodeLabel`), widest domain first. A level without a label, a repeated
    label or kubernetes.io/hostname above the last level is a problem (Kueue's validation refuses them); the usable
    levels are kept in their order."""
    raw = as_dict(spec).get("levels")
    if not isinstance(raw, list) or not raw:
        problems.append("spec.levels: missing or not a list")
        raw = []
    levels: list[str] = []
    for index, level in enumerate(raw):
        label = as_dict(level).get("nodeLabel")
        if not isinstance(label, str) or not label or len(label) > 316:
            problems.append(f"spec.levels[{index}].nodeLabel: missing or not a label")
        elif label in levels:
            problems.append(f"spec.levels[{index}].nodeLabel: {label} repeats a level")
        else:
            levels.append(label)
    if HOSTNAME_LABEL in levels[:-1]:
        problems.append(f"spec.levels: {HOSTNAME_LABEL} is not the last level")
    return levels


def quotas_from_json(cells: Any) -> list[FlavorQuota]:
    """The stored quota table (`FlavorQuota.to_json` rows) back as FlavorQuotas; malformed rows are skipped."""
    out: list[FlavorQuota] = []
    for cell in as_list(cells):
        cell = as_dict(cell)
        nominal = quantity_or_none(cell.get("nominal"))
        if not cell.get("flavor") or not cell.get("resource") or nominal is None:
            continue
        group = cell.get("group")
        out.append(FlavorQuota(str(cell["flavor"]), str(cell["resource"]), nominal,
                               quantity_or_none(cell.get("borrowingLimit")), quantity_or_none(cell.get("lendingLimit")),
                               group if isinstance(group, int) and not isinstance(group, bool) else 0))
    return out


def usage_from_json(cells: Any) -> dict[tuple[str, str], Fraction]:
    """(flavor, resource) → total used, from the stored `flavor_usage` rows."""
    out: dict[tuple[str, str], Fraction] = {}
    for cell in as_list(cells):
        cell = as_dict(cell)
        total = quantity_or_none(cell.get("total"))
        if cell.get("flavor") and cell.get("resource") and total is not None:
            out[(str(cell["flavor"]), str(cell["resource"]))] = total
    return out


@dataclass(frozen=True, slots=True)
class QueueState:
    """One ClusterQueue as admission sees it: its quota table, what it uses, and its cohort."""

    name: str
    quotas: tuple[FlavorQuota, ...]
    used: dict[tuple[str, str], Fraction]
    cohort: str = ""


def borrowable(queue: QueueState, flavor: str, resource: str, cohort: Sequence[QueueState]) -> Fraction | None:
    """What `queue` may borrow for (flavor, resource) now: the unused lendable quota of the other queues of its
    cohort (each lends min(nominal, lendingLimit) minus what it uses), capped by its own borrowingLimit. No cohort:
    0. An approximation of Kueue's accounting: flat cohorts only (a Cohort's own quota and parents are not counted)."""
    if not queue.cohort:
        return Fraction(0)
    pool = Fraction(0)
    for other in cohort:
        if other.name == queue.name or other.cohort != queue.cohort:
            continue
        for cell in other.quotas:
            if cell.flavor == flavor and cell.resource == resource:
                lendable = cell.nominal if cell.lending_limit is None else min(cell.nominal, cell.lending_limit)
                pool += max(Fraction(0), lendable - other.used.get((flavor, resource), Fraction(0)))
    own = next((c for c in queue.quotas if c.flavor == flavor and c.resource == resource), None)
    if own is not None and own.borrowing_limit is not None:
        pool = min(pool, own.borrowing_limit)
    return pool


@dataclass(frozen=True, slots=True)
class Shortfall:
    """Why one flavor of a queue cannot take a workload's demand for one resource now."""

    queue: str
    flavor: str
    resource: str
    needed: Fraction
    nominal: Fraction
    used: Fraction
    borrowable: Fraction

    @property
    def missing(self) -> Fraction:
        return max(Fraction(0), self.needed - (self.nominal - self.used + self.borrowable))

    def text(self) -> str:
        return (f"ClusterQueue {self.queue} lacks {format_quantity(self.missing)} {self.resource} in flavor "
                f"{self.flavor} (nominal {format_quantity(self.nominal)}, used {format_quantity(self.used)}, "
                f"borrowable {format_quantity(self.borrowable)})")


@dataclass(frozen=True, slots=True)
class QueueFit:
    """Whether a ClusterQueue can reserve quota for a demand now (Kueue's flavor assignment: per resource group, the
    first flavor in order that holds every demanded resource of the group), and if not, why."""

    fits: bool
    flavors: dict[str, str]  # resource → flavor chosen (when it fits)
    uncovered: tuple[str, ...] = ()  # demanded resources no resource group covers ("unavailable in ClusterQueue")
    shortfalls: tuple[Shortfall, ...] = ()  # per flavor tried, when no flavor of a group fits

    def reasons(self, queue: str) -> list[str]:
        out = [f"resource {r} unavailable in ClusterQueue {queue} (no resource group covers it)"
               for r in self.uncovered]
        return out + [s.text() for s in self.shortfalls]


def queue_fit(queue: QueueState, demand: dict[str, Fraction], cohort: Sequence[QueueState] = ()) -> QueueFit:
    """Can `queue` reserve `demand` (resource → total amount of all pods that start together) now? `cohort`: the
    cluster's ClusterQueues (those of other cohorts are ignored by `borrowable`)."""
    wanted = {name: amount for name, amount in demand.items() if amount > 0}
    groups: dict[int, list[FlavorQuota]] = {}
    for cell in queue.quotas:
        groups.setdefault(cell.group, []).append(cell)
    covered = {cell.resource for cell in queue.quotas}
    uncovered = tuple(sorted(r for r in wanted if r not in covered))
    chosen: dict[str, str] = {}
    shortfalls: list[Shortfall] = []
    for cells in groups.values():
        resources = sorted({c.resource for c in cells} & set(wanted))
        if not resources:
            continue
        flavors = list(dict.fromkeys(c.flavor for c in cells))
        tried: list[Shortfall] = []
        for flavor in flavors:
            short = []
            for resource in resources:
                found = next((c for c in cells if c.flavor == flavor and c.resource == resource), None)
                used = queue.used.get((flavor, resource), Fraction(0))
                nominal = found.nominal if found else Fraction(0)
                more = borrowable(queue, flavor, resource, cohort) or Fraction(0)
                gap = Shortfall(queue.name, flavor, resource, wanted[resource], nominal, used, more)
                if gap.missing > 0:
                    short.append(gap)
            if not short:
                chosen.update(dict.fromkeys(resources, flavor))
                break
            tried += short
        else:
            shortfalls += tried
    return QueueFit(not uncovered and not shortfalls, chosen if not uncovered and not shortfalls else {}, uncovered,
                    tuple(shortfalls))


def with_nominal_quotas(spec: Any, nominal: dict[tuple[str, str], Fraction],
                        ) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """A ClusterQueue spec's `resourceGroups` (a copy) with the nominal quota of the given (flavor, resource) cells
    replaced, and the cells it does not have. Kueue declares `resourceGroups` an atomic list (server-side apply owns
    it whole), so a writer sends the whole list: every other field of every group is kept as it is."""
    groups = copy.deepcopy(as_list(as_dict(spec).get("resourceGroups")))
    found: set[tuple[str, str]] = set()
    for group in groups:
        for flavor in as_list(as_dict(group).get("flavors")):
            for resource in as_list(as_dict(flavor).get("resources")):
                if not isinstance(resource, dict):
                    continue
                cell = (str(as_dict(flavor).get("name") or ""), str(resource.get("name") or ""))
                if cell in nominal:
                    resource["nominalQuota"] = format_quantity(nominal[cell])
                    found.add(cell)
    return groups, sorted(set(nominal) - found)
