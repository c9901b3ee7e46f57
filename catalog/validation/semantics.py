"""Layer 2: Kubernetes rules the JSON schema does not express, and what the target cluster can actually offer.

Sources: the API server's validation of Pods, Jobs and resource.k8s.io/v1 claims (names, extended resources, DRA
limits, the adminAccess namespace rule), and DESIGN.md §2 for what a GPU request must look like. Cluster-aware checks
(known namespaces, resource names, MIG profiles, DeviceClasses, adminAccess grants) run only when the context knows
the corresponding inventory; `None` skips them.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from catalog.cel import CelError, CelLimitError, compile_selector
from catalog.sharing import not_additive_message, plugin_error, refused_message
from catalog.validation.context import SharedNode, ValidationContext
from catalog.validation.findings import ValidationFinding, join, plain, show
from catalog.validation.objects import (
    ADMIN_ACCESS_LABEL,
    ALLOCATION_RESULTS_MAX,
    CLAIM,
    CLAIM_TEMPLATE,
    DEVICE_REQUESTS_MAX,
    FIRST_AVAILABLE_MAX,
    JOB,
    SELECTORS_MAX,
    PodHolder,
    claim_spec,
    containers,
    metadata,
    namespace_of,
    pod_holder,
    request_names,
    type_of,
)
from inventory.k8s.semantics import (
    IMPLICIT_EXTENDED_PREFIX,
    NATIVE_CONTAINER_RESOURCES,
    as_dict,
    as_int,
    as_list,
    as_str,
    comparisons_enabled,
    dns_label_problem,
    dns_subdomain_problem,
    is_extended_resource,
    is_native_container_resource,
    kubernetes_version,
    label_value_problem,
    node_selector_matches,
    qualified_name_problem,
    term_failures,
    untolerated_taints,
)
from inventory.k8s.semantics import quantity_or_none as quantity

ADMIN_ACCESS_MESSAGE = (
    "admin access to devices requires the `resource.kubernetes.io/admin-access: true` label on the containing "
    "namespace"
)
MAX_ANNOTATIONS_BYTES = 256 * 1024  # TotalAnnotationSizeLimitB
MAX_LISTED = 12  # names listed in a message

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = (
    r"(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*"
    r"|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
)
_IMAGE = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)


@dataclass
class Manifest:
    """What the documents of one manifest define, for checks across documents."""

    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (namespace, name) → claim spec
    templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, documents: list[tuple[int, dict[str, Any]]], default_namespace: str) -> Manifest:
        manifest = cls()
        for index, document in documents:
            found = claim_spec(index, document)
            name = as_str(metadata(document).get("name"))
            if found is None or not name:
                continue
            target = manifest.claims if type_of(document) == CLAIM else manifest.templates
            target[(namespace_of(document, default_namespace), name)] = found[0]
        return manifest


def _error(path: str, message: str, code: str, fix: str = "") -> ValidationFinding:
    return ValidationFinding("semantics", "error", path, message, fix, code)


def _warning(path: str, message: str, code: str, fix: str = "") -> ValidationFinding:
    return ValidationFinding("semantics", "warning", path, message, fix, code)


def _listing(names: Any) -> str:
    names = sorted(names)
    shown = ", ".join(plain(name, 100) for name in names[:MAX_LISTED])
    if len(names) > MAX_LISTED:
        shown += f" and {len(names) - MAX_LISTED} more"
    return shown or "none"


def _similar(name: str, candidates: Any) -> list[str]:
    candidates = sorted(set(candidates))
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.75)
    tail = name.rsplit("/", 1)[-1]
    for candidate in candidates:  # "gpu" → "nvidia.com/gpu"
        if candidate not in close and candidate.rsplit("/", 1)[-1] == tail:
            close.append(candidate)
    return close[:3]


def check_semantics(
    index: int, document: dict[str, Any], context: ValidationContext, manifest: Manifest
) -> list[ValidationFinding]:
    findings: list[ValidationFinding] = []
    findings += _check_metadata(index, document, context)
    holder = pod_holder(index, document, context.default_namespace)
    if holder is not None:
        findings += _check_pod_spec(holder, context, manifest)
        if holder.kind == "Job":
            findings += _check_job(holder)
    spec = claim_spec(index, document)
    if spec is not None:
        findings += _check_claim_spec(spec[0], spec[1], namespace_of(document, context.default_namespace), context)
    return findings


# Metadata.


def _check_metadata(index: int, document: dict[str, Any], context: ValidationContext) -> list[ValidationFinding]:
    findings: list[ValidationFinding] = []
    base = join(f"documents[{index}]", "metadata")
    meta = metadata(document)
    name, generate_name = meta.get("name"), meta.get("generateName")
    kind = type_of(document)
    if not as_str(name) and not as_str(generate_name):
        findings.append(_error(join(base, "name"), "metadata.name (or generateName) is required", "name-required"))
    elif isinstance(name, str) and name:
        problem = dns_subdomain_problem(name)
        if not problem and kind == JOB and len(name) > 63:
            problem = (f"must be no more than 63 characters for a Job (it has {len(name)}): its pods carry the name "
                       "in the job-name label")
        if problem:
            findings.append(_error(join(base, "name"), f"name {show(name)} {problem}", "invalid-name"))
    elif isinstance(generate_name, str) and generate_name:
        problem = dns_subdomain_problem(generate_name.rstrip("-") or "x")
        if problem:
            findings.append(_error(join(base, "generateName"), f"generateName {show(generate_name)} {problem}",
                                   "invalid-name"))
    namespace = meta.get("namespace")
    if isinstance(namespace, str) and namespace:
        problem = dns_label_problem(namespace)
        if problem:
            findings.append(_error(join(base, "namespace"), f"namespace {show(namespace)} {problem}",
                                   "invalid-namespace"))
        elif context.allowed_namespaces is not None and namespace not in context.allowed_namespaces:
            findings.append(_not_yours(base, namespace, context.allowed_namespaces))
        elif context.namespaces is not None and namespace not in context.namespaces:
            close = _similar(namespace, context.namespaces)
            fix = f"did you mean {_listing(close)}?" if close else "ask the platform team for a namespace"
            findings.append(_error(join(base, "namespace"),
                                   f"namespace {show(namespace)} does not exist in the cluster", "unknown-namespace",
                                   fix))
    elif context.allowed_namespaces is not None and context.default_namespace not in context.allowed_namespaces:
        findings.append(_not_yours(base, context.default_namespace, context.allowed_namespaces))
    elif context.namespaces is not None and context.default_namespace not in context.namespaces:
        findings.append(_error(join(base, "namespace"),
                               f"no namespace given and the default namespace {show(context.default_namespace)} "
                               "does not exist in the cluster", "unknown-namespace", "set metadata.namespace"))
    findings += _check_labels(base, meta)
    if kind == JOB:
        template_meta = as_dict(as_dict(as_dict(document.get("spec")).get("template")).get("metadata"))
        findings += _check_labels(join(f"documents[{index}]", "spec", "template", "metadata"), template_meta)
    if kind == CLAIM_TEMPLATE:
        template_meta = as_dict(as_dict(document.get("spec")).get("metadata"))
        findings += _check_labels(join(f"documents[{index}]", "spec", "metadata"), template_meta)
    return findings


def _not_yours(base: str, namespace: str, allowed: frozenset[str]) -> ValidationFinding:
    """A namespace outside the reader's tenants: whether it exists, and its quota, are not disclosed."""
    fix = f"use one of your namespaces: {_listing(sorted(allowed))}" if allowed else (
        "ask your team lead or a platform admin to map a namespace to your team")
    return _error(join(base, "namespace"), f"namespace {show(namespace)} is not one of your namespaces: its quota, "
                  "feasibility and a dry run are not checked", "namespace-not-yours", fix)


