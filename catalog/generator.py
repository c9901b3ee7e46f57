"""Manifest generator: an offering, a count and a workload shape → multi-document YAML that is right the first time.

Rules (DESIGN.md §2, docs/generator.md):
- extended resources go in `limits` only (the request defaults to the limit and may not differ; no fractions);
- a dedicated pool (an offering with tolerations) gets both the toleration and a required node affinity on the
  pool's labels: a toleration only permits, it never attracts;
- a time-slice replica or an MPS share is a scheduling ticket, not a share of memory: exactly one per container;
- DRA offerings are requested through a ResourceClaimTemplate (one claim per pod) or a shared ResourceClaim, with
  the offering's CEL selector and the workload's requirements as request selectors;
- requirements (minimum memory, architecture, CUDA, compute capability) become CEL for DRA and required node
  affinity on GPU feature discovery labels for labelled pools.

User input never reaches the YAML as text: documents are built as data and dumped with PyYAML, names are DNS
labels, images are validated references, the command is a list.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from catalog.errors import CatalogError
from catalog.models import Lifecycle, Offering, UnitKind
from catalog.sharing import not_additive_message, refused_message
from catalog.versions import parse_version
from inventory.k8s.conversion import dra_from_v1
from inventory.k8s.semantics import is_dns_label, parse_quantity
from inventory.k8s.semantics.kueue import QUEUE_NAME_LABEL

SHAPES = {
    "pod": "Pod",
    "job": "Job",
    "claim-template-pod": "ResourceClaimTemplate + Pod",
    "claim-template-job": "ResourceClaimTemplate + Job",
    "claim-pod": "shared ResourceClaim + Pod",
}
DRA_SHAPES = {"claim-template-pod", "claim-template-job", "claim-pod"}
# Topology for multi-device requests and gangs.
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"  # the standard DRA attribute drivers publish (NVIDIA's too)
NVLINK_DOMAIN_LABEL = "nvidia.com/gpu.clique"  # GPU feature discovery: <cluster UUID>.<clique id> per NVLink domain
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"  # Kueue topology-aware scheduling
TOPOLOGIES = {
    "": "no constraint",
    "pcie-root": "all GPUs of a pod on one PCIe root (DRA)",
    "nvlink-domain": "all pods of the Job in one NVLink domain",
}
MAX_COUNT = 64
# Docker/OCI reference: [registry[:port]/]path[:tag][@digest]; lowercase path components.
_IMAGE = re.compile(
    r"^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*"
    r"(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)
GFD_MEMORY = "nvidia.com/gpu.memory"
GFD_FAMILY = "nvidia.com/gpu.family"
GFD_CC_MAJOR, GFD_CC_MINOR = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
GFD_CUDA_MAJOR, GFD_CUDA_MINOR = "nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver-version.minor"


class GeneratorError(CatalogError):
    def __init__(self, errors: dict[str, list[str]]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))


@dataclass
class WorkloadSpec:
    offering: Offering
    namespace: str
    name: str
    shape: str = "job"
    count: int = 1
    image: str = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
    command: list[str] = field(default_factory=lambda: ["nvidia-smi"])
    cpu: str = "4"
    memory: str = "16Gi"
    min_memory_gib: int | None = None
    architecture: str = ""
    cuda: str = ""
    compute_capability: str = ""
    parallelism: int = 1
    topology: str = ""                      # a TOPOLOGIES key
    device_driver: str = "gpu.nvidia.com"   # the DRA driver whose attributes the requirement selectors read
    extended_resource_name: str = ""        # a DRA class's extendedResourceName, if any
    dra_version: str = "v1"                 # the resource.k8s.io version the target cluster serves (v1beta1 on 1.32)
    queue_name: str = ""                    # a Kueue LocalQueue of the namespace: labelled, Jobs created suspended


@dataclass
class Generated:
    documents: list[dict[str, Any]]
    yaml: str
    notes: list[str]


def parse_command(text: str) -> list[str]:
    """A shell-like command line → argv list (emitted as a YAML list, never as a string to a shell)."""
    try:
        argv = shlex.split(text or "")
    except ValueError as exc:
        raise GeneratorError({"command": [f"Cannot split the command: {exc}."]}) from exc
    if len(argv) > 64 or any(len(a) > 1000 for a in argv):
        raise GeneratorError({"command": ["At most 64 arguments of at most 1000 characters."]})
    return argv


_Add = Callable[[str, str], None]  # records one error message for a field


def _check(spec: WorkloadSpec) -> None:
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    _check_offering_and_shape(spec, add)
    _check_names(spec, add)
    _check_count(spec, add)
    _check_parallelism_and_topology(spec, add)
    _check_container(spec, add)
    _check_requirements(spec, add)
    if spec.queue_name and not is_dns_label(spec.queue_name):
        add("queue_name", "A LocalQueue name: lowercase letters, digits and '-', at most 63 characters.")
    if errors:
        raise GeneratorError(errors)


def _check_offering_and_shape(spec: WorkloadSpec, add: _Add) -> None:
    """An offering that can be ordered, and a shape that can request it (a claim for DRA, a resource otherwise)."""
    offering = spec.offering
    if offering.lifecycle not in {Lifecycle.ACTIVE, Lifecycle.DEPRECATED}:
        add("offering", f"{offering.name} is {offering.get_lifecycle_display().lower()}; pick an active offering.")
    if spec.shape not in SHAPES:
        add("shape", f"Choose one of: {', '.join(SHAPES)}.")
    elif offering.is_dra and spec.shape not in DRA_SHAPES and not spec.extended_resource_name:
        add("shape", "This DRA offering is requested through a ResourceClaim(Template); its DeviceClass has no "
                     "extendedResourceName, so a plain Pod/Job cannot ask for it.")
    elif not offering.is_dra and spec.shape in DRA_SHAPES:
        add("shape", "This unit is served by a device plugin: request the extended resource with a Pod or Job.")


def _check_names(spec: WorkloadSpec, add: _Add) -> None:
    for name, value in (("namespace", spec.namespace), ("name", spec.name)):
        if not is_dns_label(value):
            add(name, "A DNS label: lowercase letters, digits and '-', at most 63 characters, starting and ending "
                      "with a letter or digit.")
    if spec.name and len(spec.name) > 52 and spec.shape.endswith("job"):
        add("name", "Job names are limited to 52 characters here (pods get a suffix).")


def _check_count(spec: WorkloadSpec, add: _Add) -> None:
    offering = spec.offering
    if not isinstance(spec.count, int) or not 1 <= spec.count <= MAX_COUNT:
        add("count", f"Between 1 and {MAX_COUNT} units.")
    elif offering.unit_kind in {UnitKind.TIME_SLICING, UnitKind.MPS} and spec.count != 1:
        # One rule for the generator and the validator (catalog/sharing.py): MPS pools always refuse more than one
        # share per container, time-sliced pools when their offering says failRequestsGreaterThanOne; elsewhere
        # the replicas are granted but are not cards.
        resource = spec.extended_resource_name or offering.resource_name
        if offering.one_unit_per_container:
            add("count", f"Ask for 1: {refused_message(resource, spec.count)}. For more, choose a whole-card or MIG "
                         "offering.")
        else:
            add("count", f"Ask for 1: {not_additive_message(offering.get_unit_kind_display().lower(), spec.count)}. "
                         "For more, choose a whole-card or MIG offering.")


def _check_parallelism_and_topology(spec: WorkloadSpec, add: _Add) -> None:
    if not isinstance(spec.parallelism, int) or not 1 <= spec.parallelism <= 64:
        add("parallelism", "Between 1 and 64 pods.")
    if spec.topology not in TOPOLOGIES:
        add("topology", f"Choose one of: {', '.join(t for t in TOPOLOGIES if t)} (or none).")
    elif spec.topology == "pcie-root" and (spec.shape not in DRA_SHAPES or spec.count < 2):
        add("topology", "One PCIe root is a DRA constraint between a pod's devices: choose a ResourceClaim shape and "
                        "a count of at least 2.")
    elif spec.topology == "nvlink-domain" and (not spec.shape.endswith("job") or spec.parallelism < 2):
        add("topology", "One NVLink domain keeps a Job's pods together: choose a Job shape with a parallelism of at "
                        "least 2.")


def _check_container(spec: WorkloadSpec, add: _Add) -> None:
    """The image reference and the CPU and memory requests."""
    if len(spec.image or "") > 255 or not _IMAGE.match(spec.image or ""):
        add("image", "Not an image reference (registry/path:tag or @sha256:digest).")
    for name, value in (("cpu", spec.cpu), ("memory", spec.memory)):
        try:
            amount = parse_quantity(value)
        except ValueError:
            add(name, f"{value!r} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi).")
            continue
        if amount <= 0:
            add(name, "Must be positive.")


def _check_requirements(spec: WorkloadSpec, add: _Add) -> None:
    """Minimum memory, architecture, CUDA version and compute capability."""
    if spec.min_memory_gib is not None and not 1 <= spec.min_memory_gib <= 4096:
        add("min_memory_gib", "Between 1 and 4096 GiB.")
    if spec.architecture and not re.fullmatch(r"[a-z][a-z-]{1,30}", spec.architecture):
        add("architecture", "An architecture name such as hopper or ampere.")
    if spec.cuda and parse_version(spec.cuda) is None:
        add("cuda", "A CUDA version such as 12.4.")
    if spec.compute_capability and not re.fullmatch(r"\d{1,2}\.\d", spec.compute_capability):
        add("compute_capability", "A compute capability such as 8.0.")


def _cel_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def requirement_selectors(spec: WorkloadSpec) -> list[str]:
    """The workload's requirements as DRA CEL selectors on the driver's attributes and capacity."""
    domain = _cel_string(spec.device_driver)
    out = []
    if spec.min_memory_gib:
        out.append(f'device.capacity[{domain}].memory.compareTo(quantity("{spec.min_memory_gib}Gi")) >= 0')
    if spec.architecture:
        # DRA drivers publish e.g. "Hopper", "Ampere", "Ada Lovelace".
        out.append(f"device.attributes[{domain}].architecture.lowerAscii().startsWith("
                   f"{_cel_string(spec.architecture.replace('-lovelace', ''))})")
    if spec.compute_capability:
        major, minor, _ = parse_version(spec.compute_capability) or (0, 0, 0)
        out.append(f'device.attributes[{domain}].cudaComputeCapability.compareTo(semver("{major}.{minor}.0")) >= 0')
    if spec.cuda:
        major, minor, _ = parse_version(spec.cuda) or (0, 0, 0)
        out.append(f'device.attributes[{domain}].cudaDriverVersion.compareTo(semver("{major}.{minor}.0")) >= 0')
    return out


def _at_least(major_key: str, minor_key: str, version: tuple[int, int, int]) -> list[list[dict[str, Any]]]:
    """Label expressions for "version ≥ major.minor" as ORed alternatives (labels hold integers)."""
    major, minor = version[0], version[1]
    if minor == 0:
        return [[{"key": major_key, "operator": "Gt", "values": [str(major - 1)]}]]
    return [
        [{"key": major_key, "operator": "Gt", "values": [str(major)]}],
        [{"key": major_key, "operator": "In", "values": [str(major)]},
         {"key": minor_key, "operator": "Gt", "values": [str(minor - 1)]}],
    ]


def node_affinity_terms(spec: WorkloadSpec) -> list[dict[str, Any]]:
    """Required node affinity: the pool's labels plus the requirements on GPU feature discovery labels."""
    common = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(spec.offering.node_selector.items())]
    if spec.min_memory_gib:
        common.append({"key": GFD_MEMORY, "operator": "Gt", "values": [str(spec.min_memory_gib * 1024 - 1)]})
    if spec.architecture:
        common.append({"key": GFD_FAMILY, "operator": "In", "values": [spec.architecture.replace("-lovelace", "")]})
    alternatives: list[list[dict[str, Any]]] = [[]]
    for key_major, key_minor, text in ((GFD_CC_MAJOR, GFD_CC_MINOR, spec.compute_capability),
                                       (GFD_CUDA_MAJOR, GFD_CUDA_MINOR, spec.cuda)):
        version = parse_version(text) if text else None
        if version:
            alternatives = [a + b for a in alternatives for b in _at_least(key_major, key_minor, version)]
    terms = [{"matchExpressions": common + extra} for extra in alternatives]
    return [t for t in terms if t["matchExpressions"]]


