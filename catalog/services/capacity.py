"""Live capacity per offering and cluster, and its hourly history.

Definitions (docs/catalog.md explains them with examples). Every allocatable unit is exactly one of held, free or
unknown, so `held + free + unknown = allocatable` on every page and in the API:
- total units: every unit the devices report (capacity); allocatable: the healthy ones (unhealthy and tainted units
  are in total units only);
- free: allocatable units nobody holds, on complete pools, not blocked by shared counters (the inventory's `free`);
- unknown: allocatable units of incomplete DRA pools that no claim holds (we cannot tell whether they are free);
- held: the remaining allocatable units — held by a pod's request or a claim (never capacity - allocatable), or
  `blocked`: a DRA partition or whole card whose shared counters other allocations on the same card consumed. A pod
  or claim still holding a unit that turned unhealthy holds a unit outside allocatable: the inventory reports it
  (overcommitted), the offering's held does not;
- feasible nodes: schedulable nodes (Ready, not cordoned) whose blocking taints the offering's tolerations
  tolerate and that have at least one allocatable unit;
- largest placeable: the most units one pod can get on one feasible node right now;
- fragmentation: 1 - largest placeable / free (0 when nothing is free): the share of the free units that the
  largest single request cannot reach. 8 free cards spread 2 per node over 4 nodes: largest placeable 2,
  fragmentation 1 - 2/8 = 75 %; all 8 on one node: 0 %; free units only on nodes the offering cannot use: 100 %;
- reference request R: the largest of the offering's common request sizes (default 1);
- stranded: free units that no R-sized request can use — free units on nodes that are not feasible, plus on each
  feasible node the remainder `free mod R` ("8 free GPUs, but no 8-GPU pod fits": 8 stranded for R = 8);
- contested: free DRA units on physical cards that also carry free units of another offering (a whole card and
  its partitions consume the same counters: either/or, never both). `free_cards` counts each card once;
- pending pods: Pending, unbound pods that ask for the offering (its extended resource, with a node selector that
  does not contradict the offering's, or a claim/template naming its DeviceClass);
- capacity changing: a node of the offering is being (or failed to be) repartitioned — its GPU Operator label
  `nvidia.com/mig.config.state` is pending, rebooting or failed — so its units are about to change;
- granted quota: the sum over the cluster's ResourceQuotas of `hard` for the offering's quota key
  (`requests.<resource>` or `<class>.deviceclass.resource.k8s.io/devices`), compared against the allocatable units
  of everything that key counts (quota_capacity, shown as "physical capacity"): every device-plugin unit of the
  resource plus, with DRAExtendedResource, every device of the DeviceClass that serves the resource name; for a
  class key, every device of the class. The ratio is the oversubscription. Pages read it from here, never recompute
  it, so two pages always agree until the next recomputation.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from catalog.models import DRA_KINDS, CapacitySample, Offering, OfferingCapacity
from catalog.services.matching import ClusterDevices, Match, NodeFacts
from inventory.k8s.semantics import labels_match, parse_quantity, untolerated_taints
from inventory.k8s.semantics.values import as_dict, as_list
from inventory.models import Cluster, Pod, ResourceClaim, ResourceClaimTemplate, ResourceQuota

logger = logging.getLogger(__name__)

FIGURE_FIELDS = (
    "matched_devices", "feasible_nodes", "total_units", "allocatable", "held", "free", "unknown", "blocked", "cards",
    "free_cards", "contested", "largest_placeable", "stranded", "fragmentation", "pending_pods", "granted_quota",
    "quota_capacity", "selector_errors", "free_by_node", "capacity_changing",
)
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"


def quota_key(offering: Offering) -> str:
    if offering.unit_kind in DRA_KINDS:
        return f"{offering.device_class_name}.deviceclass.resource.k8s.io/devices"
    return f"requests.{offering.resource_name}"


def fragmentation_index(*, largest_placeable: int, free: int) -> float:
    """1 - largest placeable / free (0 when nothing is free): what share of the free units one request cannot get."""
    return round(1 - largest_placeable / free, 4) if free > 0 else 0.0


def reference_request(offering: Offering) -> int:
    sizes = [s for s in (offering.request_sizes or []) if isinstance(s, int) and not isinstance(s, bool) and s > 0]
    return max(sizes, default=1)


def _card_id(device: dict[str, Any]) -> str:
    """The physical card a DRA unit lives on: its counter set if it consumes one, else its parent, else itself."""
    for consumed in device.get("consumes_counters") or []:
        if isinstance(consumed, dict) and consumed.get("counterSet"):
            return f"{device['driver']}/{device['pool']}/{consumed['counterSet']}"
    if device.get("parent"):
        return f"parent/{device['parent']}"
    return str(device["key"])


@dataclass
class Figures:
    values: dict[str, Any]
    free_cards_ids: set[str]


def _figures(offering: Offering, loaded: ClusterDevices, match: Match) -> Figures:
    tolerations = offering.tolerations if isinstance(offering.tolerations, list) else []
    feasible: dict[str, bool] = {}
    for name, node in loaded.nodes.items():
        feasible[name] = node.schedulable and not untolerated_taints(node.taints, tolerations)
    per_node_alloc: dict[str, int] = defaultdict(int)
    per_node_free: dict[str, int] = defaultdict(int)
    v: dict[str, Any] = dict.fromkeys(FIGURE_FIELDS, 0)
    free_card_ids: set[str] = set()
    parents: set[str] = set()
    for device in match.devices:
        allocatable, in_use, free = device["allocatable"], device["in_use"], device["free"]
        v["total_units"] += device["capacity"]
        v["allocatable"] += allocatable
        v["free"] += free
        if device["pool_complete"]:
            held = allocatable - free  # held by a pod or claim, or blocked by shared counters
            # Blocked: held although nobody holds it. A device shared by consumable capacity that still takes a
            # share is free while claims hold it (in use and free), so it is not negatively blocked either.
            v["blocked"] += max(held - min(in_use, allocatable), 0)
        else:
            held = min(in_use, allocatable)  # a claim says so; the rest of an incomplete pool is unknown
            v["unknown"] += allocatable - held - free
        v["held"] += held
        if offering.unit_kind in DRA_KINDS:
            card = _card_id(device)
            parents.add(card)
            if device["free"]:
                free_card_ids.add(card)
        else:
            v["cards"] += device["cards"] or 0
        node = device["node_name"]
        per_node_alloc[node] += device["allocatable"]
        per_node_free[node] += device["free"]
    if offering.unit_kind in DRA_KINDS:
        v["cards"] = float(len(parents))
    r = reference_request(offering)
    free_by_node = {n: f for n, f in sorted(per_node_free.items()) if n and feasible.get(n) and f > 0}
    v["feasible_nodes"] = sum(1 for n, a in per_node_alloc.items() if n and feasible.get(n) and a > 0)
    v["largest_placeable"] = max(free_by_node.values(), default=0)
    v["stranded"] = sum(f for n, f in per_node_free.items() if not (n and feasible.get(n))) + sum(
        f % r for f in free_by_node.values()
    )
    v["fragmentation"] = fragmentation_index(largest_placeable=v["largest_placeable"], free=v["free"])
    v["free_by_node"] = free_by_node
    v["matched_devices"] = len(match.devices)
    v["selector_errors"] = match.selector_errors
    v["free_cards"] = len(free_card_ids)
    v["granted_quota"] = None
    v["capacity_changing"] = any(
        (facts := loaded.nodes.get(name)) is not None
        and facts.labels.get(MIG_CONFIG_STATE_LABEL, "success") != "success"
        for name in match.nodes
    )
    return Figures(v, free_card_ids)


def _quota_totals(cluster: Cluster) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for hard in ResourceQuota.objects.live().filter(cluster=cluster).values_list("hard", flat=True):
        for key, value in (hard or {}).items():
            try:
                totals[key] += int(parse_quantity(value))
            except ValueError:
                continue
    return totals


class _PendingIndex:
    """Pending, unbound pods of a cluster with what they ask for.

    Reads only the parts of the objects it uses: three fields of each pending pod's spec, and the device requests of
    just the claims and templates those pods name (a cluster has thousands of claims, a few pending pods)."""

    def __init__(self, cluster: Cluster) -> None:
        self.pods = [
            {"namespace": ns, "name": name, "extended_requests": extended, "resourceClaims": as_list(claims),
             "nodeSelector": as_dict(selector), "tolerations": as_list(tolerations)}
            for ns, name, extended, claims, selector, tolerations in
            Pod.objects.live().filter(cluster=cluster, phase="Pending", node_name="").values_list(
                "namespace", "name", "extended_requests", "raw__spec__resourceClaims", "raw__spec__nodeSelector",
                "raw__spec__tolerations",
            )
        ]
        claim_names: set[str] = set()
        template_names: set[str] = set()
        for pod in self.pods:
            for entry in pod["resourceClaims"]:
                if not isinstance(entry, dict):
                    continue
                if isinstance(entry.get("resourceClaimName"), str):
                    claim_names.add(entry["resourceClaimName"])
                elif isinstance(entry.get("resourceClaimTemplateName"), str):
                    template_names.add(entry["resourceClaimTemplateName"])
        self.claim_classes: dict[tuple[str, str], set[str]] = {
            (ns, name): _classes(requests) for ns, name, requests in ResourceClaim.objects.live()
            .filter(cluster=cluster, name__in=sorted(claim_names))
            .values_list("namespace", "name", "raw__spec__devices__requests")
        } if claim_names else {}
        self.template_classes: dict[tuple[str, str], set[str]] = {
            (ns, name): _classes(requests) for ns, name, requests in ResourceClaimTemplate.objects.live()
            .filter(cluster=cluster, name__in=sorted(template_names))
            .values_list("namespace", "name", "raw__spec__spec__devices__requests")
        } if template_names else {}

    def count(self, offering: Offering, nodes: list[NodeFacts]) -> int:
        """Pending pods that ask for the offering and could run on one of its nodes (selector and taints)."""
        total = 0
        fits: dict[str, bool] = {}  # pods of one shape (selector, tolerations) fit the same nodes
        for pod in self.pods:
            if offering.unit_kind in DRA_KINDS:
                classes: set[str] = set()
                for entry in pod["resourceClaims"]:
                    if not isinstance(entry, dict):
                        continue
                    if entry.get("resourceClaimName"):
                        classes |= self.claim_classes.get((pod["namespace"], entry["resourceClaimName"]), set())
                    elif entry.get("resourceClaimTemplateName"):
                        key = (pod["namespace"], entry["resourceClaimTemplateName"])
                        classes |= self.template_classes.get(key, set())
                wanted = offering.device_class_name in classes
            else:
                wanted = (pod["extended_requests"] or {}).get(offering.resource_name, 0) > 0
            if not wanted:
                continue
            selector, tolerations = pod["nodeSelector"], pod["tolerations"]
            shape = json.dumps([selector, tolerations], sort_keys=True, default=str)
            fit = fits.get(shape)
            if fit is None:
                fit = fits[shape] = any(labels_match(n.labels, selector) and not untolerated_taints(n.taints, tolerations)
                                        for n in nodes)
            total += fit
        return total


def _classes(requests: Any) -> set[str]:
    """DeviceClasses named by a claim spec's `devices.requests` (exactly, or any of firstAvailable)."""
    out: set[str] = set()
    for request in as_list(requests):
        if not isinstance(request, dict):
            continue
        exactly = as_dict(request.get("exactly")) if isinstance(request.get("exactly"), dict) else request
        if exactly.get("deviceClassName"):
            out.add(str(exactly["deviceClassName"]))
        for sub in as_list(request.get("firstAvailable")):
            if isinstance(sub, dict) and sub.get("deviceClassName"):
                out.add(str(sub["deviceClassName"]))
    return out


