"""Untrusted manifest text → documents: multi-document YAML or JSON, `kind: List` flattened, with hard limits.

What is refused, and why:
- more than MAX_BYTES of text or more than MAX_DOCUMENTS documents (checked while reading: the rest is not parsed);
- YAML anchors, aliases and merge keys: aliases are how "billion laughs" documents blow up, and nothing the portal
  accepts needs them;
- nesting deeper than MAX_DEPTH (checked before each nested node is built, so the recursive YAML composer and the
  normaliser never go deep);
- duplicate keys (the API server's strict field validation rejects them too, and a second `privileged:` lower down
  is a good way to hide something from a reviewer);
- documents that are not mappings, tags PyYAML's safe loader does not know, NaN and infinities.

YAML timestamps stay strings and non-string keys become strings, as the API server's YAML→JSON conversion does.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from catalog.validation.findings import Finding, escape, show

MAX_BYTES = 1024 * 1024
MAX_DOCUMENTS = 50
MAX_DEPTH = 64


class _RefusedError(Exception):
    def __init__(self, message: str, code: str, mark: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.mark = mark


def _where(mark: Any) -> str:
    if mark is None:
        return ""
    return f" at line {mark.line + 1}, column {mark.column + 1}"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors, aliases or merge keys, with a depth limit and duplicate-key errors."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _RefusedError("YAML aliases (*name) are not accepted", "yaml-alias", event.start_mark)
        if getattr(event, "anchor", None):
            raise _RefusedError("YAML anchors (&name) are not accepted", "yaml-anchor", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _RefusedError(f"the document is nested deeper than {MAX_DEPTH} levels", "too-deep", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise _RefusedError("YAML merge keys (<<) are not accepted", "yaml-merge-key", key_node.start_mark)
                key = self.construct_object(key_node, deep=True)
                try:
                    identity = key  # Python equality: true and 1 would collapse into one dict key as well
                    duplicate = identity in seen
                except TypeError:
                    raise _RefusedError("a mapping key must be a scalar", "yaml-syntax", key_node.start_mark) from None
                if duplicate:
                    raise _RefusedError(f"duplicate key {show(_key_text(key))}", "duplicate-key", key_node.start_mark)
                seen.add(identity)
        return super().construct_mapping(node, deep=deep)


def _scalar_text(loader: yaml.SafeLoader, node: Any) -> str:
    return str(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _scalar_text)
_Loader.add_constructor("tag:yaml.org,2002:value", _scalar_text)
_Loader.add_constructor("tag:yaml.org,2002:binary", _scalar_text)


def _key_text(key: Any) -> str:
    """A non-string YAML key as the API server's YAML→JSON conversion spells it."""
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _normalize(value: Any, depth: int = 0) -> Any:
    """JSON-compatible data: string keys, lists for sequences, strings for odd scalars; raises _RefusedError."""
    if depth > MAX_DEPTH:
        raise _RefusedError(f"the document is nested deeper than {MAX_DEPTH} levels", "too-deep")
    if isinstance(value, dict):
        normalized: dict[str, Any] = {}
        for key, item in value.items():
            text = _key_text(key)
            if text in normalized:
                raise _RefusedError(f"duplicate key {show(text)} (after converting keys to strings)", "duplicate-key")
            normalized[text] = _normalize(item, depth + 1)
        return normalized
    if isinstance(value, list | tuple):
        return [_normalize(item, depth + 1) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise _RefusedError("NaN and infinite numbers are not valid in a Kubernetes object", "not-finite-number")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _error(message: str, code: str, path: str = "", fix: str = "") -> Finding:
    return Finding("parse", "error", path, message, fix, code)


def _load_json(text: str) -> list[Any]:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise _RefusedError(f"duplicate key {show(key)}", "duplicate-key")
            result[key] = value
        return result

    def constant(name: str) -> Any:
        raise _RefusedError(f"{name} is not valid in a Kubernetes object", "not-finite-number")

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except RecursionError:
        raise _RefusedError(f"the document is nested deeper than {MAX_DEPTH} levels", "too-deep") from None
    except json.JSONDecodeError as exc:
        raise _RefusedError(f"invalid JSON: {escape(exc.msg)} at line {exc.lineno}, column {exc.colno}", "json-syntax") from None
    return [_normalize(data)]


def _flatten(index: int, document: dict[str, Any], findings: list[Finding]) -> list[dict[str, Any]]:
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


def _too_many() -> Finding:
    return _error(
        f"the manifest has more than {MAX_DOCUMENTS} documents; the rest was not read",
        "too-many-documents",
        fix=f"split it into manifests of at most {MAX_DOCUMENTS} objects",
    )


def parse_manifest(text: str) -> tuple[list[dict[str, Any]], list[Finding]]:
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
    findings: list[Finding] = []
    documents: list[dict[str, Any]] = []
    if text.lstrip()[:1] in "{[":
        try:
            raw = _load_json(text)
        except _RefusedError as exc:
            if exc.code != "json-syntax":
                return [], [_error(exc.message, exc.code)]
            try:  # a YAML flow mapping also starts with "{"
                raw = _load_yaml(text, findings)
            except _RefusedError:
                return [], [_error(exc.message, exc.code)]
        for index, item in enumerate(raw):
            _collect(index, item, None, documents, findings)
        return documents[:MAX_DOCUMENTS], findings
    try:
        raw = _load_yaml(text, findings)
    except _RefusedError as exc:
        return documents, [*findings, _error(exc.message + _where(exc.mark), exc.code)]
    for index, item in enumerate(raw):
        _collect(index, item, None, documents, findings)
    if not documents and not findings:
        findings.append(_error("the manifest has no documents", "empty-manifest"))
    return documents[:MAX_DOCUMENTS], findings


def _collect(index: int, item: Any, mark: Any, documents: list[dict[str, Any]], findings: list[Finding]) -> None:
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


def _load_yaml(text: str, findings: list[Finding]) -> list[Any]:
    """(document, start mark) pairs; empty documents are skipped. Raises _RefusedError."""
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:  # the reader refuses control characters before any parsing
        raise _RefusedError(f"invalid YAML: {escape(str(exc))[:200]}", "yaml-syntax") from None
    out: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
                continue  # an empty document
            if len(out) >= MAX_DOCUMENTS:
                findings.append(_too_many())
                break
            data = loader.construct_document(node)
            if data is None:
                continue
            out.append((_normalize(data), node.start_mark))
    except _RefusedError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise _RefusedError(f"invalid YAML: {escape(str(problem))}", "yaml-syntax", mark) from None
    except yaml.YAMLError as exc:
        raise _RefusedError(f"invalid YAML: {escape(str(exc))[:200]}", "yaml-syntax") from None
    except RecursionError:
        raise _RefusedError(f"the document is nested deeper than {MAX_DEPTH} levels", "too-deep") from None
    finally:
        loader.dispose()
    return out