def _check_labels(base: str, meta: dict[str, Any]) -> list[ValidationFinding]:
    findings: list[ValidationFinding] = []
    for key, value in as_dict(meta.get("labels")).items():
        if not isinstance(key, str):
            continue
        path = join(base, "labels", key)
        problem = qualified_name_problem(key)
        if problem:
            findings.append(_error(path, f"label key {show(key)} {problem}", "invalid-label"))
        if isinstance(value, str) and (problem := label_value_problem(value)):
            findings.append(_error(path, f"label value {show(value)} {problem}", "invalid-label"))
    annotations = as_dict(meta.get("annotations"))
    size = 0
    for key, value in annotations.items():
        if not isinstance(key, str):
            continue
        size += len(key.encode()) + len(as_str(value).encode())
        problem = qualified_name_problem(key)
        if problem:
            findings.append(_error(join(base, "annotations", key), f"annotation key {show(key)} {problem}",
                                   "invalid-annotation"))
    if size > MAX_ANNOTATIONS_BYTES:
        findings.append(_error(join(base, "annotations"),
                               f"annotations total {size:,} bytes; the limit is {MAX_ANNOTATIONS_BYTES:,}",
                               "invalid-annotation"))
    return findings


# Pods and Job templates.


def _check_job(holder: PodHolder) -> list[ValidationFinding]:
    findings: list[ValidationFinding] = []
    job_path = join(f"documents[{holder.index}]", "spec")
    job_spec = as_dict(holder.document.get("spec"))
    for name in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds"):
        value = as_int(job_spec.get(name))
        if value is not None and value < 0:
            findings.append(_error(join(job_path, name), f"{name} must not be negative (it is {value})",
                                   "invalid-value"))
    restart = holder.spec.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        shown = show(restart) if isinstance(restart, str) else "unset (defaults to Always)"
        findings.append(_error(join(holder.spec_path, "restartPolicy"),
                               f"a Job's pods must have restartPolicy Never or OnFailure; it is {shown}",
                               "invalid-restart-policy", "set restartPolicy: Never (or OnFailure)"))
    return findings


