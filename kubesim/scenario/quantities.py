"""Kubernetes quantities and consumable capacity (KEP-5075): parsing, formatting, what a request consumes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .common import ScenarioError
from .spec import _check_keys, _list

_QTY_RE = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_QTY_MULT = {
    None: 1,
    "m": Fraction(1, 1000),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def parse_quantity(value: Any, ctx: str = "quantity") -> Fraction:
    """Parse a Kubernetes quantity ("500m", "64Gi", 8, "1.5") into an exact Fraction."""
    if isinstance(value, bool):
        raise ScenarioError(f"{ctx}: {value!r} is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    m = _QTY_RE.match(str(value).strip())
    if not m:
        raise ScenarioError(f"{ctx}: {value!r} is not a valid Kubernetes quantity")
    num = Fraction(m.group(1)) * (Fraction(10) ** int(m.group(2)[1:]) if m.group(2) else 1)
    return num * _QTY_MULT[m.group(3)]


def _fmt_cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _fmt_bytes(n: int) -> str:
    for suffix, mult in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


def _fmt_quantity(value: Fraction, binary: bool) -> str:
    """A quantity as the API server prints it: 20Gi (binary capacities), 500M, 1500m, 7."""
    if value.denominator == 1:
        n = int(value)
        for suffix, mult in (_BINARY_SUFFIXES if binary else ()) + _DECIMAL_SUFFIXES:
            if n and n % mult == 0:
                return f"{n // mult}{suffix}"
        return str(n)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{int(milli)}m"
    return str(float(value))


_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL_SUFFIXES = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


# consumable capacity (KEP-5075), the rules of kube-scheduler's structured allocator:
# what a request consumes of every capacity of a device with allowMultipleAllocations, and whether it fits
@dataclass
class CapacityPolicy:
    default: Fraction | None = None
    values: tuple[Fraction, ...] = ()  # validValues, ascending
    ranged: bool = False
    low: Fraction | None = None
    high: Fraction | None = None
    step: Fraction | None = None


def _capacity_policy(raw: Any, ctx: str) -> CapacityPolicy:
    _check_keys(raw, {"default", "validValues", "validRange"}, ctx)
    default = parse_quantity(raw["default"], f"{ctx}.default") if raw.get("default") is not None else None
    if raw.get("validValues") is not None and raw.get("validRange") is not None:
        raise ScenarioError(f"{ctx}: give validValues or validRange, not both")
    if raw.get("validRange") is not None:
        rng = _check_keys(raw["validRange"], {"min", "max", "step"}, f"{ctx}.validRange", ("min",))
        return CapacityPolicy(
            default=default,
            ranged=True,
            low=parse_quantity(rng["min"], f"{ctx}.validRange.min"),
            high=parse_quantity(rng["max"], f"{ctx}.validRange.max") if rng.get("max") is not None else None,
            step=parse_quantity(rng["step"], f"{ctx}.validRange.step") if rng.get("step") is not None else None,
        )
    values = tuple(sorted(parse_quantity(v, f"{ctx}.validValues") for v in _list(raw, "validValues", ctx)))
    return CapacityPolicy(default=default, values=values)


def _policy_json(policy: CapacityPolicy, binary: bool) -> dict:
    out: dict[str, Any] = {}
    if policy.default is not None:
        out["default"] = _fmt_quantity(policy.default, binary)
    if policy.ranged:
        rng = {"min": _fmt_quantity(policy.low, binary)}
        if policy.high is not None:
            rng["max"] = _fmt_quantity(policy.high, binary)
        if policy.step is not None:
            rng["step"] = _fmt_quantity(policy.step, binary)
        out["validRange"] = rng
    elif policy.values:
        out["validValues"] = [_fmt_quantity(v, binary) for v in policy.values]
    return out


def _consumed_amount(requested: Fraction | None, total: Fraction, policy: CapacityPolicy | None) -> Fraction | None:
    """The amount one request consumes of one capacity, or None when the request policy refuses it."""
    if requested is None:
        amount = policy.default if policy is not None and policy.default is not None else total
    elif policy is None:
        amount = requested
    elif policy.ranged and policy.low is not None:
        if requested < policy.low:
            amount = policy.low
        elif policy.step:
            steps = -(-(requested - policy.low) // policy.step)
            amount = policy.low + policy.step * steps
        else:
            amount = requested
    else:
        amount = next((v for v in policy.values if requested <= v), requested)
    if policy is None or (policy.default is not None and amount == policy.default):
        return amount
    if policy.ranged:
        if policy.high is not None and amount > policy.high:
            return None
        if policy.step and (amount - (policy.low or 0)) % policy.step:
            return None
    elif policy.values and amount not in policy.values:
        return None
    return amount
