"""A compiled selector, evaluated against one device or matched against many with a memo."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel

from catalog.cel.devices import ABSENT, EMPTY, DeviceInput, value_token
from catalog.cel.environment import DRIVER_VAR, MULTI_VAR
from catalog.cel.errors import CelRuntimeError, runtime_message


@dataclass(frozen=True, slots=True)
class Feed:
    """One activation variable of a compiled selector and how to take it (and its memo token) from a device."""

    variable: str
    root: str | None = None  # "attributes"/"capacity" for device maps
    domain: str | None = None  # one domain's map (a rewritten `device.attributes["d"]`)
    names: tuple[str, ...] | None = None  # only these names are read (statically); None: the whole map

    def value(self, device: DeviceInput) -> Any:
        if self.variable == DRIVER_VAR:
            return device.driver
        if self.variable == MULTI_VAR:
            return device.allow_multiple_allocations
        source = device.attributes if self.root == "attributes" else device.capacity
        if self.domain is None:
            return source
        values = source.get(self.domain, EMPTY)
        if self.names is None:
            return values
        return {name: values[name] for name in self.names if name in values}

    def token(self, device: DeviceInput) -> Hashable:
        if self.variable == DRIVER_VAR:
            return device.driver
        if self.variable == MULTI_VAR:
            return device.allow_multiple_allocations
        if self.root is None or self.names is None:
            return device.map_token(self.root or "", self.domain)
        source = device.attributes if self.root == "attributes" else device.capacity
        values = source.get(self.domain, EMPTY) if self.domain is not None else EMPTY
        return tuple([value_token(values.get(name, ABSENT)) for name in self.names])


class Selector:
    """A compiled, type-checked selector. Immutable and safe to share between threads."""

    __slots__ = ("_feeds", "_program", "domains", "estimated_cost", "expression")

    def __init__(
        self, expression: str, program: cel.Expression, feeds: tuple[Feed, ...], cost: int, domains: frozenset[str]
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
            return runtime_message(str(exc))
        value = result.value()
        if type(value) is bool:
            return value
        if result.type() == cel.Type.ERROR:
            return runtime_message(value)
        kind = result.type()
        return f"the selector evaluated to {kind.name() if kind.is_message() else kind.name().lower()}, not bool"


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
