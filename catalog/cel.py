"""Kubernetes DRA CEL selectors, compiled and evaluated with the C++ CEL runtime (cel-expr-python).

Selectors are the `spec.selectors[].cel.expression` of a DeviceClass and the `selectors` of a claim request. This
module reproduces the Kubernetes DRA CEL environment so the portal can tell which devices a selector picks:

- the `device` variable: `device.driver`, `device.attributes[<domain>].<name>`, `device.capacity[<domain>].<name>`
  (a Quantity) and `device.allowMultipleAllocations`;
- the Kubernetes `quantity()` and `semver()` libraries, the standard strings extension, `cel.bind`, optional values
  and `includes()`;
- a domain the device does not have reads as an empty map, a missing attribute is a runtime error;
- the 10 Ki length limit and a static cost estimate against `CELSelectorExpressionMaxCost` (docs/cel.md).

How it is built. Quantity and Semver are protobuf messages made at import time (the binding cannot return opaque
values from Python); their fields hold a canonical form so `==` is semantic equality. After type checking, the
checked AST (cel.expr.CheckedExpr) is decoded with a schema subset defined here, walked once for the cost estimate
and rewritten before it is loaded back: `device.attributes["d"]` becomes a variable of its own (so a missing domain
is an empty map without touching the key set of `device.attributes`); `quantity("40Gi")`/`semver("1.2.3")` with
literal arguments become message literals; Quantity/Semver comparisons become string comparisons of
order-preserving keys (no Python call per device); and `cel.bind` is made eager to avoid a cel-cpp bug
(_eager_binds). Each evaluation passes only the values the selector reads, which is also the memo key of
match_devices.

Threading: the environment is built once, under a lock. The binding holds the GIL while it compiles or evaluates,
so compiled selectors can be shared by threads (evaluations are serialized by the GIL, not run in parallel).
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import re
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

from core.errors import PortalError
from inventory.k8s.semantics import QuantityError, parse_quantity

MAX_EXPRESSION_LENGTH = 10 * 1024  # resourceapi.CELSelectorExpressionMaxLength, in bytes (Go's len())
MAX_COST = 1_000_000  # resourceapi.CELSelectorExpressionMaxCost

# Worst-case sizes of the `device` variable, as Kubernetes declares them for its cost estimator (docs/cel.md).
MAX_ENTRIES_PER_DEVICE = 32  # attributes and capacities per device (per domain map and domains per device)
MAX_DOMAIN_LENGTH = 63
MAX_ID_LENGTH = 32
MAX_DRIVER_LENGTH = 63
MAX_ATTRIBUTE_LENGTH = 64  # a string attribute value; also our bound for the entries of a list attribute
UNKNOWN_SIZE = 64  # a list or string whose size the estimator cannot bound


class CelError(PortalError, ValueError):
    """A selector was rejected or failed. `line`/`column` are 1-based (None when the error has no position)."""

    def __init__(
        self, message: str, *, expression: str = "", line: int | None = None, column: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.expression = expression
        self.line = line
        self.column = column

    def pointer(self) -> str:
        """The offending source line with a caret under the column; empty when there is no position."""
        if self.line is None or self.column is None:
            return ""
        lines = self.expression.split("\n")
        if not 1 <= self.line <= len(lines):
            return ""
        source = lines[self.line - 1]
        indent = "".join("\t" if char == "\t" else " " for char in source[: self.column - 1])
        return f"{source}\n{indent}^"

    def __str__(self) -> str:
        if self.line is None:
            return self.message
        return f"line {self.line}, column {self.column}: {self.message}\n{self.pointer()}".rstrip("\n")


class CelCompileError(CelError):
    """The expression does not parse or type-check, or does not evaluate to bool."""


class CelLimitError(CelError):
    """The expression is too long or its estimated cost exceeds MAX_COST."""


class CelRuntimeError(CelError):
    """Evaluating the expression against a device failed (Kubernetes reports this; it is not a non-match)."""


# Kubernetes value types as protobuf messages. Fields hold canonical forms, so message equality is semantic.

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint64": _F.TYPE_UINT64,
    "double": _F.TYPE_DOUBLE,
}


def _message_pool(package: str, messages: Mapping[str, str]) -> descriptor_pool.DescriptorPool:
    """A descriptor pool from a compact schema: message name (dotted when nested) → fields `name=number:type`, with
    `[]` for repeated fields, `map<key,value>` for maps and a leading `|` for the members of the message's oneof."""
    file = descriptor_pb2.FileDescriptorProto(name=f"portal/{package}.proto", package=package, syntax="proto3")
    built: dict[str, Any] = {}
    for name in sorted(messages, key=lambda dotted: dotted.count(".")):  # parents first
        parent, _, short = name.rpartition(".")
        message = built[name] = (built[parent].nested_type if parent else file.message_type).add(name=short)
        for spec in messages[name].split():
            in_oneof, spec = spec.startswith("|"), spec.lstrip("|")
            field_name, _, rest = spec.partition("=")
            number, _, kind = rest.partition(":")
            repeated = kind.endswith("[]") or kind.startswith("map<")
            kind = kind.removesuffix("[]")
            if kind.startswith("map<"):
                key, value = kind[4:-1].split(",")
                entry = message.nested_type.add(name="".join(p.title() for p in field_name.split("_")) + "Entry")
                entry.options.map_entry = True
                for entry_field, entry_number, entry_kind in (("key", 1, key), ("value", 2, value)):
                    _add_field(entry, entry_field, entry_number, entry_kind, package, repeated=False)
                kind = f"{name}.{entry.name}"
            field = _add_field(message, field_name, int(number), kind, package, repeated=repeated)
            if in_oneof:
                if not message.oneof_decl:  # Expr → expr_kind, Constant → constant_kind, as in cel-spec
                    message.oneof_decl.add(name=re.sub(r"(?<!^)(?=[A-Z])", "_", short).lower() + "_kind")
                field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool


