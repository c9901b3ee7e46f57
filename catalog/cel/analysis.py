"""One walk over a checked AST: the static cost estimate, the device domains and names a selector reads, and the
rewrites to apply afterwards (see catalog.cel.rewrite)."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from catalog.cel.environment import ATTRIBUTES_VAR, CAPACITY_VAR, DRIVER_VAR, MULTI_VAR, ROOTS
from catalog.cel.errors import CelCompileError, CelError, CelLimitError, source_position
from catalog.cel.limits import (
    MAX_ATTRIBUTE_LENGTH,
    MAX_COST,
    MAX_DOMAIN_LENGTH,
    MAX_DRIVER_LENGTH,
    MAX_ENTRIES_PER_DEVICE,
    MAX_ID_LENGTH,
    UNKNOWN_SIZE,
)
from catalog.cel.values import QUANTITY_NAME, SEMVER_NAME, parse_semver, quantity_from_string

# Cost estimation. Sizes are upper bounds: characters of a string, entries of a list or map.


@dataclass(frozen=True, slots=True)
class _Shape:
    size: int | None = None
    key: _Shape | None = None
    elem: _Shape | None = None
    root: str | None = None  # "attributes"/"capacity": the device's domain→map map, indexed by a domain
    domain: tuple[str, str] | None = None  # (root, domain): one domain's name→value map


def _merge(shapes: Sequence[_Shape | None]) -> _Shape:
    known = [shape for shape in shapes if shape is not None]
    if not known:
        return _Shape()
    sizes = [shape.size for shape in known]
    keys = [shape.key for shape in known if shape.key is not None]
    elems = [shape.elem for shape in known if shape.elem is not None]
    return _Shape(
        size=None if None in sizes else max(size for size in sizes if size is not None),
        key=_merge(keys) if keys else None,
        elem=_merge(elems) if elems else None,
    )


_ATTRIBUTE = _Shape(MAX_ATTRIBUTE_LENGTH, elem=_Shape(MAX_ATTRIBUTE_LENGTH))
_QUANTITY = _Shape(None)
_DEVICE_SHAPES = {
    DRIVER_VAR: _Shape(MAX_DRIVER_LENGTH),
    MULTI_VAR: _Shape(None),
    ATTRIBUTES_VAR: _Shape(
        MAX_ENTRIES_PER_DEVICE,
        key=_Shape(MAX_DOMAIN_LENGTH),
        elem=_Shape(MAX_ENTRIES_PER_DEVICE, key=_Shape(MAX_ID_LENGTH), elem=_ATTRIBUTE),
        root="attributes",
    ),
    CAPACITY_VAR: _Shape(
        MAX_ENTRIES_PER_DEVICE,
        key=_Shape(MAX_DOMAIN_LENGTH),
        elem=_Shape(MAX_ENTRIES_PER_DEVICE, key=_Shape(MAX_ID_LENGTH), elem=_QUANTITY),
        root="capacity",
    ),
}
# Functions whose cost grows with the length of their string (or list) operands: 1 + ceil(0.1 * total size).
_LINEAR_FUNCTIONS = frozenset(
    {
        "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_", "contains", "startsWith", "endsWith", "lowerAscii",
        "upperAscii", "trim", "replace", "split", "indexOf", "lastIndexOf", "substring", "charAt", "join", "reverse",
        "format", "quote", "string", "includes",
    }
)  # fmt: skip
_SAME_SIZE_FUNCTIONS = frozenset({"lowerAscii", "upperAscii", "trim", "reverse", "substring", "quote"})
_STATIC_ACCESSORS = frozenset({"_[_]", "_[?_]", "_?._"})
_RELATIONS: dict[str, Callable[[int, int], bool]] = {
    "_<_": operator.lt,
    "_<=_": operator.le,
    "_>_": operator.gt,
    "_>=_": operator.ge,
    "_==_": operator.eq,
    "_!=_": operator.ne,
}
_SWAPPED = {"_<_": "_>_", "_<=_": "_>=_", "_>_": "_<_", "_>=_": "_<=_", "_==_": "_==_", "_!=_": "_!=_"}
_OPERATOR_FOR_RESULTS = {
    frozenset({-1}): "_<_",
    frozenset({-1, 0}): "_<=_",
    frozenset({1}): "_>_",
    frozenset({0, 1}): "_>=_",
    frozenset({0}): "_==_",
    frozenset({-1, 1}): "_!=_",
}
_TRAVERSAL_FACTOR = 0.1
_REGEX_FACTOR = 0.25


def _cheap(node: Any) -> bool:
    """Identifiers, literals, field and constant-key lookups, and literal quantity()/semver() calls."""
    kind = node.WhichOneof("expr_kind")
    if kind in ("ident_expr", "const_expr"):
        return True
    if kind == "select_expr":
        return not node.select_expr.test_only and _cheap(node.select_expr.operand)
    if kind == "call_expr":
        call = node.call_expr
        if call.function == "_[_]" and not call.HasField("target"):
            return all(_cheap(arg) for arg in call.args)
        if call.function in ("quantity", "semver") and not call.HasField("target"):
            return all(arg.WhichOneof("expr_kind") == "const_expr" for arg in call.args)
    return False


def _const_string(node: Any) -> str | None:
    if node.WhichOneof("expr_kind") == "const_expr" and node.const_expr.WhichOneof("constant_kind") == "string_value":
        return str(node.const_expr.string_value)
    return None


class Analysis:
    """One walk over a checked AST: the cost estimate, the domains used and the rewrites to apply afterwards."""

    def __init__(self, checked: Any, expression: str) -> None:
        self.checked = checked
        self.expression = expression
        self.positions: dict[int, int] = dict(checked.source_info.positions)
        self.domain_nodes: list[tuple[Any, str, str]] = []  # (node, root, domain) to become a variable
        self.static_names: dict[tuple[str, str], set[str]] = {}
        self.whole_domains: set[tuple[str, str]] = set()
        self.variables: set[str] = set()  # device variables the rewritten AST still reads
        self.folds: list[tuple[Any, Any]] = []  # (call node, message) for literal quantity()/semver() calls
        self.native: list[tuple[Any, str, str, Any, Any]] = []  # (node, string operator, type name, left, right)
        self.comprehensions: list[tuple[int, int]] = []  # (cost, node id), outermost first

    def walk(self, node: Any, scope: Mapping[str, _Shape]) -> tuple[int, _Shape]:
        kind = node.WhichOneof("expr_kind")
        if kind == "const_expr":
            value = node.const_expr
            if value.WhichOneof("constant_kind") in ("string_value", "bytes_value"):
                return 0, _Shape(len(getattr(value, str(value.WhichOneof("constant_kind")))))
            return 0, _Shape()
        if kind == "ident_expr":
            name = str(node.ident_expr.name).lstrip(".")
            if name in scope:
                return 1, scope[name]
            if name in _DEVICE_SHAPES:
                if name not in ROOTS:  # a device map is fed only when used as a whole (see _use)
                    self.variables.add(name)
                return 1, _DEVICE_SHAPES[name]
            return 1, _Shape()
        if kind == "select_expr":
            return self._select(node, scope)
        if kind == "call_expr":
            return self._call(node, scope)
        if kind == "list_expr":
            costs_shapes = [self._use(self.walk(element, scope)) for element in node.list_expr.elements]
            return 10 + sum(c for c, _ in costs_shapes), _Shape(
                len(costs_shapes), elem=_merge([s for _, s in costs_shapes])
            )
        if kind == "struct_expr":
            if node.struct_expr.message_name:
                raise self._error(node, f"cannot construct {node.struct_expr.message_name} values", CelCompileError)
            keys, values, cost = [], [], 30
            for entry in node.struct_expr.entries:
                key_cost, key_shape = self._use(self.walk(entry.map_key, scope))
                value_cost, value_shape = self._use(self.walk(entry.value, scope))
                cost += key_cost + value_cost
                keys.append(key_shape)
                values.append(value_shape)
            return cost, _Shape(len(keys), key=_merge(keys), elem=_merge(values))
        if kind == "comprehension_expr":
            return self._comprehension(node, scope)
        return 1, _Shape()

    def _use(self, result: tuple[int, _Shape]) -> tuple[int, _Shape]:
        """A value consumed as a whole: a device map used this way must be passed in full."""
        cost, shape = result
        if shape.root is not None:
            self.variables.add(ATTRIBUTES_VAR if shape.root == "attributes" else CAPACITY_VAR)
        if shape.domain is not None:
            self.whole_domains.add(shape.domain)
        return cost, shape

    def _access(
        self, operand: Any, key: str | None, node: Any, scope: Mapping[str, _Shape], *, rewrite: bool
    ) -> tuple[int, _Shape]:
        """`operand[key]`, `operand.key` and friends: static lookups of a domain or an attribute name."""
        cost, shape = self.walk(operand, scope)
        if shape.root is not None and key is not None and rewrite:
            self.domain_nodes.append((node, shape.root, key))
            return cost + 1, _Shape(
                shape.elem.size if shape.elem else None,
                key=shape.elem.key if shape.elem else None,
                elem=shape.elem.elem if shape.elem else None,
                domain=(shape.root, key),
            )
        if shape.domain is not None and key is not None:
            self.static_names.setdefault(shape.domain, set()).add(key)
            return cost + 1, shape.elem or _Shape()
        self._use((cost, shape))
        return cost + 1, shape.elem or _Shape()

    def _select(self, node: Any, scope: Mapping[str, _Shape]) -> tuple[int, _Shape]:
        select = node.select_expr
        cost, shape = self._access(select.operand, str(select.field), node, scope, rewrite=not select.test_only)
        return cost, (_Shape() if select.test_only else shape)

    def _call(self, node: Any, scope: Mapping[str, _Shape]) -> tuple[int, _Shape]:
        call = node.call_expr
        function = str(call.function)
        args = list(call.args)
        if function in _STATIC_ACCESSORS and len(args) == 2 and not call.HasField("target"):
            key = _const_string(args[1])
            cost, shape = self._access(args[0], key, node, scope, rewrite=function == "_[_]")
            key_cost, _ = self._use(self.walk(args[1], scope))
            return cost + key_cost, shape
        if function == "@in" and len(args) == 2:
            container_cost, container = self.walk(args[1], scope)
            key = _const_string(args[0])
            if container.domain is not None and key is not None:
                self.static_names.setdefault(container.domain, set()).add(key)
            else:
                self._use((container_cost, container))
            item_cost, _ = self._use(self.walk(args[0], scope))
            linear = container.size or 0 if container.key is None else 0
            return 1 + linear + container_cost + item_cost, _Shape()
        operands = ([call.target] if call.HasField("target") else []) + args
        results = [self._use(self.walk(operand, scope)) for operand in operands]
        cost = 1 + sum(c for c, _ in results)
        shapes = [s for _, s in results]
        self._fold(node, function, args)
        self._native_comparison(node, function, args)
        if function == "_?_:_":
            return cost - 1, _merge(shapes[1:])
        if function == "matches" and len(shapes) == 2:
            text, regex = (s.size if s.size is not None else UNKNOWN_SIZE for s in shapes)
            return cost + math.ceil(_TRAVERSAL_FACTOR * text) * max(1, math.ceil(_REGEX_FACTOR * regex)), _Shape()
        if function in _LINEAR_FUNCTIONS:
            sizes = [s.size if s.size is not None else UNKNOWN_SIZE for s in shapes if s.size is not None or s.elem]
            cost += math.ceil(_TRAVERSAL_FACTOR * sum(sizes))
            if function in _SAME_SIZE_FUNCTIONS and shapes:
                return cost, _Shape(shapes[0].size)
            if function == "split" and shapes:
                size = shapes[0].size if shapes[0].size is not None else UNKNOWN_SIZE
                return cost, _Shape(size + 1, elem=_Shape(size))
            if function in ("_+_", "replace", "format", "join") and sizes:
                elem = _merge([s.elem for s in shapes if s.elem]) if function == "_+_" else None
                return cost, _Shape(sum(sizes), elem=elem if elem and elem.size is not None else None)
        return cost, _Shape()

    def _comprehension(self, node: Any, scope: Mapping[str, _Shape]) -> tuple[int, _Shape]:
        loop = node.comprehension_expr
        index = len(self.comprehensions)
        self.comprehensions.append((0, int(node.id)))
        range_cost, range_shape = self._use(self.walk(loop.iter_range, scope))
        count = range_shape.size if range_shape.size is not None else UNKNOWN_SIZE
        init_cost, accu_shape = self.walk(loop.accu_init, scope)  # an alias (cel.bind) keeps its device map marker
        if accu_shape.root is not None:  # cel.bind(a, device.attributes, …): the map itself is evaluated
            self.variables.add(ATTRIBUTES_VAR if accu_shape.root == "attributes" else CAPACITY_VAR)
        if loop.accu_init.WhichOneof("expr_kind") == "list_expr" and count:
            accu_shape = _Shape((accu_shape.size or 0) + count, elem=range_shape.elem or range_shape.key)
        inner = dict(scope)
        if range_shape.key is not None:  # a map: the first variable is the key, the second the value
            inner[str(loop.iter_var)] = range_shape.key
            if loop.iter_var2:
                inner[str(loop.iter_var2)] = range_shape.elem or _Shape()
        else:
            inner[str(loop.iter_var)] = range_shape.elem or _Shape()
            if loop.iter_var2:
                inner[str(loop.iter_var2)] = _Shape()
        inner[str(loop.accu_var)] = accu_shape
        condition_cost, _ = self.walk(loop.loop_condition, inner)
        step_cost, _ = self.walk(loop.loop_step, inner) if count else (0, _Shape())
        result_scope = {**scope, str(loop.accu_var): accu_shape}
        result_cost, result_shape = self.walk(loop.result, result_scope)
        cost = range_cost + init_cost + count * (condition_cost + step_cost) + result_cost
        self.comprehensions[index] = (cost, int(node.id))
        return cost, result_shape

    def _compared_type(self, node: Any) -> str | None:
        """The message type when the checker resolved a comparison call to the Quantity or the Semver overload only
        and both operands are cheap to evaluate twice (the rewrite may test their type first)."""
        reference = self.checked.reference_map.get(node.id)
        families = {str(overload).split("_", 1)[0] for overload in reference.overload_id} if reference else set()
        call = node.call_expr
        if not all(_cheap(operand) for operand in [call.target, *call.args]):
            return None
        return {frozenset({"quantity"}): QUANTITY_NAME, frozenset({"semver"}): SEMVER_NAME}.get(frozenset(families))

    def _native_comparison(self, node: Any, function: str, args: list[Any]) -> None:
        """Plan to replace Quantity/Semver comparisons by string comparisons of their order-preserving keys, which
        the runtime does natively instead of calling Python (about 4 µs a call)."""
        call = node.call_expr
        if function in ("isLessThan", "isGreaterThan") and call.HasField("target") and len(args) == 1:
            type_name = self._compared_type(node)
            if type_name:
                comparison = "_<_" if function == "isLessThan" else "_>_"
                self.native.append((node, comparison, type_name, call.target, args[0]))
            return
        if function not in _RELATIONS or len(args) != 2 or call.HasField("target"):
            return
        swapped = args[0].WhichOneof("expr_kind") == "const_expr"
        compare, constant = (args[1], args[0]) if swapped else (args[0], args[1])
        if (
            compare.WhichOneof("expr_kind") != "call_expr"
            or compare.call_expr.function != "compareTo"
            or not compare.call_expr.HasField("target")
            or len(compare.call_expr.args) != 1
            or constant.WhichOneof("expr_kind") != "const_expr"
            or constant.const_expr.WhichOneof("constant_kind") != "int64_value"
        ):
            return
        type_name = self._compared_type(compare)
        relation = _RELATIONS[_SWAPPED[function] if swapped else function]
        # The set of compareTo results (-1, 0, 1) for which `result <op> constant` holds names a string relation.
        holds = frozenset(r for r in (-1, 0, 1) if relation(r, int(constant.const_expr.int64_value)))
        operator = _OPERATOR_FOR_RESULTS.get(holds)
        if type_name and operator:
            self.native.append((node, operator, type_name, compare.call_expr.target, compare.call_expr.args[0]))

    def _fold(self, node: Any, function: str, args: list[Any]) -> None:
        """Remember `quantity('…')` / `semver('…'[, bool])` with literal, valid arguments for constant folding."""
        if function not in ("quantity", "semver") or node.call_expr.HasField("target") or not args:
            return
        text = _const_string(args[0])
        if text is None:
            return
        normalize = False
        if len(args) == 2:
            flag = args[1]
            if (
                flag.WhichOneof("expr_kind") != "const_expr"
                or flag.const_expr.WhichOneof("constant_kind") != "bool_value"
            ):
                return
            normalize = bool(flag.const_expr.bool_value)
        try:
            value = quantity_from_string(text) if function == "quantity" else parse_semver(text, normalize=normalize)
        except ValueError:
            return  # invalid literals fail at runtime, as in Kubernetes
        self.folds.append((node, value))

    def _error(self, node: Any, message: str, error: type[CelError]) -> CelError:
        line, column = source_position(self.positions.get(int(node.id)), self.expression)
        return error(message, expression=self.expression, line=line, column=column)

    def cost_error(self, cost: int) -> CelLimitError:
        """Point at the outermost comprehension that alone exceeds the budget (or at nothing)."""
        for comprehension_cost, node_id in self.comprehensions:
            if comprehension_cost > MAX_COST:
                line, column = source_position(self.positions.get(node_id), self.expression)
                break
        else:
            line = column = None
        return CelLimitError(
            f"estimated cost {cost:,} exceeds the limit of {MAX_COST:,}: a comprehension (all, exists, map, "
            "filter) multiplies the cost of its body by the size of what it iterates over (up to "
            f"{MAX_ENTRIES_PER_DEVICE} entries for a device map), and nesting multiplies again",
            expression=self.expression,
            line=line,
            column=column,
        )
