"""The result types of the manifest validator and the helpers that render user values safely.

Every value taken from a manifest that appears in a message or a path goes through `show()`/`child()`: control,
format (bidi) and separator characters are escaped and long values are cut, so a hostile name cannot forge lines in a
CI log, move the terminal cursor or make the report huge.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from typing import Any

LAYERS = ("parse", "schema", "semantics", "policy", "quota", "feasibility", "dry-run")
SEVERITIES = ("error", "warning", "info")

MAX_SHOWN = 80  # characters of a user value quoted in a message
MAX_KEY_SHOWN = 120  # characters of a map key in a path
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


@dataclass(frozen=True)
class Finding:
    """One problem (or note) about a manifest: where it is, how bad it is and how to fix it."""

    layer: str  # one of LAYERS
    severity: str  # one of SEVERITIES
    path: str  # "documents[0].spec.containers[0].resources.limits['nvidia.com/gpu']"; "" for the whole input
    message: str
    fix: str = ""
    code: str = ""  # stable machine code (docs/validation.md lists them)


@dataclass
class ValidationReport:
    """Findings of every layer for a list of documents. Building it changes nothing anywhere."""

    documents: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(finding.severity == "error" for finding in self.findings)

    def by_layer(self) -> dict[str, list[Finding]]:
        grouped: dict[str, list[Finding]] = {}
        for layer in (*LAYERS, *sorted({f.layer for f in self.findings} - set(LAYERS))):
            found = [f for f in self.findings if f.layer == layer]
            if found:
                grouped[layer] = found
        return grouped

    def counts(self) -> dict[str, int]:
        return {severity: sum(1 for f in self.findings if f.severity == severity) for severity in SEVERITIES}

    def as_json(self) -> dict[str, Any]:
        """A JSON-serialisable summary: the documents are summarised (kind/name/namespace), not echoed."""
        return {
            "ok": self.ok,
            "counts": self.counts(),
            "documents": [document_summary(index, doc) for index, doc in enumerate(self.documents)],
            "findings": [asdict(finding) for finding in self.findings],
        }


def escape(text: str, *, backslash: bool = True) -> str:
    """`text` with control/format/separator characters written as \\n, \\t or \\uXXXX (never interpreted).
    With `backslash=False` an existing backslash is kept (for text that was escaped already)."""
    out = []
    for char in text:
        if char in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[char])
        elif char == "\\" and backslash:
            out.append("\\\\")
        elif unicodedata.category(char) in _UNSAFE_CATEGORIES:
            code = ord(char)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def safe(text: str) -> str:
    """Terminal-safe text: control and format characters escaped, the rest (backslashes included) as is."""
    return escape(text if isinstance(text, str) else str(text), backslash=False)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def show(value: Any, limit: int = MAX_SHOWN) -> str:
    """A user value for a message: strings in double quotes, escaped and cut; other values as compact JSON."""
    if isinstance(value, str):
        return '"' + _cut(escape(value), limit).replace('"', '\\"') + '"'
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return _cut(escape(text), limit)


def plain(value: Any, limit: int = MAX_SHOWN) -> str:
    """A user value inside running text, without quotes (names that are already known to be harmless)."""
    return _cut(escape(value if isinstance(value, str) else str(value)), limit)


def child(path: str, key: str | int) -> str:
    """`path` extended by a map key or a list index, in the documents[0].spec.containers[0].limits['a/b'] format."""
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    key = key if isinstance(key, str) else str(key)
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}" if path else key
    quoted = "'" + _cut(escape(key), MAX_KEY_SHOWN).replace("'", "\\'") + "'"
    return f"{path}[{quoted}]"


def join(path: str, *keys: str | int) -> str:
    for key in keys:
        path = child(path, key)
    return path


def document_path(index: int) -> str:
    return f"documents[{index}]"


def document_summary(index: int, document: Any) -> dict[str, Any]:
    doc = document if isinstance(document, dict) else {}
    metadata = doc.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}

    def text(value: Any) -> str:
        return plain(value, 253) if isinstance(value, str) else ""

    return {
        "index": index,
        "apiVersion": text(doc.get("apiVersion")),
        "kind": text(doc.get("kind")),
        "namespace": text(metadata.get("namespace")),
        "name": text(metadata.get("name")) or text(metadata.get("generateName")),
    }


def format_text(report: ValidationReport) -> str:
    """The report for a terminal or a CI log: one block per finding, then a summary line."""
    lines = []
    for finding in report.findings:
        where = safe(finding.path) if finding.path else "(input)"
        code = f" [{safe(finding.code)}]" if finding.code else ""
        lines.append(f"{safe(finding.severity.upper()):7} {safe(finding.layer):11} {where}{code}")
        lines.extend(f"        {safe(part)}" for part in finding.message.split("\n"))
        if finding.fix:
            lines.extend(f"        fix: {safe(part)}" for part in finding.fix.split("\n"))
    counts = report.counts()
    verdict = "OK" if report.ok else "FAILED"
    lines.append(
        f"{verdict}: {len(report.documents)} document(s), {counts['error']} error(s), "
        f"{counts['warning']} warning(s), {counts['info']} info"
    )
    return "\n".join(lines) + "\n"