def _add_field(message: Any, name: str, number: int, kind: str, package: str, *, repeated: bool) -> Any:
    label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if kind in _SCALARS:
        return message.field.add(name=name, number=number, type=_SCALARS[kind], label=label)
    return message.field.add(
        name=name, number=number, type=_F.TYPE_MESSAGE, label=label, type_name=f".{package}.{kind}"
    )


_TYPES_POOL = _message_pool(
    "kubernetes",
    {
        "Quantity": "value=1:string qkey=2:string",  # canonical decimal; order-preserving key (see _quantity_key)
        "Semver": "major=1:uint64 minor=2:uint64 patch=3:uint64 prerelease=4:string vkey=5:string",
    },
)
_QuantityMessage: Any = message_factory.GetMessageClass(_TYPES_POOL.FindMessageTypeByName("kubernetes.Quantity"))
_SemverMessage: Any = message_factory.GetMessageClass(_TYPES_POOL.FindMessageTypeByName("kubernetes.Semver"))
QUANTITY_TYPE = cel.Type("kubernetes.Quantity")
SEMVER_TYPE = cel.Type("kubernetes.Semver")

INT64_MIN, INT64_MAX, UINT64_MAX = -(2**63), 2**63 - 1, 2**64 - 1

def parse_quantity_strict(text: str) -> Decimal:
    """A Kubernetes quantity (`resource.ParseQuantity`, the shared grammar and rounding of inventory.k8s.semantics)
    as an exact Decimal, for the CEL quantity library. Text only: '200K', ' 1' and 'NaN' are refused as Go refuses
    them."""
    if not isinstance(text, str):
        raise ValueError(f'invalid quantity "{str(text)[:80]}"')
    try:
        value = parse_quantity(text)
    except QuantityError as exc:
        reason = "quantity out of range" if "out of range" in str(exc) else "invalid quantity"
        raise ValueError(f'{reason} "{text[:80]}"') from exc
    with localcontext() as context:
        # The denominator is 2**a * 5**b (decimal digits and 1n rounding): the quotient has a finite expansion.
        context.prec = len(str(value.numerator)) + len(str(value.denominator)) + 10
        exact = Decimal(value.numerator) / Decimal(value.denominator)
    if exact and not -_MAX_QUANTITY_MAGNITUDE <= exact.adjusted() + 1 <= _MAX_QUANTITY_MAGNITUDE:
        raise ValueError(f'quantity out of range "{text[:80]}"')
    return exact


def _canonical_decimal(value: Decimal) -> str:
    """One spelling per number ('1' and '1000m' both give '1e0'), so message equality is numeric equality."""
    if not value:
        return "0"
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError("not a finite quantity")
    trimmed = list(digits)
    while len(trimmed) > 1 and trimmed[-1] == 0:
        trimmed.pop()
        exponent += 1
    return f"{'-' if sign else ''}{''.join(map(str, trimmed))}e{exponent}"


def _quantity_key(value: Decimal) -> str:
    """An ASCII string whose order is the numeric order: 'M'/'N'/'P' for negative/zero/positive, then the decimal
    exponent (offset, fixed width) and the significant digits; negatives complement both and end with '~'."""
    if not value:
        return "N"
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError("not a finite quantity")
    significant = "".join(map(str, digits)).rstrip("0") or "0"
    magnitude = len(digits) + exponent  # value = ±0.<digits> * 10**magnitude
    if not -_MAX_QUANTITY_MAGNITUDE <= magnitude <= _MAX_QUANTITY_MAGNITUDE:
        raise ValueError("quantity out of range")
    if not sign:
        return f"P{magnitude + 10**7:08d}{significant}"
    complement = significant.translate(_COMPLEMENT)
    return f"M{10**7 - magnitude:08d}{complement}~"


_MAX_QUANTITY_MAGNITUDE = 10**6
_COMPLEMENT = str.maketrans("0123456789", "9876543210")


def _quantity(value: Decimal) -> Any:
    return _QuantityMessage(value=_canonical_decimal(value), qkey=_quantity_key(value))


@functools.lru_cache(maxsize=4096)
def _decimal_of(canonical: str) -> Decimal:
    return Decimal(canonical)


