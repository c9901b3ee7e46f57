"""Reading untrusted Kubernetes objects: typed accessors that never raise, names, quantities, pod specs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any

from catalog.cel import parse_quantity_strict
from catalog.validation.findings import document_path, join

POD = ("v1", "Pod")
JOB = ("batch/v1", "Job")
CLAIM = ("resource.k8s.io/v1", "ResourceClaim")
CLAIM_TEMPLATE = ("resource.k8s.io/v1", "ResourceClaimTemplate")
SUPPORTED = (POD, JOB, CLAIM, CLAIM_TEMPLATE)

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"  # DRAAdminNamespaceLabelKey; the value must be "true"
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"  # ResourceDeviceClassPrefix
DEVICE_REQUESTS_MAX = 32  # DeviceRequestsMaxSize
FIRST_AVAILABLE_MAX = 8  # FirstAvailableDeviceRequestMaxSize
SELECTORS_MAX = 32  # DeviceSelectorsMaxSize
ALLOCATION_RESULTS_MAX = 32  # AllocationResultsMaxSize: the most devices one claim can be allocated

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_HUGEPAGES = re.compile(r"hugepages-[0-9]+(?:[KMGTPE]i|[kMGTPE])?")
NATIVE_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def type_of(document: dict[str, Any]) -> tuple[str, str]:
    return as_str(document.get("apiVersion")), as_str(document.get("kind"))


def metadata(document: dict[str, Any]) -> dict[str, Any]:
    return as_dict(document.get("metadata"))


def name_of(document: dict[str, Any]) -> str:
    meta = metadata(document)
    return as_str(meta.get("name")) or as_str(meta.get("generateName"))


def namespace_of(document: dict[str, Any], default: str = "default") -> str:
    return as_str(metadata(document).get("namespace")) or default


# Names, as k8s.io/apimachinery/pkg/util/validation defines them.


def dns_label_problem(value: str) -> str:
    if not value:
        return "must not be empty"
    if len(value) > 63:
        return f"must be no more than 63 characters (it has {len(value)})"
    if not _DNS_LABEL.fullmatch(value):
        return (
            "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit"
        )
    return ""


def dns_subdomain_problem(value: str) -> str:
    if not value:
        return "must not be empty"
    if len(value) > 253:
        return f"must be no more than 253 characters (it has {len(value)})"
    if not _DNS_SUBDOMAIN.fullmatch(value):
        return (
            "must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a "
            "letter or digit"
        )
    return ""


def qualified_name_problem(value: str) -> str:
    """A label or annotation key: an optional DNS subdomain prefix and '/', then a name of at most 63 characters."""
    prefix, slash, name = value.rpartition("/") if "/" in value else ("", "", value)
    if slash and (problem := dns_subdomain_problem(prefix)):
        return f"has an invalid prefix: it {problem}"
    if not name:
        return "must have a name part"
    if len(name) > 63:
        return f"has a name part longer than 63 characters ({len(name)})"
    if not _QUALIFIED_NAME_PART.fullmatch(name):
        return "must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
    return ""


def label_value_problem(value: str) -> str:
    if len(value) > 63:
        return f"must be no more than 63 characters (it has {len(value)})"
    if value and not _QUALIFIED_NAME_PART.fullmatch(value):
        return "must be empty or consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
    return ""


# Resources.


def quantity(value: Any) -> Fraction | None:
    """The exact value of a Kubernetes quantity (a number or a string in Go's grammar); None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(Decimal(repr(value))) if value == value and abs(value) != float("inf") else None
    if not isinstance(value, str):
        return None
    try:
        return Fraction(parse_quantity_strict(value))
    except (ValueError, ArithmeticError):
        return None


def is_native_container_resource(name: str) -> bool:
    return name in NATIVE_CONTAINER_RESOURCES or bool(_HUGEPAGES.fullmatch(name))


def is_extended_resource(name: str) -> bool:
    """A vendor resource (`domain/name`, e.g. nvidia.com/gpu) or a DRA class's implicit extended resource name."""
    if name.startswith(IMPLICIT_EXTENDED_PREFIX):
        return len(name) > len(IMPLICIT_EXTENDED_PREFIX)
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


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
    """Effective pod requests and limits (Kubernetes' PodRequests rule: the sum of the containers, at least the
    largest init container, with restartable init containers (sidecars) adding to both; plus overhead). A request
    defaults to the limit. Unparsable amounts count as 0 (the semantics layer reports them)."""

    def amounts(container: dict[str, Any]) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
        resources = as_dict(container.get("resources"))
        requests = as_dict(resources.get("requests"))
        limits = as_dict(resources.get("limits"))
        req: dict[str, Fraction] = {}
        lim: dict[str, Fraction] = {}
        for name, value in limits.items():
            amount = quantity(value)
            if amount is not None and amount > 0:
                lim[name] = amount
                req[name] = amount
        for name, value in requests.items():
            amount = quantity(value)
            if amount is not None and amount >= 0:
                req[name] = amount
        return req, lim

    totals: tuple[dict[str, Fraction], dict[str, Fraction]] = ({}, {})
    sidecars: tuple[dict[str, Fraction], dict[str, Fraction]] = ({}, {})
    peaks: tuple[dict[str, Fraction], dict[str, Fraction]] = ({}, {})
    for container in as_list(spec.get("containers")):
        for total, amount in zip(totals, amounts(as_dict(container)), strict=True):
            for name, value in amount.items():
                total[name] = total.get(name, Fraction(0)) + value
    for container in as_list(spec.get("initContainers")):
        container = as_dict(container)
        own = amounts(container)
        sidecar = container.get("restartPolicy") == "Always"
        for which in (0, 1):
            during = dict(sidecars[which])
            for name, value in own[which].items():
                during[name] = during.get(name, Fraction(0)) + value
                if sidecar:
                    totals[which][name] = totals[which].get(name, Fraction(0)) + value
                    sidecars[which][name] = sidecars[which].get(name, Fraction(0)) + value
            for name, value in during.items():
                peaks[which][name] = max(peaks[which].get(name, Fraction(0)), value)
    for which in (0, 1):
        for name, value in peaks[which].items():
            totals[which][name] = max(totals[which].get(name, Fraction(0)), value)
    for name, value in as_dict(spec.get("overhead")).items():
        amount = quantity(value)
        if amount is not None and amount > 0:
            for which in (0, 1):
                if which == 0 or name in totals[1]:
                    totals[which][name] = totals[which].get(name, Fraction(0)) + amount
    return totals


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