def cluster_capacity(loaded: ClusterDevices, offerings: Sequence[Offering]) -> dict[int, dict[str, Any]]:
    """Figures of every offering in one cluster, keyed by offering id."""
    results: dict[int, Figures] = {}
    matches: dict[int, Match] = {}
    for offering in offerings:
        matches[offering.pk] = loaded.match(offering)
        results[offering.pk] = _figures(offering, loaded, matches[offering.pk])
    # Either/or capacity: free units on a card that another offering also offers as free.
    owners: dict[str, set[int]] = defaultdict(set)
    for pk, figures in results.items():
        for card in figures.free_cards_ids:
            owners[card].add(pk)
    for offering in offerings:
        if offering.unit_kind not in DRA_KINDS:
            continue
        contested = {card for card in results[offering.pk].free_cards_ids if len(owners[card]) > 1}
        results[offering.pk].values["contested"] = sum(
            d["free"] for d in matches[offering.pk].devices if d["free"] and _card_id(d) in contested
        )
    quotas = _quota_totals(loaded.cluster)
    pending = _PendingIndex(loaded.cluster)
    key_capacity = quota_key_capacity(loaded)
    for offering in offerings:
        values = results[offering.pk].values
        key = quota_key(offering)
        values["granted_quota"] = quotas.get(key)
        values["quota_capacity"] = key_capacity.get(key, 0)
        nodes = [loaded.nodes[n] for n in matches[offering.pk].nodes if n in loaded.nodes]
        values["pending_pods"] = pending.count(offering, nodes)
    return {pk: figures.values for pk, figures in results.items()}