def _kind(value: Any) -> str:
    """A CEL-ish type name for error messages and type checks inside impls."""
    descriptor = getattr(value, "DESCRIPTOR", None)
    if descriptor is not None:
        return str(descriptor.name)
    return {bool: "bool", int: "int", str: "string", float: "double", list: "list"}.get(
        type(value), type(value).__name__
    )


def _q(message: Any) -> Decimal:
    if _kind(message) != "Quantity":
        raise TypeError(f"no matching overload: expected a Quantity, got {_kind(message)}")
    try:
        return _decimal_of(message.value)
    except InvalidOperation as exc:
        raise ValueError("malformed quantity") from exc


# Semantic versions: semver.org 2.0.0, as github.com/blang/semver/v4 Parse accepts them.
_IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER_RE = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    rf"(?:-({_IDENT}(?:\.{_IDENT})*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)


def parse_semver(text: str, *, normalize: bool = False) -> Any:
    """A Semver message; raises ValueError. `normalize` drops a leading 'v', pads 'x' and 'x.y' and strips leading
    zeros of the numeric parts, like Kubernetes' semver(<string>, true)."""
    if not isinstance(text, str):
        raise ValueError("semantic version must be a string")
    candidate = _normalize_semver(text) if normalize else text
    match = _SEMVER_RE.fullmatch(candidate)
    if not match:
        raise ValueError(f'invalid semantic version "{text[:80]}"')
    major, minor, patch = (int(part) for part in match.group(1, 2, 3))
    if max(major, minor, patch) > UINT64_MAX:
        raise ValueError(f'invalid semantic version "{text[:80]}": number out of range')
    prerelease = match.group(4) or ""
    key = _semver_key(major, minor, patch, prerelease)
    return _SemverMessage(major=major, minor=minor, patch=patch, prerelease=prerelease, vkey=key)


def _semver_key(major: int, minor: int, patch: int, prerelease: str) -> str:
    """An ASCII string whose order is semver precedence (see _semver_order): length-prefixed numbers, then '~' for a
    release or '-' and the pre-release identifiers (numeric: '0' + length + digits, else '1' + text), separated by
    '#' and closed by '!' (both sort below every identifier character, so a shorter list sorts first)."""

    def number(value: int | str) -> str:
        digits = str(value)
        return f"{len(digits):04d}{digits}"

    key = number(major) + number(minor) + number(patch)
    if not prerelease:
        return key + "~"
    identifiers = ["0" + number(part) if part.isdigit() else "1" + part for part in prerelease.split(".")]
    return key + "-" + "#".join(identifiers) + "!"


def _normalize_semver(text: str) -> str:
    parts = text.removeprefix("v").split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            parts[index] = stripped if stripped[:1].isdigit() and stripped[:1].isascii() else "0" + stripped
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise ValueError(f'invalid semantic version "{text[:80]}": a short version cannot have a pre-release')
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _semver_order(version: Any) -> tuple[int, int, int, tuple[Any, ...]]:
    """Precedence per semver.org §11: a release ranks above its pre-releases; numeric identifiers rank below
    alphanumeric ones and compare as numbers; a shorter identifier list ranks lower when it is a prefix."""
    if not version.prerelease:
        return version.major, version.minor, version.patch, (1,)
    identifiers = tuple((0, int(i), "") if i.isdigit() else (1, 0, i) for i in version.prerelease.split("."))
    return version.major, version.minor, version.patch, (0, identifiers)


def _compare(left: Any, right: Any) -> int:
    return int(left > right) - int(left < right)


# The function library. Impls raise ValueError for CEL errors (the binding turns exceptions into error values).


def _quantity_from_string(text: str) -> Any:
    return _quantity(parse_quantity_strict(text))


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity_strict(text)
    except ValueError:
        return False
    return True


def _as_integer(quantity: Any) -> int:
    if not _is_integer(quantity):
        raise ValueError("cannot convert value to integer")
    return int(_q(quantity))


def _is_integer(quantity: Any) -> bool:
    value = _q(quantity)
    return value == value.to_integral_value() and INT64_MIN <= value <= INT64_MAX


def _quantity_arithmetic(operation: Callable[[Decimal, Decimal], Decimal]) -> Callable[[Any, Any], Any]:
    def impl(quantity: Any, other: Any) -> Any:
        right = Decimal(other) if type(other) is int else _q(other)
        with localcontext() as context:
            context.prec = 1000
            return _quantity(operation(_q(quantity), right))

    return impl


def _ordered(left: Any, right: Any) -> tuple[Any, Any]:
    """Comparable stand-ins for two Quantities or two Semvers. The runtime dispatches impls on value kinds (all
    messages are one kind), so one impl serves both types and checks them here."""
    kinds = (_kind(left), _kind(right))
    if kinds == ("Quantity", "Quantity"):
        return _q(left), _q(right)
    if kinds == ("Semver", "Semver"):
        return _semver_order(left), _semver_order(right)
    raise TypeError(f"no matching overload: cannot compare {kinds[0]} with {kinds[1]}")


