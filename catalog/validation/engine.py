"""Runs the layers in order over a manifest's documents and collects one report. Nothing is created or written."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from typing import Any

from catalog.validation.context import ValidationContext
from catalog.validation.findings import (
    LAYERS,
    SEVERITIES,
    ValidationFinding,
    ValidationReport,
    document_path,
    plain,
    show,
)
from catalog.validation.objects import (
    CLAIM,
    CLAIM_TEMPLATE,
    PodHolder,
    metadata,
    namespace_of,
    pod_holder,
    type_of,
)
from catalog.validation.parse import parse_manifest
from catalog.validation.policy import check_policy
from catalog.validation.queues import check_queues
from catalog.validation.quota import check_quota
from catalog.validation.schema import check_schema, resolve_version
from catalog.validation.semantics import Manifest, check_semantics
from inventory.k8s.conversion import dra_to_v1, served_dra_version
from inventory.k8s.semantics import as_dict


def validate_manifest(text: str, context: ValidationContext) -> ValidationReport:
    """Parse, then validate. Parse errors stop the validation: fix the text first."""
    documents, findings = parse_manifest(text)
    if any(f.severity == "error" for f in findings):
        findings.append(ValidationFinding("parse", "info", "", "the documents were not validated further because the manifest "
                                "could not be read completely", "", "layers-skipped"))
        return ValidationReport(documents=documents, findings=findings)
    report = validate_documents(documents, context)
    report.findings[:0] = findings
    return report


def validate_documents(documents: list[dict[str, Any]], context: ValidationContext) -> ValidationReport:
    """All layers over already parsed documents (e.g. a POSTed JSON list). Never raises for bad documents."""
    findings: list[ValidationFinding] = []
    version, note = resolve_version(context.kubernetes_version)
    if note:
        findings.append(ValidationFinding("schema", "info", "", note, "", "schema-version"))
    valid: list[tuple[int, dict[str, Any]]] = []
    for index, document in enumerate(documents):
        if not isinstance(document, dict):
            findings.append(ValidationFinding("parse", "error", document_path(index), "the document is not a mapping (an "
                                    "object)", "", "not-a-mapping"))
            continue
        if context.dra_unavailable and served_dra_version(document):
            schema_findings, hard = [ValidationFinding(
                "schema", "error", document_path(index), f"DRA is unavailable on this cluster: {context.dra_unavailable}",
                "run it on a cluster that serves resource.k8s.io, or request the unit as an extended resource (device "
                "plugin)", "dra-unavailable")], True
        else:
            schema_findings, hard = check_schema(index, document, version)
        findings += schema_findings
        if hard:
            findings.append(ValidationFinding("schema", "info", document_path(index), "semantics, policy, quota and "
                                    "feasibility checks were skipped for this document: fix the schema errors first",
                                    "", "layers-skipped"))
        else:  # a DRA object written for an older cluster (v1beta1/v1beta2) is checked in the v1 shape
            valid.append((index, dra_to_v1(document, served_dra_version(document) or "v1")))
    manifest = Manifest.of(valid, context.default_namespace)
    holders: list[PodHolder] = []
    claim_documents: list[tuple[int, dict[str, Any]]] = []
    for index, document in valid:
        findings += check_semantics(index, document, context, manifest)
        holder = pod_holder(index, document, context.default_namespace)
        if holder is not None:
            holders.append(holder)
            findings += check_policy(holder, context)
        elif type_of(document) in (CLAIM, CLAIM_TEMPLATE):
            claim_documents.append((index, document))
        if not as_dict(document.get("metadata")).get("namespace"):
            findings.append(ValidationFinding("semantics", "info", document_path(index) + ".metadata",
                                    f"no namespace: it goes to the namespace of your kubectl context; checked as "
                                    f"{show(context.default_namespace)}", "", "namespace-defaulted"))
    if context.allowed_namespaces is not None:  # another tenant's namespace: no quota or feasibility disclosed
        allowed = context.allowed_namespaces
        holders = [holder for holder in holders if holder.namespace in allowed]
        claim_documents = [(index, document) for index, document in claim_documents
                           if namespace_of(document, context.default_namespace) in allowed]
    findings += check_quota(holders, claim_documents, context, manifest)
    findings += check_queues(holders, context.kueue)
    feasibility, gang_feasibility, dry_run = context.feasibility, context.gang_feasibility, context.dry_run
    if feasibility is not None:
        claims = [copy.deepcopy(document) for _index, document in claim_documents]
        for holder in holders:
            findings += _call(
                "feasibility", holder.index, holder.kind == "Job",
                partial(_run_feasibility, feasibility, holder, claims),
            )
            if gang_feasibility is not None and holder.pods > 1:
                findings += _call(
                    "feasibility", holder.index, holder.kind == "Job",
                    partial(_run_gang_feasibility, gang_feasibility, holder, claims),
                )
    if dry_run is not None:
        outside = sorted({namespace_of(d, context.default_namespace) for _i, d in valid} - context.dry_run_namespaces
                         ) if context.dry_run_namespaces is not None else []
        if outside:
            findings.append(ValidationFinding("dry-run", "info", "", f"the server dry-run was skipped: it runs only in tenant "
                                    f"namespaces you may target, not in {', '.join(show(n) for n in outside[:5])}",
                                    "", "layers-skipped"))
        elif len(valid) == len(documents):
            findings += _call("dry-run", None, False,
                              lambda: dry_run([copy.deepcopy(d) for d in documents]))
        else:
            findings.append(ValidationFinding("dry-run", "info", "", "the server dry-run was skipped: some documents failed "
                                    "the schema layer", "", "layers-skipped"))
    return ValidationReport(documents=list(documents), findings=findings)


def _run_feasibility(check: Callable[[dict[str, Any], list[dict[str, Any]]], list[ValidationFinding]], holder: PodHolder,
                     claims: list[dict[str, Any]]) -> list[ValidationFinding]:
    return check(_as_pod(holder), copy.deepcopy(claims))


def _run_gang_feasibility(check: Callable[[dict[str, Any], int, list[dict[str, Any]]], list[ValidationFinding]],
                          holder: PodHolder, claims: list[dict[str, Any]]) -> list[ValidationFinding]:
    return check(_as_pod(holder), holder.pods, copy.deepcopy(claims))


def _as_pod(holder: PodHolder) -> dict[str, Any]:
    """The pod a Pod document or a Job's template creates, as a Pod manifest in the Job's namespace."""
    if holder.kind == "Pod":
        return copy.deepcopy(holder.document)
    job_meta = metadata(holder.document)
    template = as_dict(as_dict(holder.document.get("spec")).get("template"))
    pod_meta = copy.deepcopy(as_dict(template.get("metadata")))
    pod_meta["name"] = f"{job_meta.get('name') or job_meta.get('generateName') or 'job'}-pod"
    pod_meta["namespace"] = holder.namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": copy.deepcopy(holder.spec)}


def _call(layer: str, index: int | None, job: bool, run: Callable[[], list[ValidationFinding]]) -> list[ValidationFinding]:
    """Run an injected layer. Its failure is reported as a warning (the layer did not run), never raised."""
    try:
        returned = run()
    except Exception as exc:  # noqa: BLE001 - a broken checker must not break validation
        return [ValidationFinding(layer, "warning", document_path(index) if index is not None else "",
                        f"the {layer} check could not run: {plain(type(exc).__name__)}: {plain(str(exc), 200)}", "",
                        f"{layer}-unavailable")]
    out = []
    for finding in returned or []:
        if not isinstance(finding, ValidationFinding):
            continue
        path = finding.path
        if index is not None and not path.startswith("documents["):
            if job and (path == "spec" or path.startswith(("spec.", "spec["))):
                path = "spec.template." + path
            path = f"{document_path(index)}.{path}" if path else document_path(index)
        severity = finding.severity if finding.severity in SEVERITIES else "info"
        out.append(ValidationFinding(finding.layer if finding.layer in LAYERS else layer, severity, path, finding.message,
                           finding.fix, finding.code))
    return out