def _class_capacity(loaded: ClusterDevices, name: str) -> int:
    """Allocatable devices of a DeviceClass, whatever offering sells them."""
    return sum(d["allocatable"] for kind in DRA_KINDS
               for d in loaded.match(Offering(unit_kind=kind, device_class_name=name)).devices)


def quota_key_capacity(loaded: ClusterDevices) -> dict[str, int]:
    """Allocatable units each quota key counts in one cluster (the "physical capacity" quota is compared against):
    `requests.<resource>` every device-plugin unit of the resource, plus (DRAExtendedResource) every device of the
    DeviceClass serving that name; `<class>.deviceclass.resource.k8s.io/devices` and
    `requests.deviceclass.resource.kubernetes.io/<class>` every device of the class."""
    capacity: dict[str, int] = defaultdict(int)
    for device in loaded.devices:
        if device["resource_name"]:
            capacity[f"requests.{device['resource_name']}"] += device["allocatable"]
    serving: dict[str, tuple[str, str]] = {}  # extended resource name -> (creationTimestamp, class): later wins
    for name, raw in sorted(loaded.classes.items()):
        devices = _class_capacity(loaded, name)
        capacity[f"{name}.deviceclass.resource.k8s.io/devices"] = devices
        capacity[f"requests.deviceclass.resource.kubernetes.io/{name}"] += devices
        spec, metadata = raw.get("spec") or {}, raw.get("metadata") or {}
        extended = spec.get("extendedResourceName") if isinstance(spec, dict) else None
        if isinstance(extended, str) and extended:
            created = str((metadata if isinstance(metadata, dict) else {}).get("creationTimestamp") or "")
            serving[extended] = max(serving.get(extended, ("", "")), (created, name))
    for extended, (_created, name) in serving.items():
        capacity[f"requests.{extended}"] += capacity[f"{name}.deviceclass.resource.k8s.io/devices"]
    return capacity


