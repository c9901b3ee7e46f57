"""Small builders for Nodes, Pods and DRA objects as raw Kubernetes dicts (what `kubectl get -o json` returns)."""

from __future__ import annotations

from typing import Any

from catalog.feasibility import ClusterSnapshot, Explanation, explain_pod, snapshot_from_objects

DRIVER = "gpu.example.com"
GPU_CLASS = f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu'"


def node(name: str, *, cpu: str = "32", memory: str = "128Gi", pods: str = "110", labels: dict | None = None,
         taints: list[dict] | None = None, unschedulable: bool = False, extended: dict | None = None) -> dict:
    allocatable = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "100Gi"}
    allocatable.update({key: str(value) for key, value in (extended or {}).items()})
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def gpu_node(name: str, gpus: int = 8, **kwargs: Any) -> dict:
    return node(name, extended={"nvidia.com/gpu": gpus}, **kwargs)


def container(name: str = "main", *, requests: dict | None = None, limits: dict | None = None,
              restart_policy: str | None = None, ports: list[dict] | None = None) -> dict:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    out: dict[str, Any] = {"name": name, "image": "busybox", "resources": resources}
    if restart_policy:
        out["restartPolicy"] = restart_policy
    if ports:
        out["ports"] = ports
    return out


def pod(name: str = "p", *, namespace: str = "default", containers: list[dict] | None = None,
        requests: dict | None = None, limits: dict | None = None, init: list[dict] | None = None,
        node_name: str | None = None, phase: str | None = None, node_selector: dict | None = None,
        terms: list[dict] | None = None, tolerations: list[dict] | None = None, overhead: dict | None = None,
        claims: list[dict] | None = None, owner: tuple[str, str] | None = None, deadline: int | None = None,
        claim_statuses: list[dict] | None = None) -> dict:
    spec: dict[str, Any] = {"containers": containers or [container(requests=requests, limits=limits)]}
    if init:
        spec["initContainers"] = init
    if node_name:
        spec["nodeName"] = node_name
    if node_selector:
        spec["nodeSelector"] = node_selector
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    if tolerations:
        spec["tolerations"] = tolerations
    if overhead:
        spec["overhead"] = overhead
    if claims:
        spec["resourceClaims"] = claims
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": owner[0], "name": owner[1],
                                        "uid": "u", "controller": True}]
    status: dict[str, Any] = {"phase": phase or ("Running" if node_name else "Pending")}
    if claim_statuses:
        status["resourceClaimStatuses"] = claim_statuses
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def gpu_pod(name: str = "p", gpus: int = 1, **kwargs: Any) -> dict:
    return pod(name, limits={"nvidia.com/gpu": str(gpus)}, **kwargs)


def device(name: str, *, kind: str = "gpu", memory: str = "80Gi", attrs: dict | None = None,
           taints: list[dict] | None = None, consumes: list[dict] | None = None, **extra: Any) -> dict:
    attributes = {"type": {"string": kind}, **(attrs or {})}
    out: dict[str, Any] = {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}
    if taints:
        out["taints"] = taints
    if consumes:
        out["consumesCounters"] = consumes
    out.update(extra)
    return out


def resource_slice(node_name: str | None, devices: list[dict] | None = None, *, pool: str | None = None,
                   generation: int = 1, count: int = 1, counters: list[dict] | None = None,
                   name: str | None = None, driver: str = DRIVER, **scope: Any) -> dict:
    spec: dict[str, Any] = {"driver": driver,
                            "pool": {"name": pool or node_name, "generation": generation, "resourceSliceCount": count}}
    if node_name:
        spec["nodeName"] = node_name
    spec.update(scope)
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = counters
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name or f"{pool or node_name}-{generation}-{len(devices or [])}"}, "spec": spec}


def device_class(name: str = "gpu", expression: str = GPU_CLASS) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def exact(name: str = "gpu", cls: str = "gpu", count: int | None = None, *, selectors: tuple[str, ...] = (),
          mode: str | None = None, tolerations: list[dict] | None = None, admin: bool | None = None) -> dict:
    body: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        body["count"] = count
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if mode:
        body["allocationMode"] = mode
    if tolerations:
        body["tolerations"] = tolerations
    if admin is not None:
        body["adminAccess"] = admin
    return {"name": name, "exactly": body}


def claim_spec(requests: list[dict], constraints: list[dict] | None = None) -> dict:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"devices": devices}


def claim(name: str, requests: list[dict], *, namespace: str = "default", constraints: list[dict] | None = None,
          allocated: list[tuple[str, str]] | None = None, pool: str | None = None, admin: bool = False,
          node_selector: dict | None = None, reserved_for: list[str] | None = None) -> dict:
    out: dict[str, Any] = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"name": name, "namespace": namespace},
                           "spec": claim_spec(requests, constraints)}
    if allocated is not None:
        results = [{"request": requests[0]["name"], "driver": DRIVER, "pool": pool_name, "device": dev,
                    **({"adminAccess": True} if admin else {})} for pool_name, dev in allocated]
        allocation: dict[str, Any] = {"devices": {"results": results}}
        if node_selector:
            allocation["nodeSelector"] = node_selector
        out["status"] = {"allocation": allocation,
                         "reservedFor": [{"resource": "pods", "name": p, "uid": p} for p in reserved_for or []]}
    return out


def template(name: str, requests: list[dict], *, namespace: str = "default",
             constraints: list[dict] | None = None) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": claim_spec(requests, constraints)}}


def pinned(node_name: str) -> dict:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                     "values": [node_name]}]}]}


def snap(nodes: list[dict], pods: list[dict] = (), **kwargs: Any) -> ClusterSnapshot:  # type: ignore[assignment]
    return snapshot_from_objects(nodes=nodes, pods=list(pods), **kwargs)


def explain(pod_obj: dict, nodes: list[dict], pods: list[dict] = (), **kwargs: Any) -> Explanation:  # type: ignore[assignment]
    extra = {k: kwargs.pop(k) for k in ("extra_claims", "extra_claim_templates") if k in kwargs}
    return explain_pod(pod_obj, snap(nodes, pods, **kwargs), **extra)


def verdict(explanation: Explanation, name: str) -> Any:
    return next(v for v in explanation.nodes if v.name == name)
