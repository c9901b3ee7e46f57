"""Consumable capacity of DRA devices (KEP-5075): what one request consumes of a device, and whether it fits.

A device with `allowMultipleAllocations: true` can be allocated to several claims at once; each allocation consumes
part of the device's `capacity` entries (`allocation.devices.results[].consumedCapacity`) and gets a `shareID`.
The rules below are those of kube-scheduler's structured allocator
(`k8s.io/dynamic-resource-allocation/structured/internal/*/consumable_capacity.go`), written with exact rational
arithmetic:

- names: a capacity published without a domain belongs to the driver's domain; when a device publishes a name both
  ways, the explicitly qualified entry wins. A request may name a capacity either way; a request naming a capacity
  the device does not have does not fit that device (another device may have it);
- what a request consumes, for every capacity of the device (requested or not):
  no entry in the request → the policy's `default`, else the capacity's full value;
  an entry and no `requestPolicy` → the requested amount;
  `validRange` → `min` when the request is below it, else (with `step`) rounded up to `min + k·step`, else as is;
  `validValues` (ascending) → the smallest valid value ≥ the request, else the request itself;
- the consumed amount violates the policy (the device is refused) unless it equals the default, when it is above
  `validRange.max` or off the step grid, or not one of `validValues`;
- it fits when, for every capacity, what allocated claims consume + what is being allocated + this ≤ the value.

Pure: no Django, no models. Quantities are exact `Fraction`s, parsed and printed by `inventory.k8s.semantics`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from inventory.k8s.semantics import format_quantity, parse_quantity

_BINARY_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


@dataclass(frozen=True, slots=True)
class Policy:
    """A capacity's `requestPolicy`."""

    default: Fraction | None = None
    valid_values: tuple[Fraction, ...] = ()
    has_range: bool = False
    minimum: Fraction | None = None
    maximum: Fraction | None = None
    step: Fraction | None = None

    def describe(self, binary: bool) -> str:
        """`valid values 10Gi, 20Gi` / `range 10Gi..80Gi in steps of 10Gi` (+ the default)."""
        def q(value: Fraction) -> str:
            return format_quantity(value, binary=binary)

        parts = []
        if self.has_range:
            low = q(self.minimum) if self.minimum is not None else "0"
            high = q(self.maximum) if self.maximum is not None else "capacity"
            parts.append(f"range {low}..{high}" + (f" in steps of {q(self.step)}" if self.step else ""))
        elif self.valid_values:
            parts.append("valid values " + ", ".join(q(v) for v in self.valid_values))
        if self.default is not None:
            parts.append(f"default {q(self.default)}")
        return "; ".join(parts) or "no constraint"


@dataclass(frozen=True, slots=True)
class Capacity:
    """One capacity of a device: its total value and request policy."""

    name: str  # fully qualified: <domain>/<identifier>
    value: Fraction
    policy: Policy | None
    binary: bool  # published with a binary suffix (Ki, Mi, Gi...): format amounts the same way

    def format(self, amount: Fraction) -> str:
        return format_quantity(amount, binary=self.binary)


@dataclass(frozen=True, slots=True)
class Consumption:
    """What one request consumes of one device, or why the device cannot serve it (`reason`)."""

    amounts: dict[str, Fraction] = field(default_factory=dict)
    reason: str = ""

    @property
    def ok(self) -> bool:
        return not self.reason


def qualify(name: str, driver: str) -> str:
    """`memory` → `<driver>/memory`; qualified names stay as they are."""
    return name if "/" in name else f"{driver}/{name}"


def short_name(name: str, driver: str) -> str:
    """The name as people write it: without the driver's own domain."""
    return name.removeprefix(f"{driver}/")


def _quantity(raw: Any) -> Fraction:
    return parse_quantity(raw)  # QuantityError is a ValueError


def _is_binary(raw: Any) -> bool:
    return isinstance(raw, str) and raw.strip().endswith(_BINARY_SUFFIXES)


