"""What the cluster-aware layers know about the target cluster, built from the inventory or given in tests.

`None` means "unknown": the checks that need the value are skipped (the CLI without --cluster runs that way).
context_for_cluster only reads the inventory; it never talks to the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from catalog.sharing import TIME_SLICING, node_sharing, refuses_more_than_one
from catalog.validation.findings import ValidationFinding
from catalog.validation.objects import ADMIN_ACCESS_LABEL
from catalog.validation.queues import KueueContext
from inventory.k8s.conversion import kueue_to_v1beta2
from inventory.k8s.semantics import as_dict, as_list, as_str, kubernetes_version, labels_match, limit_range_defaults
from inventory.k8s.semantics import quantity_or_none as quantity
from inventory.k8s.semantics.kueue import (
    QueueState,
    cluster_queue_quotas,
    flavor_usage,
    quotas_from_json,
    usage_from_json,
)

if TYPE_CHECKING:
    from inventory.models import Cluster

DEFAULT_KUBERNETES_VERSION = "1.35.0"


@dataclass(frozen=True)
class SharedNode:
    """A node offering an extended resource that some node of the cluster shares (time-slicing or MPS)."""

    name: str
    labels: dict[str, str]
    taints: list[dict[str, Any]] = field(default_factory=list)  # blocking taints (NoSchedule, NoExecute)
    sharing: str = ""  # "time-slicing", "mps" or "" (whole units)
    refuses_more_than_one: bool = False  # the device plugin refuses more than one unit per container


@dataclass
class ValidationContext:
    """Everything the cluster-aware layers need. See docs/validation.md for what each field enables."""

    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    namespaces: dict[str, dict[str, str]] | None = None  # name → labels
    node_resources: dict[str, int] | None = None  # extended resource → number of nodes whose capacity has it
    gpu_node_count: int = 0
    cpu_only_node_count: int = 0
    device_classes: dict[str, dict[str, Any]] | None = None  # name → raw DeviceClass
    quotas: dict[str, list[dict[str, Any]]] | None = None  # namespace → [{"name", "hard", "used", "spec"}]
    # namespace → the Container (default, defaultRequest) pairs of its LimitRanges (semantics.limit_range_defaults)
    limit_ranges: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] | None = None
    admin_access_namespaces: frozenset[str] | None = None
    feasibility: Callable[[dict[str, Any], list[dict[str, Any]]], list[ValidationFinding]] | None = None
    # (pod, pods that run at once, claims): can a Job's `parallelism` pods all be placed at the same time?
    gang_feasibility: Callable[[dict[str, Any], int, list[dict[str, Any]]], list[ValidationFinding]] | None = None
    dry_run: Callable[[list[dict[str, Any]]], list[ValidationFinding]] | None = None
    node_taints: dict[str, set[str]] | None = None  # taint key → values seen on the cluster's nodes
    # taint key → labels that every node with the taint carries and some other node does not (the pool's labels)
    node_taint_labels: dict[str, dict[str, str]] | None = None
    default_namespace: str = "default"  # for documents without metadata.namespace (kubectl's context namespace)
    # The reader's namespaces (None: no restriction — platform roles, the command line). Documents elsewhere are an
    # error, and their quota, feasibility and dry run are not computed: nothing of another tenant's namespace leaks.
    allowed_namespaces: frozenset[str] | None = None
    # Where the dry run may POST as the portal's identity (None: anywhere — the command line). The portal passes the
    # tenant namespaces the reader may target, so no dry run ever runs in kube-system or an unassigned namespace.
    dry_run_namespaces: frozenset[str] | None = None
    # extended resource → the nodes offering it, for the resources some node shares (time-slicing or MPS): the
    # device plugin's one-unit-per-container rule (catalog/sharing.py). Time-sliced pools refuse more than one when
    # the catalog's offering for them says failRequestsGreaterThanOne (`single_unit_pools` of build_context).
    shared_resources: dict[str, list[SharedNode]] | None = None
    # Why the cluster cannot run DRA workloads ("" when it can): DRA documents get that reason, not "no such class".
    dra_unavailable: str = ""
    # The cluster's Kueue queues (catalog/validation/queues.py); None where the cluster does not serve Kueue.
    kueue: KueueContext | None = None

    def extended_resource_names(self) -> set[str]:
        """Every extended resource a pod can ask for: node capacity plus DRA classes' (implicit) names."""
        names = set(self.node_resources or {})
        for name, raw in (self.device_classes or {}).items():
            names.add(f"deviceclass.resource.kubernetes.io/{name}")
            extended = class_extended_resource_name(raw)
            if extended:
                names.add(extended)
        return names


