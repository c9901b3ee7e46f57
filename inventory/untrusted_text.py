"""The one reader for YAML or JSON text that comes from outside: manifests (validator, feasibility API and CLIs),
form fields, kubeconfigs. PyYAML's safe loader alone still accepts "billion laughs" aliases and unbounded nesting,
and `json.loads` recurses until Python's stack gives out; this reader refuses them before anything large is built.

What is refused, and why:
- more than `max_bytes` of text or more than `max_documents` documents (checked while reading: the rest is not
  parsed);
- YAML anchors, aliases and merge keys: aliases are how "billion laughs" documents blow up, and nothing the portal
  accepts needs them;
- nesting deeper than MAX_DEPTH (checked before each nested node is built, so the recursive YAML composer and the
  normaliser never go deep);
- duplicate keys (the API server's strict field validation rejects them too, and a second `privileged:` lower down
  is a good way to hide something from a reviewer);
- tags PyYAML's safe loader does not know, NaN and infinities.

YAML timestamps stay strings and non-string keys become strings, as the API server's YAML→JSON conversion does.

It lives in `inventory` (the lowest layer that reads such text) so that every layer above can use it; the manifest
validator (`catalog.validation.parse`) turns its refusals into findings. `UntrustedTextError.message` may quote the
input: callers that show it in HTML or logs escape it as they escape any user text.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

MAX_BYTES = 1024 * 1024
MAX_DOCUMENTS = 50
MAX_DEPTH = 64


class UntrustedTextError(ValueError):
    """The text was refused. `code` is stable (`too-large`, `yaml-alias`, `too-deep`, `duplicate-key`, …); `key` is
    the duplicate key for `duplicate-key`; `mark` the YAML position, when known."""

    def __init__(self, message: str, code: str, mark: Any = None, key: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.mark = mark
        self.key = key

    def __str__(self) -> str:
        return self.message + where(self.mark)


def where(mark: Any) -> str:
    if mark is None:
        return ""
    return f" at line {mark.line + 1}, column {mark.column + 1}"


def _too_deep(mark: Any = None) -> UntrustedTextError:
    return UntrustedTextError(f"the document is nested deeper than {MAX_DEPTH} levels", "too-deep", mark)


def key_text(key: Any) -> str:
    """A non-string YAML key as the API server's YAML→JSON conversion spells it."""
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _duplicate(key: Any, mark: Any = None, after: str = "") -> UntrustedTextError:
    return UntrustedTextError(f"duplicate key {json.dumps(key_text(key))[:120]}{after}", "duplicate-key", mark,
                              key=key_text(key))


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader without anchors, aliases or merge keys, with a depth limit and duplicate-key errors."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML is untyped
        if isinstance(event, yaml.AliasEvent):
            raise UntrustedTextError("YAML aliases (*name) are not accepted", "yaml-alias", event.start_mark)
        if getattr(event, "anchor", None):
            raise UntrustedTextError("YAML anchors (&name) are not accepted", "yaml-anchor", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _too_deep(event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise UntrustedTextError("YAML merge keys (<<) are not accepted", "yaml-merge-key",
                                             key_node.start_mark)
                key = self.construct_object(key_node, deep=True)
                try:
                    identity = key  # Python equality: true and 1 would collapse into one dict key as well
                    duplicate = identity in seen
                except TypeError:
                    raise UntrustedTextError("a mapping key must be a scalar", "yaml-syntax",
                                             key_node.start_mark) from None
                if duplicate:
                    raise _duplicate(key, key_node.start_mark)
                seen.add(identity)
        return super().construct_mapping(node, deep=deep)


def _scalar_text(loader: yaml.SafeLoader, node: Any) -> str:
    return str(loader.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _scalar_text)
_Loader.add_constructor("tag:yaml.org,2002:value", _scalar_text)
_Loader.add_constructor("tag:yaml.org,2002:binary", _scalar_text)


def normalize(value: Any, depth: int = 0) -> Any:
    """JSON-compatible data: string keys, lists for sequences, strings for odd scalars; raises UntrustedTextError."""
    if depth > MAX_DEPTH:
        raise _too_deep()
    if isinstance(value, dict):
        normalized: dict[str, Any] = {}
        for key, item in value.items():
            text = key_text(key)
            if text in normalized:
                raise _duplicate(text, after=" (after converting keys to strings)")
            normalized[text] = normalize(item, depth + 1)
        return normalized
    if isinstance(value, list | tuple):
        return [normalize(item, depth + 1) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise UntrustedTextError("NaN and infinite numbers are not valid in a Kubernetes object", "not-finite-number")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def load_json(text: str) -> list[Any]:
    """One JSON document (as a one-element list); raises UntrustedTextError (code `json-syntax` for bad JSON)."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise _duplicate(key)
            result[key] = value
        return result

    def constant(name: str) -> Any:
        raise UntrustedTextError(f"{name} is not valid in a Kubernetes object", "not-finite-number")

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except RecursionError:
        raise _too_deep() from None
    except json.JSONDecodeError as exc:
        raise UntrustedTextError(f"invalid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
                                 "json-syntax") from None
    return [normalize(data)]


def load_yaml(text: str, *, max_documents: int = MAX_DOCUMENTS) -> tuple[list[tuple[Any, Any]], bool]:
    """((document, start mark) pairs, whether documents past `max_documents` were left unread); empty documents
    are skipped. Raises UntrustedTextError."""
    try:
        loader = _Loader(text)
    except yaml.YAMLError as exc:  # the reader refuses control characters before any parsing
        raise UntrustedTextError(f"invalid YAML: {str(exc)[:200]}", "yaml-syntax") from None
    out: list[tuple[Any, Any]] = []
    truncated = False
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
                continue  # an empty document
            if len(out) >= max_documents:
                truncated = True
                break
            data = loader.construct_document(node)
            if data is None:
                continue
            out.append((normalize(data), node.start_mark))
    except UntrustedTextError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise UntrustedTextError(f"invalid YAML: {problem}", "yaml-syntax", mark) from None
    except yaml.YAMLError as exc:
        raise UntrustedTextError(f"invalid YAML: {str(exc)[:200]}", "yaml-syntax") from None
    except RecursionError:
        raise _too_deep() from None
    finally:
        loader.dispose()
    return out, truncated


def text_size_error(text: str, *, max_bytes: int = MAX_BYTES) -> UntrustedTextError | None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        return UntrustedTextError(f"the text is {size:,} bytes; the limit is {max_bytes:,}", "too-large")
    return None


def load_documents(text: str, *, max_bytes: int = MAX_BYTES, max_documents: int = MAX_DOCUMENTS) -> list[Any]:
    """The documents of YAML (one or several) or JSON text, as JSON-compatible data (empty documents skipped).
    Raises UntrustedTextError for text over the limits, more than `max_documents` documents, anchors, aliases,
    merge keys, deep nesting, duplicate keys, unknown tags and syntax errors."""
    if not isinstance(text, str):
        raise UntrustedTextError("the input must be text", "not-text")
    too_large = text_size_error(text, max_bytes=max_bytes)
    if too_large is not None:
        raise too_large
    text = text.removeprefix("\ufeff")
    if text.lstrip()[:1] in ("{", "["):
        try:
            return load_json(text)
        except UntrustedTextError as exc:
            if exc.code != "json-syntax":
                raise
            try:  # a YAML flow mapping also starts with "{"
                documents, truncated = load_yaml(text, max_documents=max_documents)
            except UntrustedTextError:
                raise exc from None
    else:
        documents, truncated = load_yaml(text, max_documents=max_documents)
    if truncated:
        raise UntrustedTextError(f"more than {max_documents} documents", "too-many-documents")
    return [document for document, _mark in documents]
