"""Turn a raw Kubernetes object into the columns of its mirror row, flagging (never raising on) bad data.

A cluster may send anything: missing status, odd quantities (`1e3`, `100m` for a GPU), unknown fields, huge labels,
NUL characters PostgreSQL's JSONB refuses. Each problem becomes an entry in the row's `issues`; the object is stored.
Only an object with no usable identity (uid) cannot be stored and raises `UnstorableObjectError`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

from inventory.k8s.podsecurity import pod_violates_baseline
from inventory.k8s.semantics import as_dict as _dict
from inventory.k8s.semantics import as_list as _list
from inventory.k8s.semantics import format_quantity, parse_quantity
from inventory.k8s.semantics.kueue import (
    cluster_queue_quotas,
    flavor_usage,
    topology_levels,
    workload_requests,
    workload_state,
)
from inventory.podstatus import (
    is_accelerator_pod,
    pod_claim_names,
    pod_extended_requests,
    pod_request_problems,
    pod_stage,
)
from inventory.scheduling import SchedulingFailure, parse_scheduling_message

MAX_NAME = 253
MAX_LABEL_VALUE = 63
MAX_LABEL_KEY = 317  # 253 prefix + "/" + 63 name
BUILTIN_RESOURCES = {"cpu", "memory", "pods", "ephemeral-storage", "storage"}
KNOWN_TOP_LEVEL = {"apiVersion", "kind", "metadata", "spec", "status"}
EVENT_TOP_LEVEL = KNOWN_TOP_LEVEL | {
    "involvedObject", "reason", "message", "source", "firstTimestamp", "lastTimestamp", "count", "type",
    "eventTime", "series", "action", "related", "reportingComponent", "reportingInstance",
}


class UnstorableObjectError(ValueError):
    """The object has no uid (or is not an object at all): it cannot be keyed, so it is reported, not stored."""


def _strip_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_strip_nul(k): _strip_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strip_nul(v) for v in value]
    return value






def _str(value: Any, limit: int = MAX_NAME) -> str:
    return value[:limit] if isinstance(value, str) else ("" if value is None else str(value)[:limit])


def parse_time(value: Any, issues: list[str], field: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        issues.append(f"{field}: not a timestamp: {_str(value, 40)!r}")
        return None
    if parsed.tzinfo is None:
        issues.append(f"{field}: timestamp without a time zone")
        return None
    return parsed


def check_quantities(resources: Any, issues: list[str], field: str) -> dict[str, str]:
    """Keep the reported strings; flag unparsable values, fractional or exotic extended resources."""
    out: dict[str, str] = {}
    for name, raw in _dict(resources).items():
        text = _str(raw, 64)
        out[_str(name)] = text
        try:
            value = parse_quantity(raw)
        except ValueError:
            issues.append(f"{field}.{name}: unparsable quantity {text!r}")
            continue
        extended = name not in BUILTIN_RESOURCES and not str(name).startswith("hugepages-")
        if extended and value.denominator != 1:
            issues.append(f"{field}.{name}: extended resources are integers, got {text!r} (= {format_quantity(value)})")
        elif extended and ("e" in text.lower() or text.endswith("m")):
            issues.append(f"{field}.{name}: unusual quantity notation {text!r} (= {format_quantity(value)})")
        if value < 0:
            issues.append(f"{field}.{name}: negative quantity {text!r}")
    return out


def _labels(metadata: dict[str, Any], issues: list[str]) -> dict[str, str]:
    labels = metadata.get("labels")
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        issues.append("metadata.labels: not a map")
        return {}
    out: dict[str, str] = {}
    for key, value in labels.items():
        key_s, value_s = _str(key, 10_000), _str(value, 10_000)
        if len(key_s) > MAX_LABEL_KEY:
            issues.append(f"metadata.labels: key longer than {MAX_LABEL_KEY} characters ({len(key_s)})")
        if len(value_s) > MAX_LABEL_VALUE:
            issues.append(f"metadata.labels[{key_s[:60]}]: value longer than {MAX_LABEL_VALUE} characters ({len(value_s)})")
        out[key_s] = value_s
    return out


def _node(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    conditions = [c for c in _list(status.get("conditions")) if isinstance(c, dict)]
    ready = next((c.get("status") == "True" for c in conditions if c.get("type") == "Ready"), None)
    return {
        "ready": ready,
        "unschedulable": bool(spec.get("unschedulable", False)),
        "capacity": check_quantities(status.get("capacity"), issues, "status.capacity"),
        "allocatable": check_quantities(status.get("allocatable"), issues, "status.allocatable"),
        "taints": [t for t in _list(spec.get("taints")) if isinstance(t, dict)],
        "conditions": conditions,
        "kubelet_version": _str(_dict(status.get("nodeInfo")).get("kubeletVersion"), 64),
    }


def _pod(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    for index, container in enumerate(_list(spec.get("containers")) + _list(spec.get("initContainers"))):
        resources = _dict(_dict(container).get("resources"))
        check_quantities(resources.get("limits"), issues, f"spec.containers[{index}].resources.limits")
        check_quantities(resources.get("requests"), issues, f"spec.containers[{index}].resources.requests")
    scheduled = next(
        (c for c in _list(status.get("conditions")) if isinstance(c, dict) and c.get("type") == "PodScheduled"), None
    )
    message = _str((scheduled or {}).get("message"), 64_000)
    issues.extend(pod_request_problems(obj))
    stage = pod_stage(obj)
    unscheduled = scheduled is not None and scheduled.get("status") == "False"
    return {
        "node_name": _str(spec.get("nodeName")),
        "phase": _str(status.get("phase"), 20),
        "scheduled": None if scheduled is None else scheduled.get("status") == "True",
        "scheduling_message": message[:4000],
        "accelerator": is_accelerator_pod(obj),
        "extended_requests": pod_extended_requests(obj),
        "claim_names": [_str(n) for n in pod_claim_names(obj)],
        "stage": str(stage.stage),
        "stage_layer": _str(stage.layer, 64),
        "stage_detail": _str(stage.detail, 2000),
        "restarts": min(stage.restarts, 2**31 - 1),
        "scheduling_reasons": scheduling_json(parse_scheduling_message(message)) if unscheduled and message else {},
        "baseline_violating": pod_violates_baseline(obj),
    }


def scheduling_json(failure: SchedulingFailure) -> dict[str, Any]:
    """A parsed scheduler message as JSON for the Pod row (the raw text stays beside it)."""
    def reasons(items: tuple[Any, ...]) -> list[dict[str, Any]]:
        return [{"count": r.count, "reason": r.reason, "category": r.category, "resource": r.resource,
                 "taint": r.taint} for r in items]

    return {
        "parsed": failure.parsed, "total_nodes": failure.total_nodes, "reasons": reasons(failure.reasons),
        "prefilter_message": failure.prefilter_message, "preemption_total": failure.preemption_total,
        "preemption_reasons": reasons(failure.preemption_reasons), "postfilter": failure.postfilter_message,
    }


def _namespace(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    return {"phase": _str(_dict(obj.get("status")).get("phase"), 20)}


def _quota(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    status = _dict(obj.get("status"))
    return {
        "hard": check_quantities(_dict(obj.get("spec")).get("hard"), issues, "spec.hard"),
        "used": check_quantities(status.get("used"), issues, "status.used"),
    }


def _event(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    involved = _dict(obj.get("involvedObject"))
    count = obj.get("count")
    last = obj.get("lastTimestamp") or obj.get("eventTime")
    return {
        "type": _str(obj.get("type"), 20),
        "reason": _str(obj.get("reason"), 128),
        "message": _str(obj.get("message"), 8000),
        "involved_kind": _str(involved.get("kind"), 64),
        "involved_name": _str(involved.get("name")),
        "involved_uid": _str(involved.get("uid"), 128),
        "count": count if isinstance(count, int) and not isinstance(count, bool) and abs(count) < 2**31 else None,
        "last_timestamp": parse_time(last, issues, "lastTimestamp"),
    }


def _int_or_none(value: Any, issues: list[str], field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**62:
        return value
    issues.append(f"{field}: not an integer: {_str(value, 40)!r}")
    return None


def _slice(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    spec = _dict(obj.get("spec"))
    pool = _dict(spec.get("pool"))
    if not spec.get("driver"):
        issues.append("spec.driver: missing")
    if not pool:
        issues.append("spec.pool: missing")
    return {
        "driver": _str(spec.get("driver")),
        "pool_name": _str(pool.get("name")),
        "pool_generation": _int_or_none(pool.get("generation"), issues, "spec.pool.generation"),
        "pool_slice_count": _int_or_none(pool.get("resourceSliceCount"), issues, "spec.pool.resourceSliceCount"),
        "node_name": _str(spec.get("nodeName")),
        "device_count": len(_list(spec.get("devices"))),
    }


def _device_class(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    return {"extended_resource_name": _str(_dict(obj.get("spec")).get("extendedResourceName"))}


def _claim(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    status = _dict(obj.get("status"))
    return {
        "allocated": bool(_dict(status.get("allocation"))),
        "reserved_for_count": len(_list(status.get("reservedFor"))),
    }


def _nothing(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    return {}


# ----------------------------------------------------------------------------------------------- Kueue (v1beta2 shape)
def _count(value: Any, issues: list[str], field: str) -> int | None:
    number = _int_or_none(value, issues, field)
    return number if number is None or number >= 0 else None


def _topology(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    return {"levels": topology_levels(obj.get("spec"), issues)}


def _resource_flavor(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    spec = _dict(obj.get("spec"))
    labels = spec.get("nodeLabels")
    if labels is not None and not isinstance(labels, dict):
        issues.append("spec.nodeLabels: not a map")
    topology = spec.get("topologyName")
    if topology is not None and not isinstance(topology, str):
        issues.append("spec.topologyName: not a string")
    return {"node_labels": {_str(k): _str(v, MAX_LABEL_VALUE) for k, v in _dict(labels).items()},
            "node_taints": [t for t in _list(spec.get("nodeTaints")) if isinstance(t, dict)],
            "topology_name": _str(topology, 253)}


def _cohort(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    return {"parent": _str(_dict(obj.get("spec")).get("parentName"))}


def _cluster_queue(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    return {
        "cohort": _str(spec.get("cohortName")),
        "quotas": [quota.to_json() for quota in cluster_queue_quotas(spec, issues)],
        "usage": flavor_usage(status, issues),
        "pending_workloads": _count(status.get("pendingWorkloads"), issues, "status.pendingWorkloads"),
        "admitted_workloads": _count(status.get("admittedWorkloads"), issues, "status.admittedWorkloads"),
    }


def _local_queue(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    if not spec.get("clusterQueue"):
        issues.append("spec.clusterQueue: missing")
    return {
        "cluster_queue": _str(spec.get("clusterQueue")),
        "pending_workloads": _count(status.get("pendingWorkloads"), issues, "status.pendingWorkloads"),
        "admitted_workloads": _count(status.get("admittedWorkloads"), issues, "status.admittedWorkloads"),
    }


def _workload(obj: dict[str, Any], issues: list[str]) -> dict[str, Any]:
    spec, status = _dict(obj.get("spec")), _dict(obj.get("status"))
    state = workload_state(status)
    pods, requests = workload_requests(spec, issues)
    return {
        "queue_name": _str(spec.get("queueName")),
        "cluster_queue": _str(_dict(status.get("admission")).get("clusterQueue")),
        "state": state.state,
        "state_reason": _str(state.reason, 128),
        "state_message": _str(state.message, 5000),
        "pod_count": min(pods, 2**31 - 1),
        "requests": {name: format_quantity(amount) for name, amount in sorted(requests.items())},
    }


EXTRACTORS: dict[str, Callable[[dict[str, Any], list[str]], dict[str, Any]]] = {
    "namespaces": _namespace,
    "nodes": _node,
    "pods": _pod,
    "resourcequotas": _quota,
    "limitranges": _nothing,
    "events": _event,
    "resourceslices": _slice,
    "deviceclasses": _device_class,
    "resourceclaims": _claim,
    "resourceclaimtemplates": _nothing,
    "configmaps": _nothing,
    "validatingadmissionpolicies": _nothing,
    "validatingadmissionpolicybindings": _nothing,
    "topologies": _topology,
    "resourceflavors": _resource_flavor,
    "cohorts": _cohort,
    "clusterqueues": _cluster_queue,
    "localqueues": _local_queue,
    "workloads": _workload,
}
TOP_LEVEL = {"events": EVENT_TOP_LEVEL, "configmaps": KNOWN_TOP_LEVEL | {"data", "binaryData", "immutable"}}
NEEDS_STATUS = {"nodes", "pods"}


def extract_row(kind: str, obj: Any, served: Any = None) -> dict[str, Any]:
    """Column values for one object. Raises UnstorableObjectError only when the object cannot be keyed.

    `served`: the object as the cluster sent it when `obj` is its conversion to v1 (kept in `served_raw`)."""
    if not isinstance(obj, dict):
        raise UnstorableObjectError(f"not an object: {type(obj).__name__}")
    metadata = _dict(obj.get("metadata"))
    uid = metadata.get("uid")
    if not isinstance(uid, str) or not uid or len(uid) > 128:
        raise UnstorableObjectError("metadata.uid missing or invalid")
    issues: list[str] = []
    if b"\\u0000" in orjson.dumps(obj):
        obj = _strip_nul(obj)
        metadata = _dict(obj.get("metadata"))
        issues.append("object contained NUL characters (replaced for storage)")
    name = _str(metadata.get("name"), 10_000)
    if not name:
        issues.append("metadata.name: missing")
    elif len(name) > MAX_NAME:
        issues.append(f"metadata.name: longer than {MAX_NAME} characters")
    allowed = TOP_LEVEL.get(kind, KNOWN_TOP_LEVEL)
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        issues.append(f"unknown fields: {', '.join(unknown)[:200]}")
    if kind in NEEDS_STATUS and not isinstance(obj.get("status"), dict):
        issues.append("status: missing")
    try:
        columns = EXTRACTORS[kind](obj, issues)
    except Exception as exc:  # noqa: BLE001 - a malformed object must never stop the batch
        issues.append(f"could not read {kind} fields: {type(exc).__name__}: {str(exc)[:200]}")
        columns = {}
    return {
        "uid": uid,
        "name": name[:MAX_NAME],
        "namespace": _str(metadata.get("namespace")),
        "resource_version": _str(metadata.get("resourceVersion"), 64),
        "labels": _labels(metadata, issues),
        "raw": obj,
        "k8s_created_at": parse_time(metadata.get("creationTimestamp"), issues, "metadata.creationTimestamp"),
        "issues": issues,
        **columns,
        **({"served_raw": _strip_nul(served)} if served is not None else {}),
    }
