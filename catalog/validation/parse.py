"""Untrusted manifest text → documents: multi-document YAML or JSON, `kind: List` flattened, with hard limits.

The reading itself is `inventory.untrusted_text` (the one hardened reader, also used by the feasibility API, the
CLIs, form fields and kubeconfigs); its docstring lists what is refused and why: more than MAX_BYTES of text or more
than MAX_DOCUMENTS documents, YAML anchors, aliases and merge keys, nesting deeper than MAX_DEPTH, duplicate keys,
unknown tags, NaN and infinities. Here its refusals become findings, and documents that are not mappings are
reported.
"""

from __future__ import annotations

from typing import Any

from catalog.validation.findings import ValidationFinding, escape, show
from inventory.untrusted_text import MAX_BYTES, MAX_DEPTH, MAX_DOCUMENTS, UntrustedTextError, load_json, load_yaml
from inventory.untrusted_text import where as _where

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_DOCUMENTS", "parse_manifest"]

_AFTER_KEYS = " (after converting keys to strings)"


def _message(exc: UntrustedTextError) -> str:
    """The refusal as finding text: user text escaped, a duplicate key quoted like every value in findings."""
    if exc.code == "duplicate-key" and exc.key is not None:
        return f"duplicate key {show(exc.key)}{_AFTER_KEYS if exc.message.endswith(_AFTER_KEYS) else ''}"
    return escape(exc.message)


def _error(message: str, code: str, path: str = "", fix: str = "") -> ValidationFinding:
    return ValidationFinding("parse", "error", path, message, fix, code)


def _flatten(index: int, document: dict[str, Any], findings: list[ValidationFinding]) -> list[dict[str, Any]]:
    """A `kind: List` (v1) becomes its items; anything else is itself."""
    if document.get("kind") != "List" or "items" not in document:
        return [document]
    items = document.get("items")
    if not isinstance(items, list):
        findings.append(_error("`items` of a List must be a list", "not-a-mapping", f"documents[{index}].items"))
        return []
    out = []
    for position, item in enumerate(items):
        if isinstance(item, dict):
            out.append(item)
        else:
            findings.append(
                _error(
                    f"item {position} of the List is a {_type_name(item)}, not a mapping (an object)",
                    "not-a-mapping",
                    f"documents[{index}].items[{position}]",
                )
            )
    return out


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        return "sequence"
    if isinstance(value, dict):
        return "mapping"
    return "scalar"


def _too_many() -> ValidationFinding:
    return _error(
        f"the manifest has more than {MAX_DOCUMENTS} documents; the rest was not read",
        "too-many-documents",
        fix=f"split it into manifests of at most {MAX_DOCUMENTS} objects",
    )


def parse_manifest(text: str) -> tuple[list[dict[str, Any]], list[ValidationFinding]]:
    """Documents of a YAML (multi-document) or JSON manifest, and parse findings; never raises for bad input."""
    if not isinstance(text, str):
        return [], [_error("the manifest must be text", "not-text")]
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        return [], [
            _error(
                f"the manifest is {size:,} bytes; the limit is {MAX_BYTES:,}",
                "manifest-too-large",
                fix="split it into several manifests",
            )
        ]
    text = text.removeprefix("\ufeff")
    if not text.strip():
        return [], [_error("the manifest is empty", "empty-manifest")]
    findings: list[ValidationFinding] = []
    documents: list[dict[str, Any]] = []
    if text.lstrip()[:1] in "{[":
        try:
            raw = load_json(text)
        except UntrustedTextError as exc:
            if exc.code != "json-syntax":
                return [], [_error(_message(exc), exc.code)]
            try:  # a YAML flow mapping also starts with "{"
                raw = _load_yaml(text, findings)
            except UntrustedTextError:
                return [], [_error(_message(exc), exc.code)]
        for index, item in enumerate(raw):
            _collect(index, item, None, documents, findings)
        return documents[:MAX_DOCUMENTS], findings
    try:
        raw = _load_yaml(text, findings)
    except UntrustedTextError as exc:
        return documents, [*findings, _error(_message(exc) + _where(exc.mark), exc.code)]
    for index, item in enumerate(raw):
        _collect(index, item, None, documents, findings)
    if not documents and not findings:
        findings.append(_error("the manifest has no documents", "empty-manifest"))
    return documents[:MAX_DOCUMENTS], findings


def _collect(index: int, item: Any, mark: Any, documents: list[dict[str, Any]], findings: list[ValidationFinding]) -> None:
    if isinstance(item, tuple):  # (document, mark) from the YAML reader
        item, mark = item
    if not isinstance(item, dict):
        findings.append(
            _error(
                f"document {index} is a {_type_name(item)}{_where(mark)}, not a mapping (a Kubernetes object)",
                "not-a-mapping",
                f"documents[{index}]",
                fix="each document must be an object with apiVersion, kind and metadata",
            )
        )
        return
    documents.extend(_flatten(index, item, findings))
    if len(documents) > MAX_DOCUMENTS and not any(f.code == "too-many-documents" for f in findings):
        findings.append(_too_many())


def _load_yaml(text: str, findings: list[ValidationFinding]) -> list[Any]:
    """(document, start mark) pairs; empty documents are skipped. Raises UntrustedTextError."""
    documents, truncated = load_yaml(text, max_documents=MAX_DOCUMENTS)
    if truncated:
        findings.append(_too_many())
    return documents
