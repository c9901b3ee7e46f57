"""Per-kind rules the API server applies on writes: Namespaces, ConfigMaps, ValidatingAdmissionPolicies, pods'
ephemeral containers and admin access to devices in ResourceClaims."""

from __future__ import annotations

import re
from typing import Any

from .errors import ApiError
from .resources import ResourceType

ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
IMMUTABLE_MESSAGE = "field is immutable when `immutable` is set"


def label_namespace(meta: dict[str, Any]) -> None:
    """The API server always labels a Namespace with its own name."""
    labels = meta.get("labels")
    meta["labels"] = {**(labels if isinstance(labels, dict) else {}), NAMESPACE_NAME_LABEL: meta["name"]}


def policy_status(status: object, generation: int) -> dict[str, Any]:
    """What the API server's type-checking controller reports for a ValidatingAdmissionPolicy (no warnings here)."""
    current = status if isinstance(status, dict) else {}
    return {"typeChecking": {}, **current, "observedGeneration": generation}


def _invalid(kind: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """A 422 Invalid status like field.ErrorList.ToAggregate(): causes are (reason, field, message)."""
    texts = [f"{f}: {m}" for _, f, m in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {summary}',
        {"name": name, "kind": kind, "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes]},
    )


def validate_configmap(obj: dict[str, Any]) -> None:
    """Top-level `data` (strings) and `binaryData` (base64 strings) with valid keys, `immutable` a bool."""
    name = obj["metadata"]["name"]
    for section in ("data", "binaryData"):
        values = obj.get(section)
        if values is None:
            continue
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise ApiError(
                400,
                "BadRequest",
                f'ConfigMap in version "v1" cannot be handled as a ConfigMap: {section} must be a map of strings',
            )
        bad = [k for k in values if not CONFIG_KEY.match(k) or len(k) > 253]
        if bad:
            message = (
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  "
                "or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
            )
            raise _invalid(
                "ConfigMap",
                name,
                [("FieldValueInvalid", f"{section}[{k}]", f'Invalid value: "{k}": {message}') for k in bad],
            )
    if "immutable" in obj and not isinstance(obj["immutable"], bool | None):
        raise ApiError(400, "BadRequest", 'ConfigMap in version "v1" cannot be handled as a ConfigMap: immutable')


def check_configmap_update(new: dict[str, Any], old: dict[str, Any]) -> None:
    """An immutable ConfigMap keeps its data, binaryData and immutable flag."""
    if old.get("immutable") is not True:
        return
    changed = [
        ("FieldValueForbidden", f, f"Forbidden: {IMMUTABLE_MESSAGE}")
        for f, same in (
            ("immutable", new.get("immutable") is True),
            ("data", new.get("data") == old.get("data")),
            ("binaryData", new.get("binaryData") == old.get("binaryData")),
        )
        if not same
    ]
    if changed:
        raise _invalid("ConfigMap", new["metadata"]["name"], changed)


def with_ephemeral_containers(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """pods/ephemeralcontainers: only spec.ephemeralContainers changes, and existing ones may only be kept
    (podEphemeralContainersStrategy and ValidatePodEphemeralContainersUpdate)."""
    name = old["metadata"]["name"]
    wanted = (new.get("spec") or {}).get("ephemeralContainers") or []
    current = {c.get("name"): c for c in (old.get("spec") or {}).get("ephemeralContainers") or []}
    if not isinstance(wanted, list) or not all(isinstance(c, dict) for c in wanted):
        raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.ephemeralContainers: Invalid value')
    names = {c.get("name") for c in wanted}
    for existing, container in current.items():
        if existing not in names or next(c for c in wanted if c.get("name") == existing) != container:
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.ephemeralContainers: Forbidden: existing '
                           f'ephemeral containers "{existing}" may not be removed or changed')
    taken = {c.get("name") for field in ("containers", "initContainers") for c in (old["spec"].get(field) or [])}
    for container in wanted:
        if container.get("name") in current:
            continue
        if not container.get("name") or not container.get("image"):
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.ephemeralContainers: Required value: '
                           "name and image are required")
        if container["name"] in taken or [c.get("name") for c in wanted].count(container["name"]) > 1:
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.ephemeralContainers[].name: Duplicate '
                           f'value: "{container["name"]}"')
    updated = dict(old)
    updated["spec"] = {**old["spec"], "ephemeralContainers": wanted}
    updated["metadata"] = dict(old["metadata"])
    if "managedFields" in new.get("metadata", {}):
        updated["metadata"]["managedFields"] = new["metadata"]["managedFields"]
    return updated


def check_admin_access(rt: ResourceType, obj: dict[str, Any], namespace: dict[str, Any]) -> None:
    """The API server's rule: adminAccess requests need the namespace label admin-access: "true" (`namespace` is the
    containing Namespace object)."""
    spec: Any = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if rt.plural == "resourceclaimtemplates":
        spec = spec.get("spec") if isinstance(spec.get("spec"), dict) else {}
    devices: Any = spec.get("devices") if isinstance(spec.get("devices"), dict) else {}
    requests: Any = devices.get("requests") if isinstance(devices.get("requests"), list) else []
    prefix = "spec.spec" if rt.plural == "resourceclaimtemplates" else "spec"
    for i, request in enumerate(requests):
        exactly = request.get("exactly") if isinstance(request, dict) else None
        if not (isinstance(exactly, dict) and exactly.get("adminAccess") is True):
            continue
        if ((namespace.get("metadata") or {}).get("labels") or {}).get(ADMIN_ACCESS_LABEL) == "true":
            return
        field = f"{prefix}.devices.requests[{i}].exactly.adminAccess"
        message = (f"admin access to devices requires the `{ADMIN_ACCESS_LABEL}: true` label on the containing "
                   "namespace")
        name = (obj.get("metadata") or {}).get("name", "")
        raise ApiError(422, "Invalid", f'{rt.kind}.resource.k8s.io "{name}" is invalid: {field}: Forbidden: '
                       f"{message}", {"name": name, "group": "resource.k8s.io", "kind": rt.kind, "causes": [
                           {"reason": "FieldValueForbidden", "message": f"Forbidden: {message}",
                            "field": field}]})
