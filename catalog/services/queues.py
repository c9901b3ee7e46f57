"""Kueue's view of the catalog: which ResourceFlavors stand for which offerings, and the ClusterQueues that hold quota
for an offering's resource in those flavors (nominal quota, borrowing and lending limits, current usage).

A flavor stands for the nodes whose labels carry all its `nodeLabels` (no labels: every node), as Kueue's flavor
assignment injects them into the pods' node affinity. An offering's nodes are those of the devices it matches
(catalog/services/matching.py). A flavor serves an offering when their nodes meet, and a queue's quota for
(flavor, offering's extended resource) is quota for that offering. What cannot be stated cleanly is said:
- a flavor that selects no node;
- a flavor whose nodes hold several offerings serving the same resource (its quota does not say which GPU a job
  gets);
- a flavor declaring `nodeTaints` its nodes do not carry.
DRA offerings: Kueue counts DRA devices only through its deviceClassMappings configuration, which the API does not
publish, so no queue is mapped to them (said as a note).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from catalog.models import Offering
from catalog.services.matching import ClusterDevices, clusters_devices
from inventory.k8s.semantics import format_quantity, labels_match, parse_quantity
from inventory.models import Cluster, ClusterQueue, LocalQueue, ResourceFlavor, SyncState, Topology

DRA_NOTE = ("Kueue counts DRA devices only through its deviceClassMappings configuration, which the cluster does not "
            "publish: no queue is mapped to this offering.")


@dataclass(frozen=True, slots=True)
class QueueQuota:
    """One ClusterQueue's quota for an offering's resource in one flavor of one cluster."""

    cluster: str
    flavor: str
    cluster_queue: str
    cohort: str
    resource: str
    nominal: str
    borrowing_limit: str | None
    lending_limit: str | None
    used: str
    borrowed: str
    local_queues: tuple[str, ...]  # namespace/name of the LocalQueues feeding it

    @property
    def available(self) -> str:
        """Nominal minus used (never below zero): what the queue admits without borrowing."""
        left = max(parse_quantity(self.nominal) - parse_quantity(self.used), Fraction(0))
        return format_quantity(left)


@dataclass(slots=True)
class FlavorMapping:
    cluster: str
    flavor: str
    nodes: int
    offerings: list[str] = field(default_factory=list)  # slugs
    problems: list[str] = field(default_factory=list)


def kueue_topologies(cluster: Cluster) -> dict[str, list[str]] | None:
    """Kueue's Topologies of the cluster (name → node labels of the levels, widest first; the live synced rows), or
    None when the cluster does not serve them (no Kueue, or a Kueue without topology-aware scheduling): the gang
    explainer then takes a Kueue topology annotation's level alone."""
    served = SyncState.objects.filter(cluster=cluster, kind="topologies").exclude(
        phase=SyncState.Phase.UNSERVED).exclude(served_version="").exists()
    if not served:
        return None
    return {name: list(levels) for name, levels in
            Topology.objects.live().filter(cluster=cluster).order_by("name").values_list("name", "levels")
            if isinstance(levels, list)}


def flavor_nodes(flavor: ResourceFlavor, devices: ClusterDevices) -> set[str]:
    labels = flavor.node_labels if isinstance(flavor.node_labels, dict) else {}
    return {name for name, node in devices.nodes.items() if labels_match(node.labels, labels)}


def _taint_problem(flavor: ResourceFlavor, nodes: set[str], devices: ClusterDevices) -> str:
    declared = [t for t in flavor.node_taints if isinstance(t, dict) and t.get("key")]
    missing = sorted(
        name for name in nodes
        if any(not any(isinstance(n, dict) and n.get("key") == t.get("key") and n.get("effect") == t.get("effect")
                       for n in devices.nodes[name].taints) for t in declared)
    )
    if not missing:
        return ""
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"flavor {flavor.name} declares nodeTaints that nodes {shown} do not carry"


