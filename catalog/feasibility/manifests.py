"""Reading manifests: JSON or YAML text with one object, a list, a `kind: List` or several YAML documents.

`split_pod_manifest` picks the pod to explain out of a multi-document manifest, together with the ResourceClaims
and ResourceClaimTemplates submitted beside it. A workload (Job, CronJob, Deployment, StatefulSet, ReplicaSet)
stands for the pods it creates: its pod template becomes the pod.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from inventory.k8s.semantics.values import as_dict
from inventory.untrusted_text import MAX_BYTES as TEXT_MAX_BYTES
from inventory.untrusted_text import MAX_DOCUMENTS as TEXT_MAX_DOCUMENTS
from inventory.untrusted_text import UntrustedTextError, load_documents

__all__ = ["ManifestError", "group_by_kind", "load_objects", "split_pod_manifest"]

# An operator's own file (explain_pod, validate_manifest --snapshot: a cluster's objects) may be large; text from a
# request keeps the reader's limits (1 MiB, 50 documents). Aliases, depth and duplicate keys are refused either way.
MAX_BYTES = 256 * 1024 * 1024
FILE_MAX_DOCUMENTS = 1_000_000
_WORKLOADS = {"Job", "Deployment", "StatefulSet", "ReplicaSet", "CronJob"}


class ManifestError(ValueError):
    """The input is not a usable manifest; the message says why."""


def _flatten(value: Any, where: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if isinstance(value, list):
        out = []
        for index, item in enumerate(value):
            out.extend(_flatten(item, f"{where}[{index}]"))
        return out
    if not isinstance(value, dict):
        raise ManifestError(f"{where}: expected an object, got {type(value).__name__}")
    if isinstance(value.get("items"), list) and (value.get("kind") in (None, "List") or value["kind"].endswith("List")):
        return _flatten(value["items"], f"{where}.items")
    return [value]


def load_objects(source: str | Path, *, name: str = "") -> list[dict[str, Any]]:
    """Objects from a file path (Path) or from text (str), read by the hardened reader (inventory.untrusted_text).
    Raises ManifestError with a clear message."""
    label = name or (str(source) if isinstance(source, Path) else "input")
    if isinstance(source, Path):
        try:
            if source.stat().st_size > MAX_BYTES:
                raise ManifestError(f"{label}: larger than {MAX_BYTES // 2**20} MiB")
            text = source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{label}: cannot read: {exc}") from None
        limits = {"max_bytes": MAX_BYTES, "max_documents": FILE_MAX_DOCUMENTS}
    else:
        text = source
        limits = {"max_bytes": TEXT_MAX_BYTES, "max_documents": TEXT_MAX_DOCUMENTS}
    if not isinstance(text, str) or not text.strip():
        raise ManifestError(f"{label}: empty")
    try:
        documents = load_documents(text, **limits)
    except UntrustedTextError as exc:
        if exc.code in ("yaml-syntax", "json-syntax") and not text.lstrip().startswith("["):
            raise ManifestError(f"{label}: neither JSON nor YAML: {exc}") from None
        raise ManifestError(f"{label}: {exc}") from None
    objects = _flatten(documents, label)
    if not objects:
        raise ManifestError(f"{label}: no objects")
    return objects


def group_by_kind(objects: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in objects:
        grouped[str(obj.get("kind", ""))].append(obj)
    return grouped


def _pod_from_workload(obj: dict[str, Any]) -> dict[str, Any]:
    spec = as_dict(obj.get("spec"))
    if obj.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    template = spec.get("template") if isinstance(spec, dict) else None
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise ManifestError(f"{obj.get('kind')} without spec.template.spec")
    meta = as_dict(obj.get("metadata"))
    pod_meta = dict(template.get("metadata") or {})
    pod_meta.setdefault("name", meta.get("name", "pod"))
    if meta.get("namespace"):
        pod_meta["namespace"] = meta["namespace"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template["spec"]}


def split_pod_manifest(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(pod, claims, claim templates, notes) from a manifest; exactly one Pod or workload is required."""
    pods = [o for o in objects if o.get("kind") == "Pod"]
    workloads = [o for o in objects if o.get("kind") in _WORKLOADS]
    notes: list[str] = []
    if len(pods) + len(workloads) != 1:
        found = len(pods) + len(workloads)
        raise ManifestError(f"expected exactly one Pod (or Job/Deployment/StatefulSet/ReplicaSet/CronJob), found {found}")
    pod = pods[0] if pods else _pod_from_workload(workloads[0])
    if workloads:
        notes.append(f"explaining the pod template of {workloads[0]['kind']} "
                     f"{(workloads[0].get('metadata') or {}).get('name', '')}")
    if not isinstance(pod.get("spec"), dict):
        raise ManifestError("the Pod has no spec")
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    claims: list[dict[str, Any]] = []
    templates: list[dict[str, Any]] = []
    for obj in objects:
        if obj.get("kind") not in ("ResourceClaim", "ResourceClaimTemplate"):
            continue
        obj = dict(obj)
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("namespace", namespace)
        obj["metadata"] = meta
        (claims if obj["kind"] == "ResourceClaim" else templates).append(obj)
    ignored = sorted({str(o.get("kind")) for o in objects if o.get("kind") not in
                      {"Pod", "ResourceClaim", "ResourceClaimTemplate", *_WORKLOADS}})
    if ignored:
        notes.append(f"ignored objects of kind {', '.join(ignored)}")
    return pod, claims, templates, notes