def _policy(raw: Any) -> Policy | None:
    if not isinstance(raw, Mapping):
        return None
    default = _quantity(raw["default"]) if raw.get("default") is not None else None
    values = tuple(sorted(_quantity(v) for v in raw.get("validValues") or ()))
    valid_range = raw.get("validRange")
    if isinstance(valid_range, Mapping):
        return Policy(
            default=default, has_range=True,
            minimum=_quantity(valid_range["min"]) if valid_range.get("min") is not None else None,
            maximum=_quantity(valid_range["max"]) if valid_range.get("max") is not None else None,
            step=_quantity(valid_range["step"]) if valid_range.get("step") is not None else None,
        )
    return Policy(default=default, valid_values=values)


def device_capacities(driver: str, raw: Any, problems: list[str] | None = None) -> dict[str, Capacity]:
    """A device's `capacity` map keyed by fully qualified name. Malformed entries are left out (and described in
    `problems`); an entry qualified with the driver's domain wins over the same name without a domain."""
    out: dict[str, Capacity] = {}
    if not isinstance(raw, Mapping):
        return out
    explicit: set[str] = set()
    for name, entry in raw.items():
        if not isinstance(name, str) or not name:
            continue
        try:
            value_raw = entry.get("value") if isinstance(entry, Mapping) else entry
            value = _quantity(value_raw)
            if value < 0:
                raise ValueError("capacity value is negative")
            policy = _policy(entry.get("requestPolicy")) if isinstance(entry, Mapping) else None
        except (ValueError, TypeError, KeyError) as exc:
            if problems is not None:
                problems.append(f"capacity {name[:80]!r}: {exc}")
            continue
        key = qualify(name, driver)
        if "/" in name:
            explicit.add(key)
        elif key in explicit:
            continue
        out[key] = Capacity(key, value, policy, _is_binary(value_raw))
    return out


def resolve_requests(driver: str, requests: Any, capacities: Mapping[str, Capacity]) -> tuple[dict[str, Fraction] | None,
                                                                                              str]:
    """A request's `capacity.requests` keyed by the device's capacity names; (None, why) when the device lacks one of
    them or the request is malformed."""
    out: dict[str, Fraction] = {}
    if not requests:
        return out, ""
    if not isinstance(requests, Mapping):
        return None, "capacity.requests is not a mapping"
    for name, raw in requests.items():
        if not isinstance(name, str) or not name:
            return None, "capacity request without a name"
        key = qualify(name, driver)
        if key not in capacities:
            return None, f"no capacity {short_name(key, driver)}"
        if key in out:
            return None, f"capacity {short_name(key, driver)} requested twice (with and without its domain)"
        try:
            amount = _quantity(raw)
        except ValueError:
            return None, f"capacity {short_name(key, driver)}: {str(raw)[:40]!r} is not a quantity"
        if amount < 0:
            return None, f"capacity {short_name(key, driver)}: negative request {str(raw)[:40]}"
        out[key] = amount
    return out, ""


def _round(requested: Fraction, policy: Policy) -> Fraction:
    if policy.has_range and policy.minimum is not None:
        if requested < policy.minimum:
            return policy.minimum
        if not policy.step:
            return requested
        steps = math.ceil((requested - policy.minimum) / policy.step)
        return policy.minimum + policy.step * steps
    if policy.valid_values:
        for value in policy.valid_values:
            if requested <= value:
                return value
    return requested


def _violates(amount: Fraction, policy: Policy) -> bool:
    if policy.default is not None and amount == policy.default:
        return False
    if policy.has_range:
        if policy.maximum is not None and amount > policy.maximum:
            return True
        if policy.step:
            return (amount - (policy.minimum or Fraction(0))) % policy.step != 0
        return False
    if policy.valid_values:
        return amount not in policy.valid_values
    return False


