"""Label and field selectors (the list/watch `labelSelector` and `fieldSelector` parameters) as predicates."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import ApiError

if TYPE_CHECKING:
    from .store import StoredObject

_SEL_SPLIT = re.compile(r",(?![^()]*\))")
_SET_RE = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s*\((.*)\)\s*$")

# (operator, key, value): the value is a set of strings for in/notin, a string for =/!=, None for exists/!
LabelTerm = tuple[str, str, Any]
LabelPredicate = Callable[[dict[str, str]], bool]
FieldPredicate = Callable[[dict[str, Any]], bool]


def _label_term(t: str) -> LabelTerm:
    """One requirement of a label selector: `k in (a,b)`, `k notin (...)`, `k=v`, `k==v`, `k!=v`, `k`, `!k`."""
    m = _SET_RE.match(t)
    if m:
        vals = {v.strip() for v in m.group(3).split(",") if v.strip()}
        return (m.group(2), m.group(1), vals)
    if "!=" in t:
        k, v = t.split("!=", 1)
        return ("!=", k.strip(), v.strip())
    if "==" in t:
        k, v = t.split("==", 1)
        return ("=", k.strip(), v.strip())
    if "=" in t:
        k, v = t.split("=", 1)
        return ("=", k.strip(), v.strip())
    if t.startswith("!"):
        return ("!", t[1:].strip(), None)
    if re.match(r"^[A-Za-z0-9_./-]+$", t):
        return ("exists", t, None)
    raise ApiError(400, "BadRequest", f"unable to parse requirement: invalid label selector: {t!r}")


def _labels_match(terms: list[LabelTerm], labels: dict[str, str]) -> bool:
    for op, k, v in terms:
        has = k in labels
        if op == "=" and labels.get(k) != v:
            return False
        if op == "!=" and has and labels[k] == v:
            return False
        if op == "in" and (not has or labels[k] not in v):
            return False
        if op == "notin" and has and labels[k] in v:
            return False
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
    return True


def parse_label_selector(sel: str | None) -> LabelPredicate | None:
    """Return a predicate over a labels dict, or None for 'everything'."""
    if not sel or not sel.strip():
        return None
    terms = []
    for raw in _SEL_SPLIT.split(sel):
        t = raw.strip()
        if t:
            terms.append(_label_term(t))

    def pred(labels: dict[str, str]) -> bool:
        return _labels_match(terms, labels)

    return pred


def _field_value(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
        if cur is None:
            return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur) if not isinstance(cur, dict | list) else ""


def parse_field_selector(sel: str | None) -> FieldPredicate | None:
    if not sel or not sel.strip():
        return None
    terms = []
    for raw in sel.split(","):
        t = raw.strip()
        if not t:
            continue
        if "!=" in t:
            k, v = t.split("!=", 1)
            terms.append((False, k.strip(), v.strip()))
        elif "==" in t:
            k, v = t.split("==", 1)
            terms.append((True, k.strip(), v.strip()))
        elif "=" in t:
            k, v = t.split("=", 1)
            terms.append((True, k.strip(), v.strip()))
        else:
            raise ApiError(400, "BadRequest", f"invalid selector: '{sel}'; can't understand '{t}'")

    def pred(obj: dict[str, Any]) -> bool:
        return all((_field_value(obj, k) == v) == eq for eq, k, v in terms)

    return pred


def make_filter(
    namespace: str | None, label_selector: str | None, field_selector: str | None
) -> Callable[[StoredObject], bool] | None:
    """A predicate over stored objects for a list, watch or deletecollection; None when it would keep everything."""
    lp = parse_label_selector(label_selector)
    fp = parse_field_selector(field_selector)
    if namespace is None and lp is None and fp is None:
        return None

    def flt(so: StoredObject) -> bool:
        if namespace is not None and so.key[0] != namespace:
            return False
        if lp is not None and not lp(so.obj.get("metadata", {}).get("labels") or {}):
            return False
        return fp is None or fp(so.obj)

    return flt