def _hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def capacity_refresh(*, clusters: Sequence[Cluster] | None = None) -> int:
    """Recompute the capacity of every curated offering (proposals included) in the given clusters.

    Writes the current figures and this hour's history sample. Reads first, then one short transaction per
    cluster. Returns the number of (offering, cluster) rows written. Selector outcomes are remembered between calls
    by device attributes (matching.SELECTOR_OUTCOMES), so a recomputation under churn evaluates only the devices
    whose attributes changed.
    """
    offerings = list(Offering.objects.exclude(lifecycle__in=["dismissed"]).order_by("pk"))
    written = 0
    for cluster in Cluster.objects.all() if clusters is None else clusters:
        started = time.monotonic()
        # One cluster in memory at a time; attributes only of devices whose selector outcomes are not known yet.
        loaded = ClusterDevices(cluster, attributes=False)
        figures = cluster_capacity(loaded, offerings)
        now = timezone.now()
        hour = _hour(now)
        current = [OfferingCapacity(offering_id=pk, cluster=loaded.cluster, computed_at=now, **values)
                   for pk, values in figures.items()]
        samples = [CapacitySample(offering_id=pk, cluster=loaded.cluster, hour=hour, **values)
                   for pk, values in figures.items()]
        with transaction.atomic():
            OfferingCapacity.objects.filter(cluster=loaded.cluster).exclude(offering_id__in=figures).delete()
            OfferingCapacity.objects.bulk_create(
                current, update_conflicts=True, unique_fields=["offering", "cluster"],
                update_fields=[*FIGURE_FIELDS, "computed_at"],
            )
            CapacitySample.objects.bulk_create(
                samples, update_conflicts=True, unique_fields=["offering", "cluster", "hour"],
                update_fields=list(FIGURE_FIELDS),
            )
        written += len(current)
        logger.info("capacity of %d offerings in cluster %s recomputed in %.2fs", len(current),
                    loaded.cluster.name, time.monotonic() - started)
    return written