def consumption(driver: str, requests: Any, capacities: Mapping[str, Capacity]) -> Consumption:
    """What a request (its `capacity.requests`, possibly empty) would consume of a device with these capacities."""
    resolved, why = resolve_requests(driver, requests, capacities)
    if resolved is None:
        return Consumption(reason=why)
    amounts: dict[str, Fraction] = {}
    for name, capacity in sorted(capacities.items()):
        policy = capacity.policy
        requested = resolved.get(name)
        if requested is None:
            amount = policy.default if policy is not None and policy.default is not None else capacity.value
        elif policy is None:
            amount = requested
        else:
            amount = _round(requested, policy)
        if policy is not None and _violates(amount, policy):
            shown = capacity.format(requested if requested is not None else amount)
            return Consumption(reason=f"capacity {short_name(name, driver)}: requested {shown} is not allowed by "
                                      f"the request policy ({policy.describe(capacity.binary)})")
        amounts[name] = amount
    return Consumption(amounts)


def shortfall(driver: str, amounts: Mapping[str, Fraction], consumed: Mapping[str, Fraction],
              capacities: Mapping[str, Capacity]) -> str:
    """"" when `amounts` fit into what `consumed` leaves of the capacities, else the first capacity that is short:
    `capacity memory: requested 20Gi, 12Gi left of 80Gi`."""
    for name, amount in sorted(amounts.items()):
        capacity = capacities.get(name)
        if capacity is None:
            continue
        used = consumed.get(name, Fraction(0))
        if used + amount > capacity.value:
            left = max(capacity.value - used, Fraction(0))
            return (f"capacity {short_name(name, driver)}: requested {capacity.format(amount)}, "
                    f"{capacity.format(left)} left of {capacity.format(capacity.value)}")
    return ""


def add(total: dict[str, Fraction], amounts: Mapping[str, Fraction], sign: int = 1) -> None:
    for name, amount in amounts.items():
        total[name] = total.get(name, Fraction(0)) + sign * amount


def consumed_amounts(driver: str, raw: Any) -> dict[str, Fraction]:
    """An allocation result's `consumedCapacity` keyed by qualified name (malformed entries are left out)."""
    out: dict[str, Fraction] = {}
    if not isinstance(raw, Mapping):
        return out
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            continue
        try:
            amount = _quantity(value)
        except ValueError:
            continue
        out[qualify(name, driver)] = out.get(qualify(name, driver), Fraction(0)) + amount
    return out


def dominant_share(amounts: Mapping[str, Fraction], capacities: Mapping[str, Capacity]) -> float:
    """The largest fraction of any capacity that `amounts` take (0..1): what a share of the device is billed as."""
    shares = [float(min(amount / capacities[name].value, Fraction(1)))
              for name, amount in amounts.items() if name in capacities and capacities[name].value > 0]
    return max(shares, default=0.0)


def room_left(consumed: Mapping[str, Fraction], capacities: Mapping[str, Capacity]) -> bool:
    """Whether one more allocation could still fit: every capacity has at least the smallest amount a request can
    consume of it left (the policy's smallest valid value or range minimum, else anything above zero)."""
    for name, capacity in capacities.items():
        left = capacity.value - consumed.get(name, Fraction(0))
        policy = capacity.policy
        smallest = Fraction(0)
        if policy is not None:
            if policy.has_range and policy.minimum is not None:
                smallest = policy.minimum
            elif policy.valid_values:
                smallest = policy.valid_values[0]
        if left <= 0 or left < smallest:
            return False
    return True


def summary(driver: str, consumed: Mapping[str, Fraction], capacities: Mapping[str, Capacity]) -> dict[str, Any]:
    """Per capacity (short names): total, consumed, left and the request policy, as strings for people and APIs."""
    out: dict[str, Any] = {}
    for name, capacity in sorted(capacities.items()):
        used = consumed.get(name, Fraction(0))
        entry = {"value": capacity.format(capacity.value), "consumed": capacity.format(used),
                 "left": capacity.format(max(capacity.value - used, Fraction(0)))}
        if capacity.policy is not None:
            entry["request_policy"] = capacity.policy.describe(capacity.binary)
        out[short_name(name, driver)] = entry
    return out


def total(amounts: Iterable[Mapping[str, Fraction]]) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    for one in amounts:
        add(out, one)
    return out