def class_extended_resource_name(raw: Any) -> str:
    return as_str(as_dict(as_dict(raw).get("spec")).get("extendedResourceName"))


def _version_text(server_version: str) -> str:
    parsed = kubernetes_version(server_version or "")
    if parsed is None:
        return DEFAULT_KUBERNETES_VERSION
    return f"{parsed[0]}.{parsed[1]}.0"


def catalog_single_unit_pools() -> list[tuple[str, dict[str, Any]]]:
    """(resource, node selector) of the time-sliced pools whose offering says the device plugin refuses more than
    one replica per container (failRequestsGreaterThanOne): nothing on the node advertises that setting."""
    from catalog.models import Lifecycle, Offering, UnitKind

    return list(Offering.objects.exclude(lifecycle=Lifecycle.DISMISSED).filter(
        unit_kind=UnitKind.TIME_SLICING, fail_requests_greater_than_one=True).values_list("resource_name",
                                                                                          "node_selector"))


def context_for_cluster(cluster: Cluster) -> ValidationContext:
    """The cluster-aware parts of a context from the inventory (live rows only) and the catalog. Read-only."""
    from inventory.models import Device, DeviceClass, LimitRange, Namespace, Node, ResourceQuota
    from inventory.selectors import dra_unavailable_reason

    context = build_context(
        kubernetes_version=_version_text(cluster.server_version),
        namespaces=((ns.name, ns.labels) for ns in Namespace.objects.live().filter(cluster=cluster).only("name", "labels")),
        nodes=((node.name, node.labels, node.capacity, node.taints)
               for node in Node.objects.live().filter(cluster=cluster).only("name", "capacity", "taints", "labels")),
        dra_nodes=set(Device.objects.filter(cluster=cluster, path="dra").exclude(node_name="")
                      .values_list("node_name", flat=True)),
        device_classes=((dc.name, dc.raw) for dc in DeviceClass.objects.live().filter(cluster=cluster).only("name", "raw")),
        quotas=((q.namespace, q.name, q.hard, q.used, q.raw)
                for q in ResourceQuota.objects.live().filter(cluster=cluster).only("name", "namespace", "hard", "used", "raw")),
        limit_ranges=((lr.namespace, as_dict(lr.raw).get("spec"))
                      for lr in LimitRange.objects.live().filter(cluster=cluster).only("namespace", "raw")),
        single_unit_pools=catalog_single_unit_pools(),
    )
    context.dra_unavailable = dra_unavailable_reason(cluster)
    context.kueue = kueue_context_for_cluster(cluster)
    return context


def kueue_context_for_cluster(cluster: Cluster) -> KueueContext | None:
    """The cluster's LocalQueues and ClusterQueues (live rows), or None when the cluster does not serve Kueue."""
    from inventory.models import ClusterQueue, LocalQueue, SyncState

    served = SyncState.objects.filter(cluster=cluster, kind="clusterqueues").exclude(
        phase=SyncState.Phase.UNSERVED).exclude(served_version="").exists()
    if not served:
        return None
    return KueueContext(
        local_queues={(ns, name): target for ns, name, target in LocalQueue.objects.live().filter(cluster=cluster)
                      .values_list("namespace", "name", "cluster_queue")},
        cluster_queues={
            queue.name: QueueState(queue.name, tuple(quotas_from_json(queue.quotas)), usage_from_json(queue.usage),
                                   queue.cohort)
            for queue in ClusterQueue.objects.live().filter(cluster=cluster).only("name", "quotas", "usage", "cohort")
        },
    )


