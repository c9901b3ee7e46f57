"""Kubernetes resource quantities (`k8s.io/apimachinery/pkg/api/resource`), exactly.

Grammar (`ParseQuantity`):

    <quantity>  ::= <sign>? <number> <suffix>?
    <number>    ::= <digits> | <digits>.<digits>? | .<digits>
    <suffix>    ::= Ki | Mi | Gi | Ti | Pi | Ei            (binary SI)
                  | n | u | m | k | M | G | T | P | E      (decimal SI; "" too)
                  | e<signed integer> | E<signed integer>  (decimal exponent)

Values are exact `Fraction`s. Like the API server, a non-zero value is rounded *up* (away from zero) to a multiple
of 1n (10^-9) — "if you want some resources you should get some" — and a binary-SI value is capped at 2^63 - 1
(decimal values are not capped upstream either). A decimal exponent beyond +-1000 is refused here (Go accepts up to
int32; no cluster serves such a value, and computing it would cost more than it is worth); below -1000 a non-zero
value rounds up to 1n as upstream. Numbers (int, and finite floats) are accepted where JSON carries them. `scheduler_amount` gives the kube-scheduler's integer
for a resource: millicores for cpu (`MilliValue`, rounded up), the value rounded up for everything else.
"""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

__all__ = [
    "MAX_QUANTITY",
    "QuantityError",
    "format_quantity",
    "parse_quantity",
    "quantity_or_none",
    "scheduler_amount",
]

MAX_QUANTITY = Fraction(2**63 - 1)
_NANO = Fraction(1, 10**9)
_GRAMMAR = re.compile(r"([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_MAX_TEXT = 128  # longer text is no quantity a cluster would serve; refusing it bounds the work
_MAX_EXPONENT = 1000


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def _round(value: Fraction, *, cap: bool = False) -> Fraction:
    if value == 0:
        return Fraction(0)
    magnitude = abs(value)
    if magnitude.denominator != 1:
        magnitude = Fraction(math.ceil(magnitude / _NANO)) * _NANO
    if cap:
        magnitude = min(magnitude, MAX_QUANTITY)
    return magnitude if value > 0 else -magnitude


@functools.lru_cache(maxsize=32768)
def _parse_text(text: str) -> Fraction:
    if len(text) > _MAX_TEXT:
        raise QuantityError(f"not a quantity (longer than {_MAX_TEXT} characters)")
    match = _GRAMMAR.fullmatch(text)
    if match is None:
        raise QuantityError(f"not a quantity: {text[:64]!r}")
    sign, number, suffix = match.groups()
    amount = Fraction(number)
    suffix = suffix or ""
    if suffix in _BINARY:
        amount *= 2 ** _BINARY[suffix]
        return _round(-amount if sign == "-" else amount, cap=True)
    exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
    if amount and exponent > _MAX_EXPONENT:
        raise QuantityError(f"quantity out of range: {text[:64]!r}")
    if amount and exponent < -_MAX_EXPONENT:
        amount = _NANO  # rounds up to the smallest representable amount, as upstream
    else:
        amount *= Fraction(10) ** exponent
    return _round(-amount if sign == "-" else amount)


def parse_quantity(value: Any) -> Fraction:
    """The exact value of a quantity given as text (the grammar above) or as a JSON number; QuantityError (a
    ValueError) for anything else. Booleans are not numbers here."""
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return _round(Fraction(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"not a quantity: {value!r}")
        return _round(Fraction(Decimal(repr(value))))
    if isinstance(value, (Fraction, Decimal)):
        return _round(Fraction(value))
    raise QuantityError(f"not a quantity: {type(value).__name__}")


def quantity_or_none(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def scheduler_amount(resource: str, value: Any) -> int:
    """The kube-scheduler's integer (`framework.Resource`): cpu in millicores, rounded up; any other resource (bytes,
    units) rounded up. Raises QuantityError for a malformed quantity."""
    amount = parse_quantity(value)
    return math.ceil(amount * 1000) if resource == "cpu" else math.ceil(amount)


_BINARY_STEPS = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL_STEPS = (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3), ("", 0), ("m", -3), ("u", -6),
                  ("n", -9))


def format_quantity(value: Fraction | int, *, binary: bool = False) -> str:
    """The canonical text of a quantity, as the API server serialises it: no fractional digits, the largest suffix
    that loses nothing (binary SI for byte amounts that are multiples of 1024 when `binary`, decimal otherwise)."""
    amount = _round(Fraction(value))
    sign = "-" if amount < 0 else ""
    amount = abs(amount)
    if amount == 0:
        return "0"
    if binary and amount.denominator == 1:
        for suffix, factor in _BINARY_STEPS:
            if amount % factor == 0:
                return f"{sign}{amount // factor}{suffix}"
        if amount < 1024:
            return f"{sign}{amount}"
    for suffix, exponent in _DECIMAL_STEPS:
        scaled = amount / Fraction(10) ** exponent
        if scaled.denominator == 1:
            return f"{sign}{scaled.numerator}{suffix}"
    raise AssertionError("unreachable: every rounded quantity is a whole number of nano")  # pragma: no cover
