"""Layer 1: strict validation against the official OpenAPI-derived JSON schema of the cluster's Kubernetes version.

The schemas come from kubernetes-validate (pinned); its "-strict" variants forbid unknown fields, as the API server's
strict field validation does. We run jsonschema ourselves (iter_errors) to report every error, not just the first,
and translate each into our path format and a readable message that does not echo large or hostile values.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import threading
from importlib import resources
from typing import Any

import jsonschema
from referencing import Registry, Resource

from catalog.validation.findings import ValidationFinding, child, document_path, escape, show
from catalog.validation.objects import CLAIM, CLAIM_TEMPLATE, JOB, POD, SUPPORTED, type_of
from inventory.k8s.semantics import kubernetes_version

MAX_FINDINGS_PER_DOCUMENT = 50
# Validators whose failure means the document does not have the shape the later layers read.
HARD_VALIDATORS = frozenset({"type", "oneOf", "anyOf", "allOf", "not"})

_FILES = {
    POD: "pod-v1.json",
    JOB: "job-batch-v1.json",
    CLAIM: "resourceclaim-resource-v1.json",
    CLAIM_TEMPLATE: "resourceclaimtemplate-resource-v1.json",
}
_lock = threading.Lock()


def _schema_root() -> Any:
    return resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")


@functools.lru_cache(maxsize=1)
def available_versions() -> tuple[tuple[int, int, int], ...]:
    """The Kubernetes versions kubernetes-validate ships strict schemas for, oldest first."""
    found = []
    for entry in _schema_root().iterdir():
        match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)-local-strict", entry.name)
        if match:
            found.append((int(match[1]), int(match[2]), int(match[3])))
    return tuple(sorted(found))


def resolve_version(requested: str) -> tuple[str, str]:
    """The schema version to use for `requested` (the newest one not newer than it) and a note when it differs."""
    versions = available_versions()
    wanted = kubernetes_version(requested)
    newest = versions[-1]
    if wanted is None:
        return _text(newest), f"{show(requested)} is not a Kubernetes version; using the schema of {_short(newest)}"
    candidates = [v for v in versions if v[:2] <= wanted]
    if not candidates:
        oldest = versions[0]
        return _text(oldest), (
            f"no schema for Kubernetes {wanted[0]}.{wanted[1]}; using the oldest available, {_short(oldest)}"
        )
    chosen = candidates[-1]
    if chosen[:2] != wanted:
        return _text(chosen), (
            f"no schema for Kubernetes {wanted[0]}.{wanted[1]}; using the newest older one, {_short(chosen)}"
        )
    return _text(chosen), ""


def _text(version: tuple[int, int, int]) -> str:
    return ".".join(map(str, version))


def _short(version: tuple[int, int, int]) -> str:
    return f"{version[0]}.{version[1]}"


@functools.lru_cache(maxsize=4)
def _definitions(version: str) -> Any:
    path = _schema_root().joinpath(f"v{version}-local-strict").joinpath("_definitions.json")
    return json.loads(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=32)
def _validator(version: str, filename: str) -> jsonschema.Draft202012Validator | None:
    path = _schema_root().joinpath(f"v{version}-local-strict").joinpath(filename)
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    registry: Registry = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(_definitions(version)) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validator_for(version: str, kind: tuple[str, str]) -> jsonschema.Draft202012Validator | None:
    with _lock:  # the first build of a validator loads ~1.5 MB of definitions; do it once
        return _validator(version, _FILES[kind])


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _types(schema: Any) -> list[str]:
    declared = schema.get("type", []) if isinstance(schema, dict) else []
    declared = [declared] if isinstance(declared, str) else list(declared)
    return [t for t in declared if t != "null"]


def _path(base: str, parts: Any) -> str:
    path = base
    for part in parts:
        path = child(path, part)
    return path


def _error_findings(base: str, error: jsonschema.ValidationError) -> list[ValidationFinding]:
    path = _path(base, error.absolute_path)
    validator = error.validator
    if validator == "additionalProperties" and isinstance(error.instance, dict):
        known = sorted(error.schema.get("properties", {})) if isinstance(error.schema, dict) else []
        out = []
        for name in sorted(set(error.instance) - set(known)):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
            fix = f"did you mean `{close[0]}`?" if close else "remove it; the API server rejects unknown fields"
            out.append(ValidationFinding("schema", "error", child(path, name), f"unknown field {show(name)}", fix,
                               "unknown-field"))
        return out
    if validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        return [
            ValidationFinding("schema", "error", child(path, name), f"required field `{escape(name)}` is missing", "",
                    "required-field")
            for name in missing
        ]
    if validator == "type":
        wanted = " or ".join(_types({"type": error.validator_value})) or "null"
        message = f"expected {wanted}, got {_json_type(error.instance)}"
        return [ValidationFinding("schema", "error", path, message, "", "wrong-type")]
    if validator in ("oneOf", "anyOf"):
        options = sorted({t for sub in error.validator_value for t in _types(sub)})
        wanted = " or ".join(options) or "a different value"
        message = f"expected {wanted}, got {_json_type(error.instance)}"
        if options == ["number", "string"]:
            message = f"expected a quantity (a number or a string such as \"1\" or \"500m\"), got {_json_type(error.instance)}"
        return [ValidationFinding("schema", "error", path, message, "", "wrong-type")]
    if validator == "enum":
        allowed = ", ".join(show(value) for value in error.validator_value[:20])
        return [ValidationFinding("schema", "error", path, f"unsupported value {show(error.instance)}; allowed: {allowed}", "",
                        "unsupported-value")]
    message = escape(error.message)
    if len(message) > 200:
        message = message[:199] + "…"
    return [ValidationFinding("schema", "error", path, message, "", f"schema-{validator}")]


def check_schema(index: int, document: dict[str, Any], version: str) -> tuple[list[ValidationFinding], bool]:
    """Schema findings for one document and whether it failed hard (later layers must skip it)."""
    base = document_path(index)
    kind = type_of(document)
    api_version, kind_name = kind
    if not api_version or not kind_name:
        missing = [f for f in ("apiVersion", "kind") if not isinstance(document.get(f), str) or not document.get(f)]
        return [
            ValidationFinding("schema", "error", child(base, field), f"`{field}` is missing or not a string", "",
                    "missing-type")
            for field in missing
        ], True
    if kind not in SUPPORTED:
        same_kind = [api for api, name in SUPPORTED if name == kind_name]
        if same_kind:
            return [ValidationFinding(
                "schema", "error", child(base, "apiVersion"),
                f"{show(api_version)} {escape(kind_name)} is not supported here",
                f"use apiVersion: {same_kind[0]}", "unsupported-api-version",
            )], True
        supported = ", ".join(f"{name} ({api})" for api, name in SUPPORTED)
        return [ValidationFinding(
            "schema", "error", child(base, "kind"),
            f"{show(kind_name)} ({show(api_version)}) is not supported here; the validator checks {supported}",
            "validate other objects with kubectl apply --dry-run=server", "unsupported-kind",
        )], True
    validator = validator_for(version, kind)
    if validator is None:
        major_minor = ".".join(version.split(".")[:2])
        return [ValidationFinding(
            "schema", "error", child(base, "apiVersion"),
            f"Kubernetes {major_minor} does not serve {api_version} {kind_name}",
            "DRA's resource.k8s.io/v1 needs Kubernetes 1.34 or newer", "schema-not-found",
        )], True
    findings: list[ValidationFinding] = []
    hard = False
    errors = sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])
    for error in errors:
        hard = hard or error.validator in HARD_VALIDATORS
        findings.extend(_error_findings(base, error))
    if len(findings) > MAX_FINDINGS_PER_DOCUMENT:
        hidden = len(findings) - MAX_FINDINGS_PER_DOCUMENT
        findings = findings[:MAX_FINDINGS_PER_DOCUMENT]
        findings.append(ValidationFinding("schema", "info", base, f"{hidden} more schema error(s) not shown", "",
                                "findings-truncated"))
    return findings, hard