def _check_pod_spec(holder: PodHolder, context: ValidationContext, manifest: Manifest) -> list[ValidationFinding]:
    findings: list[ValidationFinding] = []
    spec, spec_path = holder.spec, holder.spec_path
    if "containers" in spec and not as_list(spec.get("containers")):  # a missing list is a schema error
        findings.append(_error(join(spec_path, "containers"), "a pod needs at least one container",
                               "containers-required"))
    seen: dict[str, str] = {}
    volumes = _volume_names(spec, spec_path, findings)
    pod_claims = _pod_claims(holder, context, manifest, findings)
    used_claims: set[str] = set()
    known_extended = context.extended_resource_names() if context.node_resources is not None else None
    for what, container, path in containers(spec, spec_path):
        name = container.get("name")
        if isinstance(name, str):
            if problem := dns_label_problem(name):
                findings.append(_error(join(path, "name"), f"{what} name {show(name)} {problem}", "invalid-name"))
            elif name in seen:
                findings.append(_error(join(path, "name"), f"{what} name {show(name)} is used twice (also at "
                                       f"{seen[name]})", "duplicate-container-name"))
            else:
                seen[name] = path
        elif name is None:
            findings.append(_error(join(path, "name"), f"a {what} needs a name", "name-required"))
        findings += _check_image(what, container, path)
        findings += _check_resources(what, container, path, context, known_extended)
        if context.shared_resources and what != "ephemeral container":
            findings += _check_shared_units(what, container, path, spec, context.shared_resources)
        for position, mount in enumerate(as_list(container.get("volumeMounts"))):
            mount_name = as_dict(mount).get("name")
            if isinstance(mount_name, str) and mount_name not in volumes:
                findings.append(_error(join(path, "volumeMounts", position, "name"),
                                       f"volume {show(mount_name)} is not defined in the pod's volumes",
                                       "unknown-volume"))
        for position, device in enumerate(as_list(container.get("volumeDevices"))):
            device_name = as_dict(device).get("name")
            if isinstance(device_name, str) and device_name not in volumes:
                findings.append(_error(join(path, "volumeDevices", position, "name"),
                                       f"volume {show(device_name)} is not defined in the pod's volumes",
                                       "unknown-volume"))
        for position, claim in enumerate(as_list(as_dict(container.get("resources")).get("claims"))):
            claim = as_dict(claim)
            claim_name = claim.get("name")
            claim_path = join(path, "resources", "claims", position)
            if not isinstance(claim_name, str):
                continue
            used_claims.add(claim_name)
            if claim_name not in pod_claims:
                findings.append(_error(join(claim_path, "name"),
                                       f"{what} uses claim {show(claim_name)}, which is not in the pod's "
                                       f"resourceClaims (it has: {_listing(pod_claims)})", "unknown-pod-claim",
                                       "add it to spec.resourceClaims or fix the name"))
                continue
            request = claim.get("request")
            requests = pod_claims[claim_name]
            if isinstance(request, str) and request and requests is not None and request not in requests:
                findings.append(_error(join(claim_path, "request"),
                                       f"claim {show(claim_name)} has no request {show(request)} (it has: "
                                       f"{_listing(requests)})", "unknown-claim-request"))
    for claim_name in pod_claims:
        if claim_name not in used_claims:
            findings.append(_warning(join(spec_path, "resourceClaims"),
                                     f"pod claim {show(claim_name)} is not used by any container: its devices are "
                                     "allocated but no container gets them", "unused-pod-claim",
                                     "list it under the container's resources.claims"))
    findings += _check_tolerations(spec, spec_path, context)
    findings += _check_node_affinity(spec, spec_path)
    return findings


