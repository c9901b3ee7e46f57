"""The API representation of a Device, computed once when the row is derived and stored beside it.

The devices list is the inventory's hottest read (tens of thousands of rows, polled by CMDBs): serving it from a
stored JSON document — one for platform roles, one with hardware identifiers redacted — makes a page a single
indexed read plus string joins. Derivation writes the documents in the same statement as the row, so they are never
staler than the row; `id` and `cluster` are spliced in at read time.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from inventory.redaction import REDACTED, is_sensitive_name, redact_json

# Order and names are the API contract (DeviceSerializer lists the same fields for the schema).
DEVICE_DOCUMENT_FIELDS: tuple[str, ...] = (
    "key", "path", "mode", "unit", "node_name", "node_pool", "node_schedulable", "resource_name", "driver", "pool",
    "device_name", "pool_generation", "pool_complete", "model", "memory_mib", "architecture", "compute_capability",
    "driver_version", "cuda_version", "mig_profile", "units_per_card", "parent", "cards", "capacity", "allocatable",
    "in_use", "free", "unhealthy", "health", "attributes", "capacities", "consumes_counters",
    "allow_multiple_allocations", "taints", "blocked_by",
    "claim_uid", "claim_namespace", "claim_name", "request_name", "admin_access", "share_id", "reserved_for",
    "sharing", "sharing_detail", "holders", "consumed_capacity", "consumed_share",
    "updated_at",
)
_REDACTED_FIELDS = {"attributes", "capacities", "consumes_counters"}


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    text: str = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text  # as DRF renders datetimes


def device_content_hash(device: Any) -> str:
    """Digest of everything the API shows except `updated_at`: derivation rewrites a row only when it changes."""
    return hashlib.blake2b(orjson.dumps(_content(device)), digest_size=16).hexdigest()


def device_selector_hash(device: Any) -> str:
    """Digest of everything a DeviceClass CEL selector can read of a device: driver, attributes, capacity and
    allowMultipleAllocations. Keys are sorted, so a row read back from jsonb hashes as it did when derived. The
    catalog's capacity recomputation remembers selector outcomes by it (catalog/services/matching.py)."""
    content = [device.driver, device.allow_multiple_allocations is True, device.attributes, device.capacities]
    return hashlib.blake2b(orjson.dumps(content, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


def device_documents(device: Any) -> tuple[str, str]:
    """(full, redacted) JSON documents of a Device instance, without `id` and `cluster`."""
    full = {**_content(device), "updated_at": _iso(device.updated_at)}
    redacted = dict(full)
    for name in _REDACTED_FIELDS:
        redacted[name] = redact_json(full[name])
    if full["parent"] and is_sensitive_name("parent"):
        redacted["parent"] = REDACTED
    return orjson.dumps(full).decode(), orjson.dumps(redacted).decode()


def _content(device: Any) -> dict[str, Any]:
    full: dict[str, Any] = {}
    for name in DEVICE_DOCUMENT_FIELDS:
        if name == "updated_at":
            continue
        value = getattr(device, name)
        if (name in ("attributes", "capacities") and not isinstance(value, dict)) or (name == "consumed_capacity" and not isinstance(value, dict)):
            value = {}
        elif name == "consumes_counters" and not isinstance(value, list):
            value = []
        full[name] = value
    return full


def splice_documents(rows: Any) -> list[str]:
    """`{"id":…,"cluster":{…},` + each stored document's fields, for (pk, cluster_id, cluster_name, document) rows."""
    clusters: dict[int, str] = {}
    out = []
    for pk, cluster_id, cluster_name, document in rows:
        cluster = clusters.get(cluster_id)
        if cluster is None:
            cluster = clusters[cluster_id] = orjson.dumps({"id": cluster_id, "name": cluster_name}).decode()
        out.append(f'{{"id":{int(pk)},"cluster":{cluster},{document[1:]}' if document != "{}" else
                   f'{{"id":{int(pk)},"cluster":{cluster}}}')
    return out
