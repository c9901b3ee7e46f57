"""Selector, node-affinity and toleration matching, as kube-scheduler does it.

Node selectors (`k8s.io/component-helpers/scheduling/corev1/nodeaffinity`):
- `spec.nodeSelector` is an equality match of every pair; required node affinity terms are ORed, the requirements
  of a term ANDed. A missing or empty term list, and a term with neither expressions nor fields, match nothing.
- A requirement is parsed before it is used (`labels.NewRequirement`): the key must be a qualified name; `In` and
  `NotIn` need at least one value, each a valid label value; `Exists`/`DoesNotExist` take no values; `Gt`/`Lt` take
  one value that parses as an int64. A term with any requirement that does not parse never matches — even a
  `NotIn` that would otherwise hold.
- `Gt`/`Lt` compare the node's label value as an int64; a label that is not an integer does not match.
- `matchFields` supports `metadata.name` with `In`/`NotIn` and exactly one value.

Label selectors (`metav1.LabelSelector`): `matchLabels` and `matchExpressions` (`In`, `NotIn`, `Exists`,
`DoesNotExist`) ANDed; an empty selector matches everything; an invalid one is reported as None by
`label_selector_matches` (callers decide, and say so).

Tolerations (`v1.Toleration.ToleratesTaint`): an empty effect matches every effect; an empty key with `Exists`
matches every taint; `Equal` (the default) compares values, `Exists` ignores them. `Lt`/`Gt` (the
TaintTolerationComparisonOperators feature, alpha since Kubernetes 1.35) compare the taint's value with the
toleration's as decimal integers — `Lt` tolerates a taint whose value is smaller — and only when the caller says the
cluster has the feature (`comparisons=True`); otherwise such a toleration tolerates nothing, as the API server would
not have accepted it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from inventory.k8s.semantics.names import is_label_value, is_qualified_name

__all__ = [
    "BLOCKING_TAINT_EFFECTS",
    "TOLERATION_COMPARISONS_SINCE",
    "comparisons_enabled",
    "describe_requirement",
    "label_selector_matches",
    "labels_match",
    "node_selector_matches",
    "requirement_matches",
    "taint_text",
    "term_failures",
    "term_matches",
    "toleration_tolerates",
    "untolerated_taints",
]

BLOCKING_TAINT_EFFECTS: tuple[str, ...] = ("NoSchedule", "NoExecute")  # PreferNoSchedule is a preference
TOLERATION_COMPARISONS_SINCE = (1, 35)  # TaintTolerationComparisonOperators (alpha; the gate must be on)
_INT64 = re.compile(r"[+-]?\d{1,19}")
_DECIMAL_INTEGER = re.compile(r"-?(?:0|[1-9]\d{0,18})")  # content.IsDecimalInteger: no '+', no leading zeros
_NODE_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


def _int64(text: Any, pattern: re.Pattern[str] = _INT64) -> int | None:
    if not isinstance(text, str) or not pattern.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def labels_match(labels: Mapping[str, Any], selector: Mapping[str, Any]) -> bool:
    """`spec.nodeSelector`-style equality: every selector pair present with the same value."""
    return all(labels.get(key) == value for key, value in selector.items())


def _values(requirement: Mapping[str, Any]) -> list[str] | None:
    values = requirement.get("values")
    if values is None:
        return []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return None
    return values


def _requirement_parses(requirement: Any, operators: frozenset[str] = _NODE_OPERATORS) -> bool:
    """Would `labels.NewRequirement` accept it? (A term with a requirement that does not parse matches nothing.)"""
    if not isinstance(requirement, Mapping):
        return False
    key, operator, values = requirement.get("key"), requirement.get("operator"), _values(requirement)
    if not is_qualified_name(key) or values is None or operator not in operators:
        return False
    if operator in ("In", "NotIn"):
        return bool(values) and all(is_label_value(v) for v in values)
    if operator in ("Exists", "DoesNotExist"):
        return not values
    return len(values) == 1 and _int64(values[0]) is not None  # Gt, Lt


def requirement_matches(requirement: Any, labels: Mapping[str, str]) -> bool:
    """One label requirement against labels; a requirement that does not parse never matches."""
    if not _requirement_parses(requirement):
        return False
    key, operator, values = requirement["key"], requirement["operator"], _values(requirement) or []
    present = key in labels
    match operator:
        case "In":
            return present and labels[key] in values
        case "NotIn":
            return not present or labels[key] not in values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
    actual = _int64(labels.get(key)) if present else None
    if actual is None:
        return False
    wanted = int(values[0])
    return actual > wanted if operator == "Gt" else actual < wanted


def _field_parses(requirement: Any) -> bool:
    if not isinstance(requirement, Mapping) or requirement.get("operator") not in ("In", "NotIn"):
        return False
    values = _values(requirement)
    return values is not None and len(values) == 1


def _field_matches(requirement: Any, node_name: str) -> bool:
    if not _field_parses(requirement):
        return False
    value = (_values(requirement) or [""])[0]
    actual = node_name if requirement.get("key") == "metadata.name" else ""  # no other field is set on a node
    return actual == value if requirement["operator"] == "In" else actual != value


def _term_parts(term: Any) -> tuple[list[Any], list[Any]] | None:
    if not isinstance(term, Mapping):
        return None
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list):
        return None
    return expressions, fields


def term_matches(term: Any, labels: Mapping[str, str], node_name: str) -> bool:
    """One NodeSelectorTerm: every expression and field holds, none fails to parse, and the term is not empty."""
    parts = _term_parts(term)
    if parts is None or not (parts[0] or parts[1]):
        return False
    expressions, fields = parts
    if not all(_requirement_parses(r) for r in expressions) or not all(_field_parses(f) for f in fields):
        return False
    return all(requirement_matches(r, labels) for r in expressions) and all(
        _field_matches(f, node_name) for f in fields)


def node_selector_matches(selector: Any, labels: Mapping[str, str], node_name: str) -> bool:
    """A core/v1 NodeSelector (`{nodeSelectorTerms: [...]}`); a missing or empty term list matches nothing."""
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, Mapping) else None
    if not isinstance(terms, list):
        return False
    return any(term_matches(term, labels, node_name) for term in terms)


def label_selector_matches(selector: Any, labels: Mapping[str, Any]) -> bool | None:
    """A metav1.LabelSelector against labels; None when the selector is invalid (`LabelSelectorAsSelector` errs)."""
    if selector is None:
        return True
    if not isinstance(selector, Mapping):
        return None
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        return None
    operators = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
    for key, value in match_labels.items():
        if not is_qualified_name(key) or not is_label_value(value):
            return None
    if not all(_requirement_parses(r, operators) for r in expressions):
        return None
    return labels_match(labels, match_labels) and all(requirement_matches(r, labels) for r in expressions)


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
    """Why one term does not match: invalid requirements first (they void the whole term), then the requirements
    that fail with what the node has."""
    parts = _term_parts(term)
    if parts is None:
        return ["the term is malformed"]
    expressions, fields = parts
    if not expressions and not fields:
        return ["the term is empty (an empty term matches no node)"]
    invalid = [f"{describe_requirement(r)} is not a valid requirement, so the whole term matches no node"
               for r in expressions if not _requirement_parses(r)]
    invalid += [f"{describe_requirement(f, field=True)} is not a valid field requirement, so the whole term matches "
                "no node" for f in fields if not _field_parses(f)]
    if invalid:
        return invalid
    out = []
    for requirement in expressions:
        if not requirement_matches(requirement, labels):
            key = requirement.get("key")
            has = f"node has {key}={labels[key]}" if key in labels else "label absent"
            out.append(f"{describe_requirement(requirement)} ({has})")
    for requirement in fields:
        if not _field_matches(requirement, node_name):
            out.append(f"{describe_requirement(requirement, field=True)} (node is {node_name})")
    return out


def toleration_tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any], *,
                         comparisons: bool = False) -> bool:
    """Does one toleration tolerate one taint? `comparisons`: the cluster accepts the Lt/Gt operators."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    if operator in ("Lt", "Gt") and comparisons:
        wanted = _int64(toleration.get("value"), _DECIMAL_INTEGER)
        actual = _int64(taint.get("value"), _DECIMAL_INTEGER)
        if wanted is None or actual is None:
            return False
        return actual < wanted if operator == "Lt" else actual > wanted
    return False


def untolerated_taints(taints: Iterable[Any], tolerations: Iterable[Any], *,
                       comparisons: bool = False) -> list[dict[str, Any]]:
    """The blocking taints (NoSchedule/NoExecute) that no toleration tolerates."""
    tolerations = [t for t in tolerations if isinstance(t, Mapping)]
    return [
        dict(taint) for taint in taints
        if isinstance(taint, Mapping) and taint.get("effect") in BLOCKING_TAINT_EFFECTS
        and not any(toleration_tolerates(t, taint, comparisons=comparisons) for t in tolerations)
    ]


def taint_text(taint: Mapping[str, Any]) -> str:
    """`key=value:Effect` (or `key:Effect` without a value), as kubectl prints taints."""
    key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def comparisons_enabled(version: tuple[int, int] | None) -> bool:
    """Toleration Lt/Gt exist from Kubernetes 1.35 (behind an alpha gate: where a cluster's objects use them, the gate
    is on); older clusters reject them."""
    return version is not None and version >= TOLERATION_COMPARISONS_SINCE