def _check_tolerations(spec: dict[str, Any], spec_path: str, context: ValidationContext) -> list[ValidationFinding]:
    """The API server's toleration rules, and the Lt/Gt operators of Kubernetes 1.35+ (an alpha feature gate)."""
    findings: list[ValidationFinding] = []
    version = kubernetes_version(context.kubernetes_version)
    for position, toleration in enumerate(as_list(spec.get("tolerations"))):
        toleration = as_dict(toleration)
        path = join(spec_path, "tolerations", position)
        key, operator, value = toleration.get("key") or "", toleration.get("operator") or "Equal", toleration.get(
            "value") or ""
        if operator not in ("Equal", "Exists", "Lt", "Gt"):
            findings.append(_error(join(path, "operator"), f"toleration operator {show(operator)} is not Equal, "
                                   "Exists, Lt or Gt", "invalid-toleration"))
        elif not key and operator != "Exists":
            findings.append(_error(join(path, "operator"), "a toleration without a key must use operator Exists "
                                   "(it then tolerates every taint)", "invalid-toleration"))
        elif operator == "Exists" and value:
            findings.append(_error(join(path, "value"), "a toleration with operator Exists must not have a value",
                                   "invalid-toleration"))
        elif operator in ("Lt", "Gt"):
            if not comparisons_enabled(version):
                findings.append(_error(join(path, "operator"), f"toleration operator {operator} needs Kubernetes "
                                       f"1.35 or later; the cluster runs {plain(context.kubernetes_version)}",
                                       "toleration-operator-unsupported", "use Equal or Exists"))
            elif not re.fullmatch(r"-?(?:0|[1-9]\d{0,18})", value if isinstance(value, str) else ""):
                findings.append(_error(join(path, "value"), f"toleration operator {operator} compares numbers: "
                                       f"the value {show(value)} is not a decimal integer", "invalid-toleration"))
            else:
                findings.append(_warning(join(path, "operator"), f"toleration operator {operator} needs the "
                                         "TaintTolerationComparisonOperators feature gate (alpha): without it the "
                                         "API server refuses the pod", "toleration-operator-alpha"))
    return findings


