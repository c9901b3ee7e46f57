"""Reading untrusted Kubernetes objects: typed accessors that never raise, names, quantities, pod specs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from catalog.validation.findings import document_path, join
from inventory.k8s.semantics import (  # the shared rules, used by every validation layer through this module
    as_dict,
    as_int,
    as_list,
    as_str,
    pod_resources,
)

POD = ("v1", "Pod")
JOB = ("batch/v1", "Job")
CLAIM = ("resource.k8s.io/v1", "ResourceClaim")
CLAIM_TEMPLATE = ("resource.k8s.io/v1", "ResourceClaimTemplate")
SUPPORTED = (POD, JOB, CLAIM, CLAIM_TEMPLATE)

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"  # DRAAdminNamespaceLabelKey; the value must be "true"
DEVICE_REQUESTS_MAX = 32  # DeviceRequestsMaxSize
FIRST_AVAILABLE_MAX = 8  # FirstAvailableDeviceRequestMaxSize
SELECTORS_MAX = 32  # DeviceSelectorsMaxSize
ALLOCATION_RESULTS_MAX = 32  # AllocationResultsMaxSize: the most devices one claim can be allocated



def type_of(document: dict[str, Any]) -> tuple[str, str]:
    return as_str(document.get("apiVersion")), as_str(document.get("kind"))


def metadata(document: dict[str, Any]) -> dict[str, Any]:
    return as_dict(document.get("metadata"))


def name_of(document: dict[str, Any]) -> str:
    meta = metadata(document)
    return as_str(meta.get("name")) or as_str(meta.get("generateName"))


def namespace_of(document: dict[str, Any], default: str = "default") -> str:
    return as_str(metadata(document).get("namespace")) or default


# Resources.


# Pod specs inside Pods and Job templates.


@dataclass(frozen=True)
class PodHolder:
    """A Pod, or a Job's pod template: where its spec is and how many pods run at once."""

    index: int
    document: dict[str, Any]
    kind: str  # "Pod" | "Job"
    spec: dict[str, Any]
    spec_path: str
    pods: int  # pods that run at the same time (a Job: parallelism, capped by completions)
    namespace: str
    metadata: dict[str, Any] = field(default_factory=dict)  # the pod's (a Job: the template's) metadata
    metadata_path: str = ""


def pod_holder(index: int, document: dict[str, Any], default_namespace: str = "default") -> PodHolder | None:
    kind = type_of(document)
    namespace = namespace_of(document, default_namespace)
    if kind == POD:
        return PodHolder(index, document, "Pod", as_dict(document.get("spec")), join(document_path(index), "spec"),
                         1, namespace, metadata(document), join(document_path(index), "metadata"))
    if kind == JOB:
        job_spec = as_dict(document.get("spec"))
        template = as_dict(job_spec.get("template"))
        parallelism = as_int(job_spec.get("parallelism"))
        completions = as_int(job_spec.get("completions"))
        pods = 1 if parallelism is None else max(parallelism, 0)
        if completions is not None:
            pods = min(pods, max(completions, 0))
        return PodHolder(index, document, "Job", as_dict(template.get("spec")),
                         join(document_path(index), "spec", "template", "spec"), pods, namespace,
                         as_dict(template.get("metadata")), join(document_path(index), "spec", "template", "metadata"))
    return None


CONTAINER_LISTS = (("containers", "container"), ("initContainers", "init container"),
                   ("ephemeralContainers", "ephemeral container"))


def containers(spec: dict[str, Any], spec_path: str) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(what, container, path) for every container, init container and ephemeral container of a pod spec."""
    for field_name, what in CONTAINER_LISTS:
        for position, container in enumerate(as_list(spec.get(field_name))):
            if isinstance(container, dict):
                yield what, container, join(spec_path, field_name, position)


def pod_resource_totals(spec: dict[str, Any]) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    """Effective pod requests and limits (the shared rule: inventory.k8s.semantics.pod_resources). Unparsable amounts
    count as 0 (the semantics layer reports them)."""
    resources = pod_resources({"spec": spec})
    return dict(resources.requests), dict(resources.limits)


def claim_spec(index: int, document: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """The ResourceClaimSpec of a ResourceClaim (spec) or a ResourceClaimTemplate (spec.spec), with its path."""
    kind = type_of(document)
    if kind == CLAIM:
        return as_dict(document.get("spec")), join(document_path(index), "spec")
    if kind == CLAIM_TEMPLATE:
        return as_dict(as_dict(document.get("spec")).get("spec")), join(document_path(index), "spec", "spec")
    return None


def request_names(spec: dict[str, Any]) -> set[str]:
    """Names a claim's containers and constraints may reference: `<request>` and `<request>/<subrequest>`."""
    names: set[str] = set()
    for request in as_list(as_dict(spec.get("devices")).get("requests")):
        request = as_dict(request)
        name = as_str(request.get("name"))
        if not name:
            continue
        names.add(name)
        for sub in as_list(request.get("firstAvailable")):
            sub_name = as_str(as_dict(sub).get("name"))
            if sub_name:
                names.add(f"{name}/{sub_name}")
    return names


def device_demand(spec: dict[str, Any]) -> dict[str, int]:
    """Devices a claim may take per DeviceClass, as ResourceQuota counts them: ExactCount adds `count`, All adds
    AllocationResultsMaxSize (the worst case), firstAvailable adds per class the largest of its subrequests."""
    demand: dict[str, int] = {}

    def devices(request: dict[str, Any]) -> int:
        mode = request.get("allocationMode") or "ExactCount"
        if mode == "All":
            return ALLOCATION_RESULTS_MAX
        if mode == "ExactCount":
            count = request.get("count", 1)
            count = 1 if count is None else as_int(count)
            return count if count is not None and count > 0 else 0
        return 0  # an unknown mode counts nothing upstream; the semantics layer reports it

    for request in as_list(as_dict(spec.get("devices")).get("requests")):
        request = as_dict(request)
        exactly = request.get("exactly")
        if isinstance(exactly, dict):
            cls = as_str(exactly.get("deviceClassName"))
            if cls:
                demand[cls] = demand.get(cls, 0) + devices(exactly)
            continue
        largest: dict[str, int] = {}
        for sub in as_list(request.get("firstAvailable")):
            sub = as_dict(sub)
            cls = as_str(sub.get("deviceClassName"))
            if cls:
                largest[cls] = max(largest.get(cls, 0), devices(sub))
        for cls, count in largest.items():
            demand[cls] = demand.get(cls, 0) + count
    return demand
