"""The CEL view of a device as published in a ResourceSlice, prepared once and reused by every selector."""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from catalog.cel.values import INT64_MAX, INT64_MIN, parse_semver, quantity_from_string


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
                token = tuple(sorted((name, value_token(value)) for name, value in source.get(domain, EMPTY).items()))
            self._tokens[key] = token
        return token


EMPTY: Mapping[str, Any] = {}
ABSENT = object()


def value_token(value: Any) -> Hashable:
    """Equal tokens mean equal CEL values (the type is part of it: 1, 1.0 and true must not share a memo entry)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool:
        return kind, value
    if kind is list:
        return kind, tuple(value_token(item) for item in value)
    if value is ABSENT:
        return None
    return value.DESCRIPTOR.name, value.qkey if value.DESCRIPTOR.name == "Quantity" else value.vkey


_LIST_KINDS = {"ints": "int", "bools": "bool", "strings": "string", "versions": "version"}
_KINDS = frozenset({"int", "bool", "string", "version", *_LIST_KINDS})


@functools.lru_cache(maxsize=8192)
def _version_value(text: str) -> Any:
    return parse_semver(text)  # shared message instances: CEL never mutates its inputs


@functools.lru_cache(maxsize=8192)
def _capacity_value(text: str) -> Any:
    return quantity_from_string(text)


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