def flavor_mappings(cluster: Cluster, offerings: Sequence[Offering],
                    devices: ClusterDevices | None = None) -> dict[str, FlavorMapping]:
    """Every live flavor of a cluster → the device-plugin offerings it serves there, with the ambiguities."""
    devices = devices or ClusterDevices(cluster)
    offering_nodes = {o.slug: (o, devices.match(o).nodes) for o in offerings if not o.is_dra}
    out: dict[str, FlavorMapping] = {}
    for flavor in ResourceFlavor.objects.live().filter(cluster=cluster).order_by("name"):
        nodes = flavor_nodes(flavor, devices)
        mapping = out[flavor.name] = FlavorMapping(cluster.name, flavor.name, len(nodes))
        if not nodes:
            mapping.problems.append(f"flavor {flavor.name} selects no node of cluster {cluster.name}")
            continue
        by_resource: dict[str, list[str]] = defaultdict(list)
        for slug, (offering, its_nodes) in offering_nodes.items():
            if nodes & its_nodes:
                mapping.offerings.append(slug)
                by_resource[offering.resource_name].append(slug)
        for resource, slugs in sorted(by_resource.items()):
            if len(slugs) > 1:
                mapping.problems.append(
                    f"flavor {flavor.name} holds nodes of {len(slugs)} offerings serving {resource} "
                    f"({', '.join(sorted(slugs))}): its quota does not say which one a job gets")
        if taint := _taint_problem(flavor, nodes, devices):
            mapping.problems.append(taint)
    return out


def _usage(queue: ClusterQueue, flavor: str, resource: str) -> tuple[str, str]:
    for cell in queue.usage if isinstance(queue.usage, list) else []:
        if isinstance(cell, dict) and cell.get("flavor") == flavor and cell.get("resource") == resource:
            return str(cell.get("total") or "0"), str(cell.get("borrowed") or "0")
    return "0", "0"


@dataclass(slots=True)
class OfferingQueues:
    quotas: list[QueueQuota] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the ambiguities of the flavors that serve the offering
    notes: list[str] = field(default_factory=list)


def offering_queues(offering: Offering, loaded: Sequence[ClusterDevices] | None = None) -> OfferingQueues:
    """The ClusterQueues that can run an offering's units, per cluster and flavor, with quota and usage."""
    result = OfferingQueues()
    if offering.is_dra:
        if ResourceFlavor.objects.live().exists():
            result.notes.append(DRA_NOTE)
        return result
    clusters = [c.cluster for c in loaded] if loaded is not None else list(
        Cluster.objects.filter(pk__in=ResourceFlavor.objects.live().values("cluster_id")).order_by("name"))
    if not clusters:
        return result
    loaded = loaded if loaded is not None else clusters_devices(clusters)
    for devices in loaded:
        cluster = devices.cluster
        mappings = {name: m for name, m in flavor_mappings(cluster, [offering], devices).items()
                    if offering.slug in m.offerings}
        if not mappings:
            continue
        feeders: dict[str, list[str]] = defaultdict(list)
        for namespace, name, target in (LocalQueue.objects.live().filter(cluster=cluster)
                                        .order_by("namespace", "name")
                                        .values_list("namespace", "name", "cluster_queue")):
            feeders[target].append(f"{namespace}/{name}")
        for queue in ClusterQueue.objects.live().filter(cluster=cluster).order_by("name"):
            for cell in queue.quotas if isinstance(queue.quotas, list) else []:
                if not isinstance(cell, dict) or cell.get("flavor") not in mappings:
                    continue
                if cell.get("resource") != offering.resource_name:
                    continue
                used, borrowed = _usage(queue, str(cell["flavor"]), offering.resource_name)
                result.quotas.append(QueueQuota(
                    cluster.name, str(cell["flavor"]), queue.name, queue.cohort, offering.resource_name,
                    str(cell.get("nominal") or "0"), cell.get("borrowingLimit"), cell.get("lendingLimit"),
                    used, borrowed, tuple(feeders.get(queue.name, ())),
                ))
        for mapping in mappings.values():
            result.problems.extend(mapping.problems)
    return result
