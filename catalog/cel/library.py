"""The CEL function library of Kubernetes: quantity(), semver() and their methods, and includes()."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal, localcontext
from typing import Any

from cel_expr_python import cel

from catalog.cel.values import (
    INT64_MAX,
    INT64_MIN,
    QUANTITY_TYPE,
    SEMVER_TYPE,
    compare,
    kind_of,
    parse_quantity_strict,
    parse_semver,
    quantity_decimal,
    quantity_from_string,
    quantity_of,
    semver_order,
)

# The function library. Impls raise ValueError for CEL errors (the binding turns exceptions into error values).


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity_strict(text)
    except ValueError:
        return False
    return True


def _as_integer(quantity: Any) -> int:
    if not _is_integer(quantity):
        raise ValueError("cannot convert value to integer")
    return int(quantity_decimal(quantity))


def _is_integer(quantity: Any) -> bool:
    value = quantity_decimal(quantity)
    return value == value.to_integral_value() and INT64_MIN <= value <= INT64_MAX


def _quantity_arithmetic(operation: Callable[[Decimal, Decimal], Decimal]) -> Callable[[Any, Any], Any]:
    def impl(quantity: Any, other: Any) -> Any:
        right = Decimal(other) if type(other) is int else quantity_decimal(other)
        with localcontext() as context:
            context.prec = 1000
            return quantity_of(operation(quantity_decimal(quantity), right))

    return impl


def _ordered(left: Any, right: Any) -> tuple[Any, Any]:
    """Comparable stand-ins for two Quantities or two Semvers. The runtime dispatches impls on value kinds (all
    messages are one kind), so one impl serves both types and checks them here."""
    kinds = (kind_of(left), kind_of(right))
    if kinds == ("Quantity", "Quantity"):
        return quantity_decimal(left), quantity_decimal(right)
    if kinds == ("Semver", "Semver"):
        return semver_order(left), semver_order(right)
    raise TypeError(f"no matching overload: cannot compare {kinds[0]} with {kinds[1]}")


def _semver_part(name: str) -> Callable[[Any], int]:
    def impl(version: Any) -> int:
        if kind_of(version) != "Semver":
            raise TypeError(f"no matching overload: {name}() needs a Semver, got {kind_of(version)}")
        value = int(getattr(version, name))
        if value > INT64_MAX:
            raise ValueError(f"{name} version {value} does not fit into int")
        return value

    return impl


def _semver_string(text: str, normalize: bool = False) -> Any:
    return parse_semver(text, normalize=normalize)


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        parse_semver(text, normalize=normalize)
    except ValueError:
        return False
    return True


def _includes(container: Any, value: Any) -> bool:
    """`x.includes(v)`: list membership for list attributes, equality for a scalar (a one-element list)."""
    kind = kind_of(value)
    items = container if isinstance(container, list) else [container]
    return any(kind_of(item) == kind and item == value for item in items)


def _overload(
    overload_id: str, result: cel.Type, parameters: Sequence[cel.Type], impl: Callable[..., Any] | None = None
) -> cel.Overload:
    """A member overload (a receiver-style call). Without `impl`, the runtime uses the impl of an earlier overload
    with the same value kinds: the checker sees two overloads, the runtime one function."""
    if impl is None:
        return cel.Overload(overload_id, return_type=result, parameters=list(parameters), is_member=True)
    return cel.Overload(overload_id, return_type=result, parameters=list(parameters), is_member=True, impl=impl)


def _global(
    overload_id: str, result: cel.Type, parameters: Sequence[cel.Type], impl: Callable[..., Any]
) -> cel.Overload:
    return cel.Overload(overload_id, return_type=result, parameters=list(parameters), is_member=False, impl=impl)


def function_declarations() -> list[cel.FunctionDecl]:
    boolean, integer, double, string = cel.Type.BOOL, cel.Type.INT, cel.Type.DOUBLE, cel.Type.STRING
    q, v = QUANTITY_TYPE, SEMVER_TYPE
    add = _quantity_arithmetic(lambda a, b: a + b)
    sub = _quantity_arithmetic(lambda a, b: a - b)
    declarations: dict[str, list[cel.Overload]] = {
        "quantity": [_global("string_to_quantity", q, [string], quantity_from_string)],
        "isQuantity": [_global("is_quantity_string", boolean, [string], _is_quantity)],
        "sign": [_overload("quantity_sign", integer, [q], lambda a: compare(quantity_decimal(a), 0))],
        "isInteger": [_overload("quantity_is_integer", boolean, [q], _is_integer)],
        "asInteger": [_overload("quantity_get_int", integer, [q], _as_integer)],
        "asApproximateFloat": [_overload("quantity_get_float", double, [q], lambda a: float(quantity_decimal(a)))],
        "add": [_overload("quantity_add", q, [q, q], add), _overload("quantity_add_int", q, [q, integer], add)],
        "sub": [_overload("quantity_sub", q, [q, q], sub), _overload("quantity_sub_int", q, [q, integer], sub)],
        "compareTo": [
            _overload("quantity_compare_to", integer, [q, q], lambda a, b: compare(*_ordered(a, b))),
            _overload("semver_compare_to", integer, [v, v]),
        ],
        "isLessThan": [
            _overload("quantity_is_less_than", boolean, [q, q], lambda a, b: compare(*_ordered(a, b)) < 0),
            _overload("semver_is_less_than", boolean, [v, v]),
        ],
        "isGreaterThan": [
            _overload("quantity_is_greater_than", boolean, [q, q], lambda a, b: compare(*_ordered(a, b)) > 0),
            _overload("semver_is_greater_than", boolean, [v, v]),
        ],
        "semver": [
            _global("string_to_semver", v, [string], _semver_string),
            _global("string_bool_to_semver", v, [string, boolean], _semver_string),
        ],
        "isSemver": [
            _global("is_semver_string", boolean, [string], _is_semver),
            _global("is_semver_string_bool", boolean, [string, boolean], _is_semver),
        ],
        "major": [_overload("semver_major", integer, [v], _semver_part("major"))],
        "minor": [_overload("semver_minor", integer, [v], _semver_part("minor"))],
        "patch": [_overload("semver_patch", integer, [v], _semver_part("patch"))],
        # List attributes (DRAListTypeAttributes): `x.includes(v)` for a list or a scalar attribute. Python impls are
        # dispatched on concrete kinds (a `dyn` parameter never matches), hence one overload per kind pair.
        "includes": [
            _overload(f"{receiver}_includes_{element}", boolean, [receiver_type, element_type], _includes)
            for element, element_type in {"int": integer, "string": string, "bool": boolean, "semver": v}.items()
            for receiver, receiver_type in {
                "list": cel.Type.List(cel.Type.DYN),
                "int": integer,
                "string": string,
                "bool": boolean,
                "semver": v,
            }.items()
        ],
    }
    return [cel.FunctionDecl(name, overloads) for name, overloads in declarations.items()]