def context_from_objects(objects: Iterable[dict[str, Any]], *, kubernetes_version: str = "",
                         single_unit_pools: Iterable[tuple[str, Any]] = ()) -> ValidationContext:
    """The same context from a cluster snapshot file (`kubectl get namespaces,nodes,resourcequotas,deviceclasses,
    resourceslices -A -o json`, plus `localqueues,clusterqueues` where Kueue is installed): what `validate_manifest
    --snapshot` uses without the inventory database. The catalog's single-unit pools come from the caller (the
    command passes them when it has a database)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        grouped.setdefault(as_str(as_dict(obj).get("kind")), []).append(as_dict(obj))

    def meta(obj: dict[str, Any]) -> dict[str, Any]:
        return as_dict(obj.get("metadata"))

    context = build_context(
        kubernetes_version=_version_text(kubernetes_version),
        namespaces=((as_str(meta(ns).get("name")), meta(ns).get("labels")) for ns in grouped.get("Namespace", [])),
        nodes=((as_str(meta(n).get("name")), meta(n).get("labels"), as_dict(n.get("status")).get("capacity"),
                as_dict(n.get("spec")).get("taints")) for n in grouped.get("Node", [])),
        dra_nodes={as_str(as_dict(s.get("spec")).get("nodeName")) for s in grouped.get("ResourceSlice", [])} - {""},
        device_classes=((as_str(meta(dc).get("name")), dc) for dc in grouped.get("DeviceClass", [])),
        quotas=((as_str(meta(q).get("namespace")), as_str(meta(q).get("name")), as_dict(q.get("spec")).get("hard"),
                 as_dict(q.get("status")).get("used"), q) for q in grouped.get("ResourceQuota", [])),
        limit_ranges=((as_str(meta(lr).get("namespace")), lr.get("spec")) for lr in grouped.get("LimitRange", [])),
        single_unit_pools=single_unit_pools,
    )
    if not grouped.get("Namespace"):  # a snapshot without namespaces says nothing about them: skip those checks
        context.namespaces = None
        context.admin_access_namespaces = None
    context.kueue = _kueue_from_objects(grouped.get("LocalQueue", []), grouped.get("ClusterQueue", []))
    return context


def _kueue_from_objects(local_queues: list[dict[str, Any]], cluster_queues: list[dict[str, Any]]) -> KueueContext | None:
    """Kueue's queues from a snapshot (any served version, read in the v1beta2 shape); None when it has none."""
    if not local_queues and not cluster_queues:
        return None
    queues: dict[str, QueueState] = {}
    for raw in cluster_queues:
        obj = kueue_to_v1beta2(raw, as_str(raw.get("apiVersion")).rpartition("/")[2])
        name = as_str(as_dict(obj.get("metadata")).get("name"))
        problems: list[str] = []
        queues[name] = QueueState(name, tuple(cluster_queue_quotas(obj.get("spec"), problems)),
                                  usage_from_json(flavor_usage(obj.get("status"), problems)),
                                  as_str(as_dict(obj.get("spec")).get("cohortName")))
    local = {(as_str(as_dict(lq.get("metadata")).get("namespace")), as_str(as_dict(lq.get("metadata")).get("name"))):
             as_str(as_dict(lq.get("spec")).get("clusterQueue")) for lq in local_queues}
    return KueueContext(local_queues=local, cluster_queues=queues)


def _limit_ranges(limit_ranges: Iterable[tuple[str, Any]]) -> dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]:
    specs: dict[str, list[Any]] = {}
    for namespace, spec in limit_ranges:
        specs.setdefault(namespace, []).append(spec)
    return {namespace: found for namespace, items in specs.items() if (found := limit_range_defaults(items))}


