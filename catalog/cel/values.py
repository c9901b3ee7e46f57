"""Kubernetes value types for CEL: Quantity and Semver as protobuf messages whose fields hold canonical forms, so
message equality is semantic equality, with order-preserving string keys for fast comparisons."""

from __future__ import annotations

import functools
import re
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from cel_expr_python import cel
from google.protobuf import message_factory

from catalog.cel.protos import message_pool
from inventory.k8s.semantics import QuantityError, parse_quantity

TYPES_POOL = message_pool(
    "kubernetes",
    {
        "Quantity": "value=1:string qkey=2:string",  # canonical decimal; order-preserving key (see _quantity_key)
        "Semver": "major=1:uint64 minor=2:uint64 patch=3:uint64 prerelease=4:string vkey=5:string",
    },
)
_QuantityMessage: Any = message_factory.GetMessageClass(TYPES_POOL.FindMessageTypeByName("kubernetes.Quantity"))
_SemverMessage: Any = message_factory.GetMessageClass(TYPES_POOL.FindMessageTypeByName("kubernetes.Semver"))
QUANTITY_TYPE = cel.Type("kubernetes.Quantity")
SEMVER_TYPE = cel.Type("kubernetes.Semver")
QUANTITY_NAME, SEMVER_NAME = "kubernetes.Quantity", "kubernetes.Semver"

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


def quantity_of(value: Decimal) -> Any:
    return _QuantityMessage(value=_canonical_decimal(value), qkey=_quantity_key(value))


@functools.lru_cache(maxsize=4096)
def _decimal_of(canonical: str) -> Decimal:
    return Decimal(canonical)


def kind_of(value: Any) -> str:
    """A CEL-ish type name for error messages and type checks inside impls."""
    descriptor = getattr(value, "DESCRIPTOR", None)
    if descriptor is not None:
        return str(descriptor.name)
    return {bool: "bool", int: "int", str: "string", float: "double", list: "list"}.get(
        type(value), type(value).__name__
    )


def quantity_decimal(message: Any) -> Decimal:
    if kind_of(message) != "Quantity":
        raise TypeError(f"no matching overload: expected a Quantity, got {kind_of(message)}")
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
    """An ASCII string whose order is semver precedence (see semver_order): length-prefixed numbers, then '~' for a
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


def semver_order(version: Any) -> tuple[int, int, int, tuple[Any, ...]]:
    """Precedence per semver.org §11: a release ranks above its pre-releases; numeric identifiers rank below
    alphanumeric ones and compare as numbers; a shorter identifier list ranks lower when it is a prefix."""
    if not version.prerelease:
        return version.major, version.minor, version.patch, (1,)
    identifiers = tuple((0, int(i), "") if i.isdigit() else (1, 0, i) for i in version.prerelease.split("."))
    return version.major, version.minor, version.patch, (0, identifiers)


def compare(left: Any, right: Any) -> int:
    return int(left > right) - int(left < right)


def quantity_from_string(text: str) -> Any:
    return quantity_of(parse_quantity_strict(text))
