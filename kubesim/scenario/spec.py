"""Reading and validating the scenario document: the YAML source, the API profile, typed field checks, selectors as CEL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kubesim.apis import PROFILES

from .common import BUILTIN_SCENARIOS, DNS_LABEL, DNS_SUBDOMAIN, DRIVER, SCENARIO_DIR, ScenarioError


def _check_keys(d: Any, allowed: set[str], ctx: str, required: tuple[str, ...] = ()) -> dict:
    if not isinstance(d, dict):
        raise ScenarioError(f"{ctx}: expected a mapping, got {type(d).__name__}")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise ScenarioError(
            f"{ctx}: unknown key(s) {', '.join(map(str, unknown))}; allowed: {', '.join(sorted(allowed))}"
        )
    for key in required:
        if key not in d:
            raise ScenarioError(f"{ctx}: missing required key {key!r}")
    return d


def _list(d: dict, key: str, ctx: str) -> list:
    value = d.get(key) or []
    if not isinstance(value, list):
        raise ScenarioError(f"{ctx}.{key}: expected a list")
    return value


def _int(value: Any, ctx: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{ctx}: expected an integer, got {value!r}")
    if value < minimum:
        raise ScenarioError(f"{ctx}: must be >= {minimum}, got {value}")
    return value


def _label(name: Any, ctx: str) -> str:
    if not isinstance(name, str) or not DNS_LABEL.match(name):
        raise ScenarioError(f"{ctx}: {name!r} is not a valid DNS label (lowercase alphanumerics and '-', max 63)")
    return name


def _subdomain(name: Any, ctx: str) -> str:
    if not isinstance(name, str) or not DNS_SUBDOMAIN.match(name):
        raise ScenarioError(f"{ctx}: {name!r} is not a valid DNS subdomain")
    return name


def _version_parts(v: str, n: int, ctx: str) -> list[int]:
    try:
        parts = [int(p) for p in str(v).split(".")]
    except ValueError as exc:
        raise ScenarioError(f"{ctx}: {v!r} is not a dotted version") from exc
    return (parts + [0] * n)[:n]


def _semver(v: str, ctx: str) -> str:
    return ".".join(str(p) for p in _version_parts(v, 3, ctx))


def _cel_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _match_to_cel(match: dict, ctx: str, with_driver: bool) -> str:
    _check_keys(match, {"driver", "attributes"}, ctx)
    driver = match.get("driver", DRIVER)
    terms = [f"device.driver == {_cel_literal(driver)}"] if with_driver else []
    attrs = match.get("attributes") or {}
    if not isinstance(attrs, dict):
        raise ScenarioError(f"{ctx}.attributes: expected a mapping")
    domain = driver
    for key, value in attrs.items():
        if "/" in key:
            dom, _, ident = key.rpartition("/")
            terms.append(f"device.attributes[{_cel_literal(dom)}].{ident} == {_cel_literal(value)}")
        else:
            terms.append(f"device.attributes[{_cel_literal(domain)}].{key} == {_cel_literal(value)}")
    return " && ".join(terms) if terms else "true"


def _read(source: str | Path) -> dict:
    text_name = str(source)
    if text_name == "empty":
        return {"name": "empty"}
    path = SCENARIO_DIR / f"{text_name}.yaml" if text_name in BUILTIN_SCENARIOS else Path(text_name)
    if not path.is_file():
        raise ScenarioError(f"unknown scenario {text_name!r}: not one of {', '.join(BUILTIN_SCENARIOS)} and not a file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: invalid YAML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario must be a YAML mapping, got {type(data).__name__}")
    return data


def scenario_api_profile(source: str | Path | dict) -> str | None:
    """The scenario's `apiServer` (an API profile of kubesim.apis), or None for the default."""
    spec = source if isinstance(source, dict) else _read(source)
    value = spec.get("apiServer") if isinstance(spec, dict) else None
    if value is None:
        return None
    if value not in PROFILES:
        raise ScenarioError(f"apiServer: {value!r} is not one of {', '.join(PROFILES)}")
    return str(value)