def build_context(
    *,
    kubernetes_version: str,
    namespaces: Iterable[tuple[str, Any]],
    nodes: Iterable[tuple[str, Any, Any, Any]],
    dra_nodes: set[str],
    device_classes: Iterable[tuple[str, Any]],
    quotas: Iterable[tuple[str, str, Any, Any, Any]],
    single_unit_pools: Iterable[tuple[str, Any]] = (),
    limit_ranges: Iterable[tuple[str, Any]] = (),
) -> ValidationContext:
    """One construction of the context from (name, labels) namespaces, (name, labels, capacity, taints) nodes, the
    names of nodes with DRA devices, (name, raw) DeviceClasses, (namespace, name, hard, used, raw) quotas and the
    catalog's (resource, node selector) time-sliced pools that refuse more than one replica per container."""
    namespace_labels = {name: {str(k): str(v) for k, v in as_dict(labels).items()} for name, labels in namespaces}
    admin = frozenset(name for name, labels in namespace_labels.items() if labels.get(ADMIN_ACCESS_LABEL) == "true")

    node_resources: dict[str, int] = {}
    accelerator_nodes: set[str] = set()
    all_nodes: dict[str, dict[str, str]] = {}
    taints: dict[str, set[str]] = {}
    tainted_nodes: dict[str, list[str]] = {}
    offered: dict[str, list[str]] = {}  # extended resource → nodes offering it
    blocking: dict[str, list[dict[str, Any]]] = {}
    for name, labels, capacity, node_taints in nodes:
        all_nodes[name] = {str(k): str(v) for k, v in as_dict(labels).items()}
        for resource, value in as_dict(capacity).items():
            if "/" not in resource:
                continue
            amount = quantity(value)
            if amount is not None and amount > 0:
                node_resources[resource] = node_resources.get(resource, 0) + 1
                accelerator_nodes.add(name)
                offered.setdefault(resource, []).append(name)
        for taint in as_list(node_taints):
            taint = as_dict(taint)
            key = as_str(taint.get("key"))
            if key and taint.get("effect") in ("NoSchedule", "NoExecute"):
                taints.setdefault(key, set()).add(as_str(taint.get("value")))
                tainted_nodes.setdefault(key, []).append(name)
                blocking.setdefault(name, []).append(taint)
    accelerator_nodes |= dra_nodes & set(all_nodes)
    strict_pools = [(as_str(resource), as_dict(selector)) for resource, selector in single_unit_pools]
    shared_resources: dict[str, list[SharedNode]] = {}
    for resource, names in offered.items():
        entries = []
        for name in names:
            labels = all_nodes[name]
            sharing = node_sharing(labels, resource)
            # The catalog's declaration counts where the node time-slices the resource (the offering sells
            # time-slicing units: the inventory's device mode comes from the same labels), never on whole cards.
            declared = sharing == TIME_SLICING and any(
                r == resource and labels_match(labels, selector) for r, selector in strict_pools)
            entries.append(SharedNode(name, labels, blocking.get(name, []), sharing,
                                      refuses_more_than_one(sharing, declared)))
        if any(entry.sharing for entry in entries):
            shared_resources[resource] = entries

    taint_labels: dict[str, dict[str, str]] = {}
    for key, names in tainted_nodes.items():
        shared = dict(all_nodes[names[0]])
        for name in names[1:]:
            shared = {k: v for k, v in shared.items() if all_nodes[name].get(k) == v}
        untainted = [labels for name, labels in all_nodes.items() if name not in set(names)]
        taint_labels[key] = {
            k: v for k, v in shared.items() if any(labels.get(k) != v for labels in untainted) or not untainted
        }

    quota_entries: dict[str, list[dict[str, Any]]] = {}
    for namespace, name, hard, used, raw in quotas:
        spec = as_dict(as_dict(raw).get("spec"))
        quota_entries.setdefault(namespace, []).append({
            "name": name,
            "hard": as_dict(hard),
            "used": as_dict(used),
            "spec": {k: spec[k] for k in ("scopes", "scopeSelector") if k in spec},
        })
    return ValidationContext(
        kubernetes_version=kubernetes_version,
        namespaces=namespace_labels,
        node_resources=node_resources,
        gpu_node_count=len(accelerator_nodes),
        cpu_only_node_count=len(all_nodes) - len(accelerator_nodes),
        device_classes={name: raw if isinstance(raw, dict) else {} for name, raw in device_classes},
        quotas=quota_entries,
        limit_ranges=_limit_ranges(limit_ranges),
        admin_access_namespaces=admin,
        node_taints=taints,
        node_taint_labels=taint_labels,
        shared_resources=shared_resources,
    )
