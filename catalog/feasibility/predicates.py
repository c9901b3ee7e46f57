"""Node predicates: node selector terms (core/v1 NodeSelector), the pod's nodeSelector, and taint formatting.

Semantics are those of `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`:
- terms are ORed, the requirements of a term ANDed; a term with neither expressions nor fields matches nothing, and
  so does an empty term list;
- `In` needs the label with one of the values; `NotIn` matches when the label is absent or has another value;
  `Exists`/`DoesNotExist` test presence; `Gt`/`Lt` compare integers (the label value and the single requirement value
  must both parse as integers, otherwise the requirement does not match);
- `matchFields` supports only `metadata.name` with `In`/`NotIn` and exactly one value;
- a term with an invalid requirement (unknown operator, wrong number of values) never matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "describe_requirement",
    "node_selector_matches",
    "requirement_matches",
    "taint_text",
    "term_failures",
    "term_matches",
]

_INT = re.compile(r"[+-]?\d{1,19}")


def _int64(text: Any) -> int | None:
    if not isinstance(text, str) or not _INT.fullmatch(text.strip()):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def _values(requirement: Mapping[str, Any]) -> list[str] | None:
    values = requirement.get("values")
    if values is None:
        return []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return None
    return values


def requirement_matches(requirement: Any, labels: Mapping[str, str]) -> bool:
    """One label requirement (`matchExpressions` entry) against node labels; invalid requirements never match."""
    if not isinstance(requirement, Mapping):
        return False
    key, operator, values = requirement.get("key"), requirement.get("operator"), _values(requirement)
    if not isinstance(key, str) or not key or values is None:
        return False
    present = key in labels
    match operator:
        case "In":
            return bool(values) and present and labels[key] in values
        case "NotIn":
            return bool(values) and (not present or labels[key] not in values)
        case "Exists":
            return not values and present
        case "DoesNotExist":
            return not values and not present
        case "Gt" | "Lt":
            if len(values) != 1 or not present:
                return False
            wanted, actual = _int64(values[0]), _int64(labels[key])
            if wanted is None or actual is None:
                return False
            return actual > wanted if operator == "Gt" else actual < wanted
    return False


def _field_matches(requirement: Any, node_name: str) -> bool:
    if not isinstance(requirement, Mapping) or requirement.get("key") != "metadata.name":
        return False
    values = _values(requirement)
    if values is None or len(values) != 1:
        return False
    if requirement.get("operator") == "In":
        return node_name == values[0]
    if requirement.get("operator") == "NotIn":
        return node_name != values[0]
    return False


def term_matches(term: Any, labels: Mapping[str, str], node_name: str) -> bool:
    if not isinstance(term, Mapping):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list) or not (expressions or fields):
        return False
    return all(requirement_matches(r, labels) for r in expressions) and all(
        _field_matches(f, node_name) for f in fields
    )


def node_selector_matches(selector: Any, labels: Mapping[str, str], node_name: str) -> bool:
    """A core/v1 NodeSelector (`{nodeSelectorTerms: [...]}`); a missing or empty term list matches nothing."""
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    if not isinstance(terms, list):
        return False
    return any(term_matches(term, labels, node_name) for term in terms)


def describe_requirement(requirement: Any, *, field: bool = False) -> str:
    """`kubernetes.io/arch In [amd64]`, `gpu.memory Gt 40000`, `metadata.name In [node-1]`."""
    if not isinstance(requirement, Mapping):
        return "<invalid requirement>"
    key, operator = str(requirement.get("key", ""))[:120], str(requirement.get("operator", ""))[:20]
    values = requirement.get("values") or []
    if operator in ("Exists", "DoesNotExist") and not values:
        return f"{key} {operator}"
    shown = ", ".join(str(v)[:60] for v in values[:8]) if isinstance(values, list) else "?"
    more = ", …" if isinstance(values, list) and len(values) > 8 else ""
    return f"{key} {operator} [{shown}{more}]" if not field or values else f"{key} {operator}"


def term_failures(term: Any, labels: Mapping[str, str], node_name: str) -> list[str]:
    """Why one term does not match: the failing requirements with what the node has."""
    if not isinstance(term, Mapping):
        return ["the term is not an object"]
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list):
        return ["the term is malformed"]
    if not expressions and not fields:
        return ["the term is empty (an empty term matches no node)"]
    out = []
    for requirement in expressions:
        if not requirement_matches(requirement, labels):
            key = requirement.get("key") if isinstance(requirement, Mapping) else None
            has = f"node has {key}={labels[key]}" if isinstance(key, str) and key in labels else "label absent"
            out.append(f"{describe_requirement(requirement)} ({has})")
    for requirement in fields:
        if not _field_matches(requirement, node_name):
            out.append(f"{describe_requirement(requirement, field=True)} (node is {node_name})")
    return out


def taint_text(taint: Mapping[str, Any]) -> str:
    """`key=value:Effect` (or `key:Effect` without a value), as kubectl prints taints."""
    key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"