def _container(spec: WorkloadSpec, resources: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": spec.image}
    if spec.command:
        container["command"] = list(spec.command)
    container["resources"] = resources
    return container


def _pod_spec(spec: WorkloadSpec, *, claim: dict[str, str] | None, restart: str) -> dict[str, Any]:
    requests = {"cpu": spec.cpu, "memory": spec.memory}
    if claim:
        resources: dict[str, Any] = {"requests": requests, "claims": [{"name": "accelerators"}]}
    else:
        resource = spec.extended_resource_name or spec.offering.resource_name
        resources = {"requests": requests, "limits": {resource: spec.count}}
    pod: dict[str, Any] = {"restartPolicy": restart, "containers": [_container(spec, resources)]}
    if claim:
        pod["resourceClaims"] = [{"name": "accelerators", **claim}]
    terms = node_affinity_terms(spec) if not claim else [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}
                              for k, v in sorted(spec.offering.node_selector.items())]}
    ] if spec.offering.node_selector else []
    if terms:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    if spec.offering.tolerations:
        pod["tolerations"] = [dict(t) for t in spec.offering.tolerations]
    return pod


def _claim_spec(spec: WorkloadSpec) -> dict[str, Any]:
    selectors = ([spec.offering.cel_selector] if spec.offering.cel_selector.strip() else []) + requirement_selectors(
        spec)
    exactly: dict[str, Any] = {"deviceClassName": spec.offering.device_class_name, "allocationMode": "ExactCount",
                               "count": spec.count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    devices: dict[str, Any] = {"requests": [{"name": "accelerators", "exactly": exactly}]}
    if spec.topology == "pcie-root":
        devices["constraints"] = [{"requests": ["accelerators"], "matchAttribute": PCIE_ROOT_ATTRIBUTE}]
    return {"devices": devices}


def _labels(spec: WorkloadSpec) -> dict[str, str]:
    return {"app.kubernetes.io/name": spec.name, "portal.example.com/offering": spec.offering.slug}


def _queued(spec: WorkloadSpec, workload: dict[str, Any], why: list[str]) -> None:
    """Kueue: the workload names its LocalQueue; a Job is created suspended and Kueue starts it on admission."""
    if not spec.queue_name:
        return
    metadata = workload["metadata"]  # a copy: the claim documents share the base labels
    workload["metadata"] = {**metadata, "labels": {**metadata["labels"], QUEUE_NAME_LABEL: spec.queue_name}}
    if workload["kind"] == "Job":
        workload["spec"]["suspend"] = True
        why.append(f"Queued through Kueue's LocalQueue {spec.queue_name}: created suspended, started when its "
                   "ClusterQueue has quota for all its pods.")
    else:
        why.append(f"Queued through Kueue's LocalQueue {spec.queue_name} (needs Kueue's pod integration): the pod is "
                   "gated until admitted.")


def generate(spec: WorkloadSpec) -> Generated:
    """Build the documents and their commented YAML. Raises GeneratorError with per-field messages."""
    _check(spec)
    offering = spec.offering
    meta = {"name": spec.name, "namespace": spec.namespace, "labels": _labels(spec)}
    documents: list[tuple[dict[str, Any], list[str]]] = []
    claim_ref: dict[str, str] | None = None
    why: list[str] = []
    if spec.shape in {"claim-template-pod", "claim-template-job"}:
        template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {**meta, "name": f"{spec.name}-accelerators"},
                    "spec": {"spec": _claim_spec(spec)}}
        documents.append((dra_from_v1(template, spec.dra_version), [
            f"One claim per pod for {spec.count} x {offering.name} ({offering.get_unit_kind_display()}).",
            f"DeviceClass {offering.device_class_name}; selectors narrow it to this offering"
            + (" and your requirements." if requirement_selectors(spec) else "."),
        ]))
        claim_ref = {"resourceClaimTemplateName": template["metadata"]["name"]}
    elif spec.shape == "claim-pod":
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {**meta, "name": f"{spec.name}-shared"}, "spec": _claim_spec(spec)}
        documents.append((dra_from_v1(claim, spec.dra_version), [
            f"A shared claim: every pod that names it uses the same {spec.count} x {offering.name}.",
            "Sharing stays inside this namespace; the devices are held until the claim is deleted.",
        ]))
        claim_ref = {"resourceClaimName": claim["metadata"]["name"]}
    if claim_ref is None:
        resource = spec.extended_resource_name or offering.resource_name
        why.append(f"{resource}: {spec.count} in limits only; the request defaults to the limit (extended resources "
                   "are integers and cannot be overcommitted).")
        if offering.unit_kind in {UnitKind.TIME_SLICING, UnitKind.MPS}:
            why.append("One replica: a time-slice/MPS unit shares the card's memory and faults with its neighbours.")
    else:
        why.append("The container lists the claim under resources.claims; the scheduler allocates the devices.")
    if offering.tolerations:
        why.append("Tolerations let the pod onto the dedicated pool; the required node affinity keeps it there "
                   "(a toleration only permits, it never attracts).")
    if offering.node_selector and claim_ref is None:
        why.append("Required node affinity on the pool's labels"
                   + (" and on GPU feature discovery labels for your requirements." if (
                       spec.min_memory_gib or spec.architecture or spec.cuda or spec.compute_capability) else "."))
    why.append("CPU and memory requests let the scheduler place the pod next to others without overcommitting.")
    pod_spec = _pod_spec(spec, claim=claim_ref, restart="Never")
    template_meta: dict[str, Any] = {"labels": _labels(spec)}
    if spec.topology == "pcie-root":
        why.append(f"All {spec.count} devices share one {PCIE_ROOT_ATTRIBUTE} (matchAttribute): peer-to-peer traffic "
                   "stays behind one PCIe root.")
    elif spec.topology == "nvlink-domain":
        # The default scheduler: required pod affinity to the Job's own pods on the NVLink-domain label (the first
        # pod goes anywhere, the others follow it); Kueue's topology-aware scheduling: the podset annotation.
        template_meta["annotations"] = {REQUIRED_TOPOLOGY: NVLINK_DOMAIN_LABEL}
        pod_spec["affinity"] = {**pod_spec.get("affinity", {}), "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": spec.name}},
                "topologyKey": NVLINK_DOMAIN_LABEL}]}}
        why.append(f"All {spec.parallelism} pods in one NVLink domain ({NVLINK_DOMAIN_LABEL}): required pod affinity "
                   f"for the default scheduler, {REQUIRED_TOPOLOGY} for Kueue.")
    if spec.shape.endswith("job"):
        workload = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {
            "parallelism": spec.parallelism, "completions": spec.parallelism, "backoffLimit": 2,
            "template": {"metadata": template_meta, "spec": pod_spec}}}
        if spec.parallelism > 1:
            workload["spec"]["completionMode"] = "Indexed"  # stable ranks for the workers
    else:
        workload = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
    _queued(spec, workload, why)
    documents.append((workload, why))
    text = "\n".join(_commented(doc, comments) for doc, comments in documents)
    notes = []
    if offering.lifecycle == Lifecycle.DEPRECATED:
        notes.append(f"{offering.name} is deprecated" + (f"; use {offering.replacement.name}" if offering.replacement
                                                          else "") + ".")
    if offering.is_dra and offering.unit_kind == UnitKind.DRA_PARTITION:
        notes.append("Partitions share their card's counters: a whole-card request on the same card waits for them.")
    return Generated([doc for doc, _ in documents], text, notes)


_INLINE = {
    "limits": "extended resources: limits only, integers",
    "tolerations": "permits the dedicated pool's taint",
    "affinity": "required: keeps the pod on the offering's nodes",
    "resourceClaims": "the claim this pod uses",
    "selectors": "the offering's selector and your requirements (CEL)",
}


class _Dumper(yaml.SafeDumper):
    """No anchors/aliases: repeated expressions are written out (validators refuse aliases, and so should we)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _commented(document: dict[str, Any], comments: list[str]) -> str:
    body = yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000,
                     allow_unicode=True)
    lines = []
    for line in body.splitlines():
        match = re.fullmatch(r"(\s*)([A-Za-z]+):", line)
        if match and match.group(2) in _INLINE:
            line = f"{line}  # {_INLINE[match.group(2)]}"
        lines.append(line)
    header = "\n".join(f"# {c}" for c in comments)
    return f"---\n{header}\n" + "\n".join(lines) + "\n"

