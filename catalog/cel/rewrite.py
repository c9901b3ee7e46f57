"""Rewriting a checked AST before it is loaded: domain maps become variables, literal quantity()/semver() calls
become message literals, Quantity/Semver comparisons become string comparisons, and `cel.bind` is made eager."""

from __future__ import annotations

import itertools
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2

from catalog.cel.analysis import Analysis
from catalog.cel.environment import domain_variable
from catalog.cel.protos import ast_nodes
from catalog.cel.values import QUANTITY_NAME, SEMVER_NAME

_STRING_OVERLOADS = {
    "_<_": "less_string",
    "_<=_": "less_equals_string",
    "_>_": "greater_string",
    "_>=_": "greater_equals_string",
    "_==_": "equals",
    "_!=_": "not_equals",
}
_KEY_FIELDS = {QUANTITY_NAME: "qkey", SEMVER_NAME: "vkey"}


def rewrite_checked(analysis: Analysis) -> Any:
    """Apply the rewrites to the checked AST (in place) and return it serialized, ready for `Env.deserialize`."""
    checked = analysis.checked
    next_id = max(int(node.id) for node in ast_nodes(checked.expr)) + 1
    for node, root, domain in analysis.domain_nodes:
        name = domain_variable(root, domain)
        node.ClearField(str(node.WhichOneof("expr_kind")))
        node.ident_expr.name = name
        if node.id in checked.reference_map:
            del checked.reference_map[node.id]
        checked.reference_map[node.id].name = name
    for node, value in analysis.folds:
        fields = [
            (
                descriptor.name,
                "string_value"
                if descriptor.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING
                else "uint64_value",
                constant,
            )
            for descriptor, constant in value.ListFields()
        ]
        node.ClearField("call_expr")
        node.struct_expr.message_name = f"kubernetes.{value.DESCRIPTOR.name}"
        for field_name, constant_kind, constant in fields:
            entry = node.struct_expr.entries.add(id=next_id, field_key=field_name)
            entry.value.id = next_id + 1
            setattr(entry.value.const_expr, constant_kind, constant)
            next_id += 2
        if node.id in checked.reference_map:
            del checked.reference_map[node.id]
        checked.reference_map[node.id].name = f"kubernetes.{value.DESCRIPTOR.name}"
    _eager_binds(checked)
    # Last, and innermost first (the walk recorded them in post-order): these copy operands already rewritten above.
    ids = itertools.count(next_id)
    for node, comparison, type_name, left, right in analysis.native:
        _native_rewrite(checked, node, comparison, type_name, left, right, ids)
    envelope = any_pb2.Any()
    envelope.Pack(checked)
    return envelope.SerializeToString()


def _eager_binds(checked: Any) -> None:
    """Work around a cel-cpp runtime bug seen with cel-expr-python 0.1.3: a `cel.bind` variable is initialized
    lazily, and after a comprehension that stopped early (`exists`/`all` short-circuiting) the bind reads that
    comprehension's stale iteration variable instead of its own value, silently:
    `['y', 'x'].exists(n, n == 'y') && cel.bind(g, 5, g == 5)` gives false. The planner recognizes a bind by its
    constant-false loop condition; making it true (never evaluated: the range is empty) turns the bind into an
    ordinary comprehension whose variable is set eagerly, as in cel-go."""
    for node in ast_nodes(checked.expr):
        if node.WhichOneof("expr_kind") != "comprehension_expr":
            continue
        loop = node.comprehension_expr
        empty_range = loop.iter_range.WhichOneof("expr_kind") == "list_expr" and not loop.iter_range.list_expr.elements
        condition = loop.loop_condition
        if empty_range and condition.const_expr.WhichOneof("constant_kind") == "bool_value":
            condition.const_expr.bool_value = True


def _native_rewrite(checked: Any, node: Any, comparison: str, type_name: str, left: Any, right: Any, ids: Any) -> None:
    """`a.isGreaterThan(b)` or `a.compareTo(b) >= 0` → `a.vkey > b.vkey` (string order is the value order). Operands
    the checker only knows as dyn are type-tested first; on a mismatch the original call runs and reports the error:
    `type(a) == kubernetes.Semver ? a.vkey > b.vkey : a.isGreaterThan(b)`. Copies get fresh node ids."""
    new_node = type(node)

    def clone(source: Any) -> Any:
        copy = new_node()
        copy.CopyFrom(source)
        for item in ast_nodes(copy):
            old, item.id = item.id, next(ids)
            if old in checked.reference_map:
                checked.reference_map[item.id].CopyFrom(checked.reference_map[old])
        return copy

    def call(target: Any, function: str, overload: str, *args: Any) -> Any:
        target.call_expr.function = function
        for arg in args:
            target.call_expr.args.add().CopyFrom(arg)
        if target.id in checked.reference_map:
            del checked.reference_map[target.id]
        checked.reference_map[target.id].name = function
        checked.reference_map[target.id].overload_id.append(overload)
        return target

    keys = []
    for operand in (left, right):
        select = new_node(id=next(ids))
        select.select_expr.operand.CopyFrom(clone(operand))
        select.select_expr.field = _KEY_FIELDS[type_name]
        keys.append(select)
    guards = []
    for operand in (left, right):
        operand_type = checked.type_map.get(operand.id)
        if operand_type is not None and operand_type.message_type == type_name:
            continue
        literal = new_node(id=next(ids))
        literal.ident_expr.name = type_name
        checked.reference_map[literal.id].name = type_name
        of_type = call(new_node(id=next(ids)), "type", "type", clone(operand))
        guards.append(call(new_node(id=next(ids)), "_==_", "equals", of_type, literal))
    original = clone(node)
    node_id = node.id  # the node keeps its id, hence its type (bool) and source position
    node.Clear()
    node.id = node_id
    if not guards:
        call(node, comparison, _STRING_OVERLOADS[comparison], *keys)
        return
    native = call(new_node(id=next(ids)), comparison, _STRING_OVERLOADS[comparison], *keys)
    condition = guards[0] if len(guards) == 1 else call(new_node(id=next(ids)), "_&&_", "logical_and", *guards)
    call(node, "_?_:_", "conditional", condition, native, original)