def _check_node_affinity(spec: dict[str, Any], spec_path: str) -> list[ValidationFinding]:
    """A required node-affinity requirement that does not parse makes its whole term match no node (kube-scheduler
    treats the term as not matching, even a NotIn that would hold)."""
    findings: list[ValidationFinding] = []
    required = as_dict(as_dict(as_dict(spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"))
    for t, term in enumerate(as_list(required.get("nodeSelectorTerms"))):
        term_path = join(spec_path, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                         "nodeSelectorTerms", t)
        problems = [failure for failure in term_failures(term, {}, "") if "not a valid" in failure]
        if problems:
            findings.append(_error(term_path, f"this term matches no node: {problems[0]}", "invalid-node-affinity",
                                   "fix the key, operator or values (In/NotIn values must be valid label values; "
                                   "Gt/Lt take one integer)"))
    return findings


def _volume_names(spec: dict[str, Any], spec_path: str, findings: list[ValidationFinding]) -> set[str]:
    names: set[str] = set()
    for position, volume in enumerate(as_list(spec.get("volumes"))):
        name = as_dict(volume).get("name")
        if not isinstance(name, str):
            continue
        path = join(spec_path, "volumes", position, "name")
        if problem := dns_label_problem(name):
            findings.append(_error(path, f"volume name {show(name)} {problem}", "invalid-name"))
        elif name in names:
            findings.append(_error(path, f"volume name {show(name)} is used twice", "duplicate-volume-name"))
        names.add(name)
    return names


def _pod_claims(
    holder: PodHolder, context: ValidationContext, manifest: Manifest, findings: list[ValidationFinding]
) -> dict[str, set[str] | None]:
    """Pod claim name → request names of the claim when the manifest defines it (None when it is elsewhere)."""
    claims: dict[str, set[str] | None] = {}
    for position, entry in enumerate(as_list(holder.spec.get("resourceClaims"))):
        entry = as_dict(entry)
        path = join(holder.spec_path, "resourceClaims", position)
        name = entry.get("name")
        if not isinstance(name, str):
            continue
        if problem := dns_label_problem(name):
            findings.append(_error(join(path, "name"), f"pod claim name {show(name)} {problem}", "invalid-name"))
        elif name in claims:
            findings.append(_error(join(path, "name"), f"pod claim name {show(name)} is used twice",
                                   "duplicate-pod-claim"))
        claim_name = entry.get("resourceClaimName")
        template_name = entry.get("resourceClaimTemplateName")
        if bool(claim_name) == bool(template_name):
            findings.append(_error(path, "exactly one of resourceClaimName or resourceClaimTemplateName is required",
                                   "pod-claim-source"))
            claims[name] = None
            continue
        source, target = (
            ("resourceClaimName", manifest.claims) if claim_name else ("resourceClaimTemplateName", manifest.templates)
        )
        referenced = as_str(claim_name or template_name)
        spec = target.get((holder.namespace, referenced))
        if spec is None:
            elsewhere = sorted(ns for ns, other in target if other == referenced)
            if elsewhere:
                findings.append(_error(join(path, source),
                                       f"{show(referenced)} is defined in this manifest for namespace "
                                       f"{_listing(elsewhere)}, but the pod runs in {show(holder.namespace)}; "
                                       "claims are only visible inside their namespace", "claim-other-namespace"))
            # Otherwise it may exist in the cluster: the feasibility layer resolves it.
        claims[name] = request_names(spec) if spec is not None else None
    return claims


def _check_image(what: str, container: dict[str, Any], path: str) -> list[ValidationFinding]:
    image = container.get("image")
    image_path = join(path, "image")
    if image is None or image == "":
        if what == "ephemeral container":
            return []
        return [_error(image_path, f"the {what} has no image", "image-required")]
    if not isinstance(image, str):
        return []
    if image != image.strip():
        return [_error(image_path, f"image {show(image)} has leading or trailing whitespace", "invalid-image")]
    if len(image) > 4096 or not _IMAGE.fullmatch(image):
        return [_error(image_path, f"{show(image)} is not a valid image reference", "invalid-image",
                       "use registry/repository:tag or registry/repository@sha256:<digest>, lowercase repository")]
    return []


def _check_resources(
    what: str, container: dict[str, Any], path: str, context: ValidationContext, known_extended: set[str] | None
) -> list[ValidationFinding]:
    findings: list[ValidationFinding] = []
    resources = as_dict(container.get("resources"))
    requests, limits = as_dict(resources.get("requests")), as_dict(resources.get("limits"))
    parsed: dict[str, dict[str, Fraction]] = {"requests": {}, "limits": {}}
    for section, values in (("requests", requests), ("limits", limits)):
        for name, value in values.items():
            entry_path = join(path, "resources", section, name)
            extended = is_extended_resource(name)
            if not extended and not is_native_container_resource(name):
                findings.append(_unknown_kind_of_resource(name, entry_path, known_extended))
                continue
            if extended and (problem := qualified_name_problem(name)):
                findings.append(_error(entry_path, f"resource name {show(name)} {problem}", "invalid-resource-name"))
                continue
            amount = quantity(value)
            if amount is None:
                findings.append(_error(entry_path, f"{show(value)} is not a valid quantity", "invalid-quantity",
                                       "use a number or a quantity such as 500m, 2 or 16Gi"))
                continue
            if amount < 0:
                findings.append(_error(entry_path, f"{plain(name)} must not be negative", "negative-quantity"))
                continue
            if extended and amount.denominator != 1:
                findings.append(_error(
                    entry_path,
                    f"{plain(name)} is {show(value)}: extended resources are whole units, there are no fractional "
                    "GPUs",
                    "extended-resource-not-integer",
                    "request a whole number; for a share of a card choose a MIG, time-slicing or MPS offering",
                ))
                continue
            parsed[section][name] = amount
    for name in dict.fromkeys([*requests, *limits]):
        if not is_extended_resource(name):
            request, limit = parsed["requests"].get(name), parsed["limits"].get(name)
            if request is not None and limit is not None and request > limit:
                findings.append(_error(join(path, "resources", "requests", name),
                                       f"the {plain(name)} request is larger than its limit", "request-exceeds-limit"))
            continue
        if name in requests and name not in limits:
            findings.append(_error(
                join(path, "resources", "requests", name),
                f"{plain(name)} is in requests but not in limits: extended resources must be declared in limits",
                "extended-resource-not-in-limits",
                f"move it to limits ({plain(name)}: {plain(requests[name])}); the request defaults to the limit",
            ))
        elif name in parsed["requests"] and name in parsed["limits"] and parsed["requests"][name] != parsed["limits"][
                name]:
            findings.append(_error(
                join(path, "resources", "requests", name),
                f"{plain(name)} request {show(requests[name])} differs from the limit {show(limits[name])}: extended "
                "resources cannot be overcommitted, request and limit must be equal",
                "extended-resource-request-not-limit",
                "remove the request; it defaults to the limit",
            ))
        if known_extended is not None and name not in known_extended and (name in limits or name in requests):
            section = "limits" if name in limits else "requests"
            findings.append(_unknown_to_cluster(name, join(path, "resources", section, name), context,
                                                known_extended))
    return findings


def _placeable(spec: dict[str, Any], node: SharedNode) -> bool:
    """Whether the scheduler may put the pod on the node: nodeSelector, required node affinity and taints."""
    selector = as_dict(spec.get("nodeSelector"))
    if any(node.labels.get(str(key)) != value for key, value in selector.items()):
        return False
    node_affinity = as_dict(as_dict(spec.get("affinity")).get("nodeAffinity"))
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is not None and not node_selector_matches(required, node.labels, node.name):
        return False
    return not untolerated_taints(node.taints, as_list(spec.get("tolerations")))


def _check_shared_units(
    what: str, container: dict[str, Any], path: str, spec: dict[str, Any], shared: dict[str, list[SharedNode]]
) -> list[ValidationFinding]:
    """More than one shared unit in one container (catalog/sharing.py): the device plugin of MPS pools, and of
    time-sliced pools with failRequestsGreaterThanOne, refuses it at kubelet admission after the scheduler bound the
    pod; elsewhere the replicas are granted but are not cards."""
    findings: list[ValidationFinding] = []
    resources = as_dict(container.get("resources"))
    limits, requests = as_dict(resources.get("limits")), as_dict(resources.get("requests"))
    for name in dict.fromkeys([*limits, *requests]):
        nodes = shared.get(name) if isinstance(name, str) else None
        amount = quantity(limits.get(name, requests.get(name)))
        if not nodes or amount is None or amount.denominator != 1 or amount <= 1:
            continue
        count = int(amount)
        candidates = [node for node in nodes if _placeable(spec, node)]
        refusing = [node for node in candidates if node.refuses_more_than_one]
        entry_path = join(path, "resources", "limits" if name in limits else "requests", name)
        fix = (f"ask for 1 {plain(name)} per container (more pods or containers for more replicas), or choose a "
               "whole-card or MIG offering")
        if candidates and len(refusing) == len(candidates):
            findings.append(_error(entry_path, f"the {what} asks for {count} {plain(name)}: "
                                   f"{refused_message(plain(name), count)}", "shared-request-refused", fix))
        elif refusing:
            findings.append(_warning(
                entry_path,
                f"the {what} asks for {count} {plain(name)}; {len(refusing)} of the {len(candidates)} nodes it can "
                f"run on share {plain(name)} and their device plugin refuses more than one per container "
                f"({plugin_error(plain(name), count)}): scheduled there, the pod is rejected by the kubelet",
                "shared-request-may-be-refused",
                "pin the pod to whole-card nodes with a nodeSelector or required node affinity, or " + fix,
            ))
        elif candidates and all(node.sharing for node in candidates):
            findings.append(_warning(entry_path, f"the {what} asks for {count} {plain(name)}: "
                                     f"{not_additive_message('time-slice replica', count)}",
                                     "shared-units-not-additive", fix))
    return findings


def _unknown_kind_of_resource(name: str, path: str, known_extended: set[str] | None) -> ValidationFinding:
    close = _similar(name, (known_extended or set()) | set(NATIVE_CONTAINER_RESOURCES))
    fix = f"did you mean {_listing(close)}?" if close else "extended resources are written domain/name, e.g. " \
        "nvidia.com/gpu"
    return _error(path, f"{show(name)} is neither a standard container resource (cpu, memory, ephemeral-storage, "
                  "hugepages-<size>) nor an extended resource (domain/name)", "unknown-resource-name", fix)


def _unknown_to_cluster(name: str, path: str, context: ValidationContext, known: set[str]) -> ValidationFinding:
    nodes = (f"the cluster has {context.gpu_node_count} accelerator node(s) and {context.cpu_only_node_count} "
             "CPU-only node(s)")
    if name.startswith("nvidia.com/mig-"):
        profiles = sorted(k for k in known if k.startswith("nvidia.com/mig-"))
        if profiles:
            message = (f"no node offers the MIG profile {show(name)}; {nodes}. MIG profiles on offer: "
                       f"{_listing(profiles)}")
            close = _similar(name, profiles)
            fix = f"did you mean {_listing(close)}?" if close else "pick one of the MIG profiles on offer"
        else:
            message = f"no node offers MIG slices ({show(name)}); {nodes}, none of them partitioned with MIG"
            fix = "request whole GPUs, or ask the platform team for a MIG layout (nvidia.com/mig.config)"
        return _error(path, message, "unknown-mig-profile", fix)
    offered = sorted(k for k in known if not k.startswith(IMPLICIT_EXTENDED_PREFIX))
    message = (
        f"no node in the cluster offers {show(name)}; {nodes}, offering {_listing(offered)}. The pod would stay "
        f"Pending (Insufficient {plain(name)}) and adding CPU nodes will not help: no node type has this resource"
    )
    close = _similar(name, known)
    fix = f"did you mean {_listing(close)}?" if close else "request one of the resources the cluster offers"
    return _error(path, message, "unknown-resource-name", fix)


# DRA claims and templates.


def _check_claim_spec(spec: dict[str, Any], path: str, namespace: str, context: ValidationContext) -> list[ValidationFinding]:
    findings: list[ValidationFinding] = []
    devices_path = join(path, "devices")
    devices = as_dict(spec.get("devices"))
    requests = as_list(devices.get("requests"))
    if len(requests) > DEVICE_REQUESTS_MAX:
        findings.append(_error(join(devices_path, "requests"),
                               f"a claim has at most {DEVICE_REQUESTS_MAX} requests; this one has {len(requests)}",
                               "too-many-requests", "split the devices over several claims"))
    names: set[str] = set()
    total = 0
    too_large = False
    for position, request in enumerate(requests):
        request = as_dict(request)
        request_path = join(devices_path, "requests", position)
        findings += _check_request_name(request.get("name"), request_path, names, "request")
        exactly = request.get("exactly")
        first = as_list(request.get("firstAvailable"))
        if (exactly is not None) == bool(first):
            state = "both are set" if first else "neither is set"
            findings.append(_error(request_path, f"exactly one of `exactly` or `firstAvailable` is required; {state}",
                                   "request-exactly-or-first-available"))
        if isinstance(exactly, dict):
            count, more = _check_device_request(exactly, join(request_path, "exactly"), namespace, context,
                                                allow_admin=True)
            findings += more
            total += count
            too_large |= count > ALLOCATION_RESULTS_MAX
        if first:
            largest = _check_first_available(first, request_path, namespace, context, findings)
            total += largest
            too_large |= largest > ALLOCATION_RESULTS_MAX
    if total > ALLOCATION_RESULTS_MAX and not too_large:  # a single oversized count is reported at the count
        findings.append(_error(join(devices_path, "requests"),
                               f"the claim asks for {total:,} devices; one claim can be allocated at most "
                               f"{ALLOCATION_RESULTS_MAX}", "claim-too-many-devices",
                               "split the devices over several claims or pods"))
    findings += _check_request_references(devices, devices_path, request_names(spec))
    return findings


def _check_request_name(name: Any, path: str, seen: set[str], label: str) -> list[ValidationFinding]:
    """A request's or subrequest's name: a DNS label, unique among its siblings (`seen` collects them)."""
    if not isinstance(name, str):
        return []
    findings: list[ValidationFinding] = []
    if problem := dns_label_problem(name):
        findings.append(_error(join(path, "name"), f"{label} name {show(name)} {problem}", "invalid-name"))
    elif name in seen:
        findings.append(_error(join(path, "name"), f"{label} name {show(name)} is used twice",
                               "duplicate-request-name"))
    seen.add(name)
    return findings


def _check_first_available(first: list[Any], request_path: str, namespace: str, context: ValidationContext,
                           findings: list[ValidationFinding]) -> int:
    """Add the findings of a `firstAvailable` list; returns the most devices one of its subrequests asks for."""
    if len(first) > FIRST_AVAILABLE_MAX:
        findings.append(_error(join(request_path, "firstAvailable"),
                               f"firstAvailable has at most {FIRST_AVAILABLE_MAX} subrequests; this one has "
                               f"{len(first)}", "too-many-subrequests"))
    sub_names: set[str] = set()
    largest = 0
    for sub_position, sub in enumerate(first):
        sub = as_dict(sub)
        sub_path = join(request_path, "firstAvailable", sub_position)
        findings += _check_request_name(sub.get("name"), sub_path, sub_names, "subrequest")
        count, more = _check_device_request(sub, sub_path, namespace, context, allow_admin=False)
        findings += more
        largest = max(largest, count)
    return largest


def _check_request_references(devices: dict[str, Any], devices_path: str, known: set[str]) -> list[ValidationFinding]:
    """Constraints and config may only name requests of this claim."""
    findings: list[ValidationFinding] = []
    for section in ("constraints", "config"):
        for position, entry in enumerate(as_list(devices.get(section))):
            for ref_position, ref in enumerate(as_list(as_dict(entry).get("requests"))):
                if isinstance(ref, str) and ref not in known:
                    findings.append(_error(join(devices_path, section, position, "requests", ref_position),
                                           f"{show(ref)} is not a request of this claim (it has: {_listing(known)})",
                                           "unknown-claim-request"))
    return findings


def _check_device_request(
    request: dict[str, Any], path: str, namespace: str, context: ValidationContext, *, allow_admin: bool
) -> tuple[int, list[ValidationFinding]]:
    """Findings for an `exactly` request or a subrequest, and the devices it asks for (0 for All/invalid)."""
    findings: list[ValidationFinding] = []
    class_name = request.get("deviceClassName")
    if isinstance(class_name, str) and class_name:
        if problem := dns_subdomain_problem(class_name):
            findings.append(_error(join(path, "deviceClassName"), f"deviceClassName {show(class_name)} {problem}",
                                   "invalid-name"))
        elif context.device_classes is not None and class_name not in context.device_classes:
            close = _similar(class_name, context.device_classes)
            fix = f"did you mean {_listing(close)}?" if close else "use one of the cluster's DeviceClasses"
            findings.append(_error(join(path, "deviceClassName"),
                                   f"DeviceClass {show(class_name)} does not exist; the cluster has: "
                                   f"{_listing(context.device_classes)}", "unknown-device-class", fix))
    elif class_name == "":  # a missing one is a schema error
        findings.append(_error(join(path, "deviceClassName"), "deviceClassName is required", "required-field"))
    mode = request.get("allocationMode")
    mode = "ExactCount" if mode is None or mode == "" else mode
    count = request.get("count")
    devices = 0
    if mode == "ExactCount":
        value = 1 if count is None else as_int(count)
        if value is not None and value < 1:
            findings.append(_error(join(path, "count"), f"count must be at least 1 (it is {value})", "invalid-count"))
        elif value is not None and value > ALLOCATION_RESULTS_MAX:
            findings.append(_error(join(path, "count"),
                                   f"count {value:,} can never be allocated: one claim holds at most "
                                   f"{ALLOCATION_RESULTS_MAX} devices", "count-too-large",
                                   f"ask for at most {ALLOCATION_RESULTS_MAX} devices per claim"))
            devices = value
        elif value is not None:
            devices = value
    elif mode == "All":
        if count is not None:
            findings.append(_error(join(path, "count"), "count must not be set when allocationMode is All",
                                   "invalid-count"))
    elif isinstance(mode, str):
        findings.append(_error(join(path, "allocationMode"),
                               f"unsupported allocationMode {show(mode)}; use ExactCount or All",
                               "unsupported-value"))
    selectors = as_list(request.get("selectors"))
    if len(selectors) > SELECTORS_MAX:
        findings.append(_error(join(path, "selectors"),
                               f"at most {SELECTORS_MAX} selectors per request; this one has {len(selectors)}",
                               "too-many-selectors"))
    for position, selector in enumerate(selectors):
        expression = as_dict(as_dict(selector).get("cel")).get("expression")
        if isinstance(expression, str):
            finding = _check_cel(expression, join(path, "selectors", position, "cel", "expression"))
            if finding is not None:
                findings.append(finding)
    if allow_admin and request.get("adminAccess") is True:
        findings.append(_admin_access(join(path, "adminAccess"), namespace, context))
    return devices, findings


def _check_cel(expression: str, path: str) -> ValidationFinding | None:
    try:
        compile_selector(expression)
    except CelLimitError as exc:
        return _error(path, f"the selector exceeds a CEL limit: {plain(exc.message, 300)}", "cel-limit",
                      "simplify the expression")
    except CelError as exc:
        where = ""
        if exc.line is not None:
            where = f" at line {exc.line}, column {exc.column}"
            lines = expression.split("\n")
            if 1 <= exc.line <= len(lines) and exc.column is not None:
                start = max(exc.column - 1 - 20, 0)
                where += f" (near {show(lines[exc.line - 1][start:start + 40])})"
        return _error(path, f"the CEL selector does not compile{where}: {plain(exc.message, 300)}", "cel-invalid",
                      "see the DRA CEL environment: device.driver, device.attributes[\"<domain>\"].<name>, "
                      "device.capacity[\"<domain>\"].<name>")
    return None


def _admin_access(path: str, namespace: str, context: ValidationContext) -> ValidationFinding:
    granted = context.admin_access_namespaces
    if granted is None:
        return _warning(path, f"adminAccess gives access to devices other workloads are using; {ADMIN_ACCESS_MESSAGE} "
                        "(not verified: the cluster is unknown)", "admin-access-unverified",
                        "use adminAccess only for monitoring tools in a namespace with an approved grant")
    if namespace not in granted:
        return _error(path, ADMIN_ACCESS_MESSAGE, "admin-access-forbidden",
                      f"remove adminAccess, or request an adminAccess grant for namespace {show(namespace)} "
                      f"(it sets {ADMIN_ACCESS_LABEL}: \"true\"); ordinary workloads never need it")
    return ValidationFinding("semantics", "info", path,
                   f"adminAccess is granted in namespace {show(namespace)}: the devices are shared with the workloads "
                   "using them", "", "admin-access-granted")