def _semver_part(name: str) -> Callable[[Any], int]:
    def impl(version: Any) -> int:
        if _kind(version) != "Semver":
            raise TypeError(f"no matching overload: {name}() needs a Semver, got {_kind(version)}")
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
    kind = _kind(value)
    items = container if isinstance(container, list) else [container]
    return any(_kind(item) == kind and item == value for item in items)


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


def _functions() -> list[cel.FunctionDecl]:
    boolean, integer, double, string = cel.Type.BOOL, cel.Type.INT, cel.Type.DOUBLE, cel.Type.STRING
    q, v = QUANTITY_TYPE, SEMVER_TYPE
    add = _quantity_arithmetic(lambda a, b: a + b)
    sub = _quantity_arithmetic(lambda a, b: a - b)
    declarations: dict[str, list[cel.Overload]] = {
        "quantity": [_global("string_to_quantity", q, [string], _quantity_from_string)],
        "isQuantity": [_global("is_quantity_string", boolean, [string], _is_quantity)],
        "sign": [_overload("quantity_sign", integer, [q], lambda a: _compare(_q(a), 0))],
        "isInteger": [_overload("quantity_is_integer", boolean, [q], _is_integer)],
        "asInteger": [_overload("quantity_get_int", integer, [q], _as_integer)],
        "asApproximateFloat": [_overload("quantity_get_float", double, [q], lambda a: float(_q(a)))],
        "add": [_overload("quantity_add", q, [q, q], add), _overload("quantity_add_int", q, [q, integer], add)],
        "sub": [_overload("quantity_sub", q, [q, q], sub), _overload("quantity_sub_int", q, [q, integer], sub)],
        "compareTo": [
            _overload("quantity_compare_to", integer, [q, q], lambda a, b: _compare(*_ordered(a, b))),
            _overload("semver_compare_to", integer, [v, v]),
        ],
        "isLessThan": [
            _overload("quantity_is_less_than", boolean, [q, q], lambda a, b: _compare(*_ordered(a, b)) < 0),
            _overload("semver_is_less_than", boolean, [v, v]),
        ],
        "isGreaterThan": [
            _overload("quantity_is_greater_than", boolean, [q, q], lambda a, b: _compare(*_ordered(a, b)) > 0),
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


_DRIVER_VAR = "device.driver"
_MULTI_VAR = "device.allowMultipleAllocations"
_ATTRIBUTES_VAR = "device.attributes"
_CAPACITY_VAR = "device.capacity"
_ROOTS = {_ATTRIBUTES_VAR: "attributes", _CAPACITY_VAR: "capacity"}

_env_lock = threading.Lock()
_env: cel.Env | None = None


def _environment() -> cel.Env:
    """The process-wide CEL environment (built on first use). `device.x` are declared as qualified variables, which
    gives compile errors for unknown fields (`device.drivr`) like Kubernetes' object type does."""
    global _env
    with _env_lock:
        if _env is None:
            string = cel.Type.STRING
            _env = cel.NewEnv(
                _TYPES_POOL,
                variables={
                    _DRIVER_VAR: string,
                    _MULTI_VAR: cel.Type.BOOL,
                    _ATTRIBUTES_VAR: cel.Type.Map(string, cel.Type.Map(string, cel.Type.DYN)),
                    _CAPACITY_VAR: cel.Type.Map(string, cel.Type.Map(string, QUANTITY_TYPE)),
                },
                extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
                functions=_functions(),
            )
        return _env


# A subset of the public cel-spec schema (cel/expr/syntax.proto, checked.proto), enough to walk and rewrite the AST.
# Field numbers are those of the public protos; fields left out are kept as unknown fields when re-serializing.


_SCHEMA_POOL = _message_pool(
    "cel.expr",
    {
        "Expr": "id=2:int64 |const_expr=3:Constant |ident_expr=4:Expr.Ident |select_expr=5:Expr.Select "
        "|call_expr=6:Expr.Call |list_expr=7:Expr.CreateList |struct_expr=8:Expr.CreateStruct "
        "|comprehension_expr=9:Expr.Comprehension",
        "Expr.Ident": "name=1:string",
        "Expr.Select": "operand=1:Expr field=2:string test_only=3:bool",
        "Expr.Call": "target=1:Expr function=2:string args=3:Expr[]",
        "Expr.CreateList": "elements=1:Expr[] optional_indices=2:int32[]",
        "Expr.CreateStruct": "message_name=1:string entries=2:Expr.CreateStruct.Entry[]",
        "Expr.CreateStruct.Entry": "id=1:int64 |field_key=2:string |map_key=3:Expr value=4:Expr optional_entry=5:bool",
        "Expr.Comprehension": "iter_var=1:string iter_range=2:Expr accu_var=3:string accu_init=4:Expr "
        "loop_condition=5:Expr loop_step=6:Expr result=7:Expr iter_var2=8:string",
        "Constant": "|bool_value=2:bool |int64_value=3:int64 |uint64_value=4:uint64 |double_value=5:double "
        "|string_value=6:string |bytes_value=7:bytes",
        "SourceInfo": "line_offsets=3:int32[] positions=4:map<int64,int32>",
        "CheckedExpr": "reference_map=2:map<int64,Reference> type_map=3:map<int64,Type> expr=4:Expr "
        "source_info=5:SourceInfo",
        "Reference": "name=1:string overload_id=3:string[]",
        "Type": "message_type=9:string",  # only the member we read; the others stay unknown fields
        "ParsedExpr": "expr=2:Expr source_info=3:SourceInfo",
    },
)
_CheckedExpr: Any = message_factory.GetMessageClass(_SCHEMA_POOL.FindMessageTypeByName("cel.expr.CheckedExpr"))
_ParsedExpr: Any = message_factory.GetMessageClass(_SCHEMA_POOL.FindMessageTypeByName("cel.expr.ParsedExpr"))


def _children(node: Any) -> list[Any]:
    kind = node.WhichOneof("expr_kind")
    if kind == "select_expr":
        return [node.select_expr.operand]
    if kind == "call_expr":
        call = node.call_expr
        return ([call.target] if call.HasField("target") else []) + list(call.args)
    if kind == "list_expr":
        return list(node.list_expr.elements)
    if kind == "struct_expr":
        entries = node.struct_expr.entries
        return [entry.map_key for entry in entries if entry.HasField("map_key")] + [entry.value for entry in entries]
    if kind == "comprehension_expr":
        loop = node.comprehension_expr
        return [loop.iter_range, loop.accu_init, loop.loop_condition, loop.loop_step, loop.result]
    return []


def _nodes(root: Any) -> list[Any]:
    """Every node of an AST, in no particular order."""
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(_children(node))
    return found


def _unpack(serialized: bytes, message_class: Any) -> Any:
    envelope = any_pb2.Any()
    envelope.ParseFromString(serialized)
    message = message_class()
    message.ParseFromString(envelope.value)
    return message


# Compile errors: "INVALID_ARGUMENT: ERROR: <input>:2:6: undeclared reference to 'foo' (in container '')\n | ..."
_COMPILE_ERROR_RE = re.compile(r"ERROR: <input>:(\d+):(\d+): (.*?)(?:\n \||\Z)", re.DOTALL)
_STATUS_PREFIX_RE = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX_RE = re.compile(r"\s*\[[A-Z_]+\]\s*$")


def _compile_error(raw: str, expression: str) -> CelCompileError:
    found = _COMPILE_ERROR_RE.findall(raw)
    if not found:
        message = _STATUS_SUFFIX_RE.sub("", _STATUS_PREFIX_RE.sub("", raw.strip()))
        return CelCompileError(message or "invalid expression", expression=expression)
    line, column, message = found[0]
    message = _STATUS_SUFFIX_RE.sub("", message.replace(" (in container '')", "").strip())
    if len(found) > 1:
        message += f" (and {len(found) - 1} more error{'s' if len(found) > 2 else ''})"
    return CelCompileError(message, expression=expression, line=int(line), column=int(column))


def _runtime_message(raw: str) -> str:
    message = _STATUS_SUFFIX_RE.sub("", _STATUS_PREFIX_RE.sub("", str(raw).strip()))
    if message.startswith("Key not found in map : "):
        return "no such key: " + message.removeprefix("Key not found in map : ")
    if message.startswith("No matching overloads found : "):
        return "no matching overload for " + message.removeprefix("No matching overloads found : ")
    return message


def _position(offset: int | None, expression: str) -> tuple[int | None, int | None]:
    if offset is None:
        return None, None
    before = expression[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


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
    _DRIVER_VAR: _Shape(MAX_DRIVER_LENGTH),
    _MULTI_VAR: _Shape(None),
    _ATTRIBUTES_VAR: _Shape(
        MAX_ENTRIES_PER_DEVICE,
        key=_Shape(MAX_DOMAIN_LENGTH),
        elem=_Shape(MAX_ENTRIES_PER_DEVICE, key=_Shape(MAX_ID_LENGTH), elem=_ATTRIBUTE),
        root="attributes",
    ),
    _CAPACITY_VAR: _Shape(
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
_STRING_OVERLOADS = {
    "_<_": "less_string",
    "_<=_": "less_equals_string",
    "_>_": "greater_string",
    "_>=_": "greater_equals_string",
    "_==_": "equals",
    "_!=_": "not_equals",
}
_TRAVERSAL_FACTOR = 0.1
_REGEX_FACTOR = 0.25


_QUANTITY_NAME, _SEMVER_NAME = "kubernetes.Quantity", "kubernetes.Semver"
_KEY_FIELDS = {_QUANTITY_NAME: "qkey", _SEMVER_NAME: "vkey"}


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


class _Analysis:
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
                if name not in _ROOTS:  # a device map is fed only when used as a whole (see _use)
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
            self.variables.add(_ATTRIBUTES_VAR if shape.root == "attributes" else _CAPACITY_VAR)
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
            self.variables.add(_ATTRIBUTES_VAR if accu_shape.root == "attributes" else _CAPACITY_VAR)
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
        return {frozenset({"quantity"}): _QUANTITY_NAME, frozenset({"semver"}): _SEMVER_NAME}.get(frozenset(families))

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
            value = _quantity_from_string(text) if function == "quantity" else parse_semver(text, normalize=normalize)
        except ValueError:
            return  # invalid literals fail at runtime, as in Kubernetes
        self.folds.append((node, value))

    def _error(self, node: Any, message: str, error: type[CelError]) -> CelError:
        line, column = _position(self.positions.get(int(node.id)), self.expression)
        return error(message, expression=self.expression, line=line, column=column)

    def cost_error(self, cost: int) -> CelLimitError:
        """Point at the outermost comprehension that alone exceeds the budget (or at nothing)."""
        for comprehension_cost, node_id in self.comprehensions:
            if comprehension_cost > MAX_COST:
                line, column = _position(self.positions.get(node_id), self.expression)
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


def _domain_variable(root: str, domain: str) -> str:
    return f"@{root}:{domain}"  # `@` cannot appear in a CEL identifier, so no user variable can collide


def _rewrite(analysis: _Analysis) -> Any:
    """Apply the rewrites to the checked AST (in place) and return it serialized, ready for `Env.deserialize`."""
    checked = analysis.checked
    next_id = max(int(node.id) for node in _nodes(checked.expr)) + 1
    for node, root, domain in analysis.domain_nodes:
        name = _domain_variable(root, domain)
        node.ClearField(str(node.WhichOneof("expr_kind")))
        node.ident_expr.name = name
        if node.id in checked.reference_map:
            del checked.reference_map[node.id]
        checked.reference_map[node.id].name = name
    for node, value in analysis.folds:
        fields = [
            (descriptor.name, "string_value" if descriptor.type == _F.TYPE_STRING else "uint64_value", constant)
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
    for node in _nodes(checked.expr):
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
        for item in _nodes(copy):
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


_HAS_RE = re.compile(r"\bhas\s*\(")


def _reject_has_on_device_fields(env: cel.Env, expression: str) -> None:
    """`has(device.driver)` cannot work with `device.x` declared as qualified variables (the checker resolves the
    whole name and drops the presence test), so it is refused instead of silently returning the field's value."""
    try:
        parsed = _unpack(env.compile(expression, disable_check=True).serialize(), _ParsedExpr)
    except RuntimeError:
        return  # the checked compile reports the syntax error
    positions = dict(parsed.source_info.positions)
    for node in _nodes(parsed.expr):
        if node.WhichOneof("expr_kind") != "select_expr" or not node.select_expr.test_only:
            continue
        operand = node.select_expr.operand
        if operand.WhichOneof("expr_kind") == "ident_expr" and operand.ident_expr.name.lstrip(".") == "device":
            line, column = _position(positions.get(int(node.id)), expression)
            raise CelCompileError(
                f"has(device.{node.select_expr.field}) is not supported: the fields of `device` always exist",
                expression=expression,
                line=line,
                column=column,
            )


# Devices


@dataclass(frozen=True, slots=True, eq=False)
class DeviceInput:
    """The CEL view of one device, prepared once and reused by every selector.

    `attributes`/`capacity` map domain → name → CEL value (int, bool, str, a Semver or Quantity message, or a list).
    `skipped` explains raw entries that could not be used (malformed values from the cluster)."""

    driver: str
    allow_multiple_allocations: bool
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Any]]
    skipped: tuple[str, ...] = ()
    _tokens: dict[tuple[str, ...], Hashable] = field(default_factory=dict, repr=False)

    def map_token(self, root: str, domain: str | None = None) -> Hashable:
        """A hashable stand-in for a whole domain map (or the whole root map when `domain` is None)."""
        key = (root,) if domain is None else (root, domain)
        token = self._tokens.get(key)
        if token is None:
            source = self.attributes if root == "attributes" else self.capacity
            if domain is None:
                token = tuple(sorted((name, self.map_token(root, name)) for name in source))
            else:
                token = tuple(sorted((name, _token(value)) for name, value in source.get(domain, _EMPTY).items()))
            self._tokens[key] = token
        return token


_EMPTY: Mapping[str, Any] = {}
_ABSENT = object()


def _token(value: Any) -> Hashable:
    """Equal tokens mean equal CEL values (the type is part of it: 1, 1.0 and true must not share a memo entry)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool:
        return kind, value
    if kind is list:
        return kind, tuple(_token(item) for item in value)
    if value is _ABSENT:
        return None
    return value.DESCRIPTOR.name, value.qkey if value.DESCRIPTOR.name == "Quantity" else value.vkey


_LIST_KINDS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}
_KINDS = frozenset({"int", "bool", "string", "version", *_LIST_KINDS})


@functools.lru_cache(maxsize=8192)
def _version_value(text: str) -> Any:
    return parse_semver(text)  # shared message instances: CEL never mutates its inputs


@functools.lru_cache(maxsize=8192)
def _capacity_value(text: str) -> Any:
    return _quantity_from_string(text)


def _scalar(kind: str, raw: Any) -> Any:
    """One typed attribute value; raises ValueError for a malformed one."""
    if kind == "string":
        if type(raw) is not str:
            raise ValueError(f"not a string: {str(raw)[:40]!r}")
        return raw
    if kind == "int":
        if type(raw) is not int or not INT64_MIN <= raw <= INT64_MAX:
            raise ValueError(f"not a 64-bit integer: {str(raw)[:40]!r}")
        return raw
    if kind == "bool":
        if type(raw) is not bool:
            raise ValueError(f"not a bool: {str(raw)[:40]!r}")
        return raw
    if type(raw) is not str:
        raise ValueError(f"not a version string: {str(raw)[:40]!r}")
    return _version_value(raw)


def _attribute(raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        raise ValueError("not a mapping")
    kinds = [key for key in raw if key in _KINDS]
    if len(kinds) != 1:
        raise ValueError("exactly one of int, bool, string, version, ints, bools, strings, versions must be set")
    kind = kinds[0]
    if kind in _LIST_KINDS:
        items = raw[kind]
        if not isinstance(items, list | tuple):
            raise ValueError(f"{kind} is not a list")
        return [_scalar(_LIST_KINDS[kind], item) for item in items]
    return _scalar(kind, raw[kind])


def _capacity(raw: Any) -> Any:
    text = raw.get("value") if isinstance(raw, Mapping) else raw
    if type(text) is int:
        text = str(text)
    if type(text) is not str:
        raise ValueError("no quantity value")
    return _capacity_value(text)


def device_input(
    *,
    driver: str,
    attributes: Mapping[str, Any] | None,
    capacity: Mapping[str, Any] | None,
    allow_multiple_allocations: bool = False,
) -> DeviceInput:
    """Prepare a device as published in a ResourceSlice (`attributes`/`capacity` of `spec.devices[]`).

    Never raises: malformed entries (a bad quantity or version, an unknown value shape, a non-mapping) are left out
    and described in `skipped`, so one bad device in a cluster cannot break matching for the others. A qualified
    name is `<domain>/<identifier>`; a name without a domain belongs to the driver's domain."""
    driver = driver if isinstance(driver, str) else ""
    skipped: list[str] = []
    roots: dict[str, dict[str, dict[str, Any]]] = {"attributes": {}, "capacity": {}}
    for root, raw_entries, convert in (("attributes", attributes, _attribute), ("capacity", capacity, _capacity)):
        if raw_entries is None:
            continue
        if not isinstance(raw_entries, Mapping):
            skipped.append(f"{root}: not a mapping")
            continue
        target = roots[root]
        for name, raw in raw_entries.items():
            try:
                if type(name) is not str or not name:
                    raise ValueError("invalid name")
                domain, slash, identifier = name.partition("/")
                if not slash:
                    domain, identifier = driver, name
                elif not domain or not identifier:
                    raise ValueError("invalid qualified name")
                value = convert(raw)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                skipped.append(f"{root} {str(name)[:80]!r}: {exc}")
                continue
            values = target.get(domain)
            if values is None:
                values = target[domain] = {}
            values[identifier] = value
    return DeviceInput(
        driver=driver,
        allow_multiple_allocations=allow_multiple_allocations is True,
        attributes=roots["attributes"],
        capacity=roots["capacity"],
        skipped=tuple(skipped),
    )


# Selectors


@dataclass(frozen=True, slots=True)
class _Feed:
    """One activation variable of a compiled selector and how to take it (and its memo token) from a device."""

    variable: str
    root: str | None = None  # "attributes"/"capacity" for device maps
    domain: str | None = None  # one domain's map (a rewritten `device.attributes["d"]`)
    names: tuple[str, ...] | None = None  # only these names are read (statically); None: the whole map

    def value(self, device: DeviceInput) -> Any:
        if self.variable == _DRIVER_VAR:
            return device.driver
        if self.variable == _MULTI_VAR:
            return device.allow_multiple_allocations
        source = device.attributes if self.root == "attributes" else device.capacity
        if self.domain is None:
            return source
        values = source.get(self.domain, _EMPTY)
        if self.names is None:
            return values
        return {name: values[name] for name in self.names if name in values}

    def token(self, device: DeviceInput) -> Hashable:
        if self.variable == _DRIVER_VAR:
            return device.driver
        if self.variable == _MULTI_VAR:
            return device.allow_multiple_allocations
        if self.root is None or self.names is None:
            return device.map_token(self.root or "", self.domain)
        source = device.attributes if self.root == "attributes" else device.capacity
        values = source.get(self.domain, _EMPTY) if self.domain is not None else _EMPTY
        return tuple([_token(values.get(name, _ABSENT)) for name in self.names])


class Selector:
    """A compiled, type-checked selector. Immutable and safe to share between threads."""

    __slots__ = ("_feeds", "_program", "domains", "estimated_cost", "expression")

    def __init__(
        self, expression: str, program: cel.Expression, feeds: tuple[_Feed, ...], cost: int, domains: frozenset[str]
    ) -> None:
        self.expression = expression
        self.estimated_cost = cost
        self.domains = domains
        self._program = program
        self._feeds = feeds

    def __repr__(self) -> str:
        return f"Selector({self.expression!r}, estimated_cost={self.estimated_cost})"

    def evaluate(self, device: DeviceInput) -> bool:
        """True if the device matches; raises CelRuntimeError when evaluation fails (e.g. a missing attribute)."""
        outcome = self._outcome(device)
        if isinstance(outcome, str):
            raise CelRuntimeError(outcome, expression=self.expression)
        return outcome

    def _key(self, device: DeviceInput) -> Hashable:
        return tuple([feed.token(device) for feed in self._feeds])

    def _outcome(self, device: DeviceInput) -> bool | str:
        """The result, or the runtime error message."""
        try:
            result = self._program.eval(data={feed.variable: feed.value(device) for feed in self._feeds})
        except RuntimeError as exc:  # the binding reports most failures as error values, a few as exceptions
            return _runtime_message(str(exc))
        value = result.value()
        if type(value) is bool:
            return value
        if result.type() == cel.Type.ERROR:
            return _runtime_message(value)
        kind = result.type()
        return f"the selector evaluated to {kind.name() if kind.is_message() else kind.name().lower()}, not bool"


@functools.lru_cache(maxsize=2048)
def compile_selector(expression: str) -> Selector:
    """Compile and check a DRA selector. Raises CelLimitError (length, cost) or CelCompileError."""
    if not isinstance(expression, str):
        raise CelCompileError("the expression must be a string")
    size = len(expression.encode())
    if size > MAX_EXPRESSION_LENGTH:
        raise CelLimitError(
            f"the expression is {size:,} bytes long; the limit is {MAX_EXPRESSION_LENGTH:,}", expression=expression
        )
    if not expression.strip():
        raise CelCompileError("the expression is empty", expression=expression)
    env = _environment()
    if _HAS_RE.search(expression):
        _reject_has_on_device_fields(env, expression)
    try:
        compiled = env.compile(expression)
    except RuntimeError as exc:
        raise _compile_error(str(exc), expression) from None
    result_type = compiled.return_type()
    if result_type not in (cel.Type.BOOL, cel.Type.DYN):
        name = result_type.name() if result_type.is_message() else result_type.name().lower()
        raise CelCompileError(f"the selector must evaluate to bool, not {name}", expression=expression)

    analysis = _Analysis(_unpack(compiled.serialize(), _CheckedExpr), expression)
    cost, _ = analysis.walk(analysis.checked.expr, {})
    if cost > MAX_COST:
        raise analysis.cost_error(cost)
    try:
        program = env.deserialize(_rewrite(analysis))
    except RuntimeError as exc:  # a rewrite the runtime refuses is our bug; report it as such, never crash a caller
        raise CelCompileError(f"internal error preparing the selector: {exc}", expression=expression) from None

    feeds = [_Feed(variable) for variable in (_DRIVER_VAR, _MULTI_VAR) if variable in analysis.variables]
    feeds += [
        _Feed(variable, root=_ROOTS[variable])
        for variable in (_ATTRIBUTES_VAR, _CAPACITY_VAR)
        if variable in analysis.variables
    ]
    for root, domain in sorted({(root, domain) for _, root, domain in analysis.domain_nodes}):
        whole = (root, domain) in analysis.whole_domains
        names = None if whole else tuple(sorted(analysis.static_names.get((root, domain), ())))
        feeds.append(_Feed(_domain_variable(root, domain), root=root, domain=domain, names=names))
    domains = frozenset(domain for _, _, domain in analysis.domain_nodes)
    return Selector(expression, program, tuple(feeds), cost, domains)


@dataclass
class MatchResult:
    matched: list[int] = field(default_factory=list)  # indexes of devices for which every selector is true
    errors: dict[int, str] = field(default_factory=dict)  # index → runtime error (an error is not a non-match)


def match_devices(
    selectors: Sequence[Selector], devices: Sequence[DeviceInput], *, memoize: bool = True
) -> MatchResult:
    """AND of the selectors (DeviceClass first, then the request's), in order, stopping at the first false or error.

    With `memoize`, each selector is evaluated once per distinct combination of the values it reads (devices of one
    model usually share them); the outcome is the same as evaluating every device, because selectors are pure."""
    result = MatchResult()
    memos: list[dict[Hashable, bool | str]] = [{} for _ in selectors]
    for index, device in enumerate(devices):
        for selector, memo in zip(selectors, memos, strict=True):
            if memoize:
                key = selector._key(device)
                outcome = memo.get(key)
                if outcome is None:
                    outcome = memo[key] = selector._outcome(device)
            else:
                outcome = selector._outcome(device)
            if outcome is True:
                continue
            if outcome is not False:
                result.errors[index] = outcome
            break
        else:
            result.matched.append(index)
    return result
