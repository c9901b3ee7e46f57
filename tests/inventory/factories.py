"""factory_boy factories for the inventory models, the derived accelerator inventory (Device, Finding) and
accelerator pods; each test creates the rows it asserts on."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import factory
from django.utils import timezone

from inventory.models import (
    Cluster,
    Device,
    DeviceClass,
    Finding,
    Health,
    Mode,
    Node,
    Path,
    Pod,
    ResourceClaim,
    ResourceSlice,
    SyncState,
)
from inventory.representations import device_documents, device_selector_hash


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"cluster-{n}")
    description = "Test cluster"
    connection = Cluster.ConnectionKind.KUBECONFIG
    kubeconfig = ("apiVersion: v1\nclusters: [{name: test, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
                  "contexts: [{name: test, context: {cluster: test}}]\ncurrent-context: test\n")
    server_version = "v1.34.1"


class NodeFactory(factory.django.DjangoModelFactory):
    """A realistic 8-GPU node; override labels/capacity/allocatable for CPU-only nodes."""

    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    uid = factory.Faker("uuid4")
    name = factory.Sequence(lambda n: f"gpu-node-{n:03d}")
    resource_version = factory.Sequence(lambda n: str(1000 + n))
    labels = factory.LazyAttribute(
        lambda o: {
            "kubernetes.io/hostname": o.name,
            "node.kubernetes.io/instance-type": "p5.48xlarge",
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8",
        }
    )
    capacity = factory.LazyFunction(
        lambda: {
            "cpu": "192",
            "memory": "2063937220Ki",
            "pods": "110",
            "ephemeral-storage": "7499805Mi",
            "nvidia.com/gpu": "8",
        }
    )
    allocatable = factory.LazyFunction(
        lambda: {
            "cpu": "191500m",
            "memory": "2052401860Ki",
            "pods": "110",
            "ephemeral-storage": "6911894Mi",
            "nvidia.com/gpu": "8",
        }
    )
    taints = factory.LazyFunction(list)
    conditions = factory.LazyFunction(
        lambda: [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
        ]
    )
    ready = True
    unschedulable = False
    kubelet_version = "v1.34.1"
    k8s_created_at = factory.LazyFunction(timezone.now)
    raw = factory.LazyAttribute(lambda o: {"kind": "Node", "metadata": {"name": o.name, "uid": o.uid}})


class PodFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Pod

    cluster = factory.SubFactory(ClusterFactory)
    uid = factory.Faker("uuid4")
    namespace = "team-ml"
    name = factory.Sequence(lambda n: f"trainer-{n}")
    resource_version = factory.Sequence(lambda n: str(5000 + n))
    node_name = ""
    phase = "Running"
    scheduled = True
    raw = factory.LazyAttribute(lambda o: {"kind": "Pod", "metadata": {"name": o.name, "namespace": o.namespace}})


class SyncStateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = SyncState
        django_get_or_create = ("cluster", "kind")

    cluster = factory.SubFactory(ClusterFactory)
    kind = "nodes"
    phase = SyncState.Phase.WATCHING
    resource_version = factory.Sequence(lambda n: str(90000 + n))
    listed_count = 0
    list_total = None
    last_success_at = factory.LazyFunction(timezone.now)
    last_event_at = factory.LazyFunction(timezone.now)


GPU_UUID = "GPU-5e5a6d2c-1b1e-4c2b-9f41-0123456789ab"
PCI_BUS_ID = "0000:18:00.0"


class _DeviceFactory(factory.django.DjangoModelFactory):
    """Devices carry their API documents, as the derivation writes them."""

    class Meta:
        model = Device
        abstract = True

    @classmethod
    def _create(cls, model_class: type[Device], *args: object, **kwargs: object) -> Device:
        device = model_class(*args, **kwargs)
        if "selector_hash" not in kwargs:
            device.selector_hash = device_selector_hash(device)
        device.api_document, device.api_document_redacted = device_documents(device)
        device.save()
        return device


class PluginDeviceFactory(_DeviceFactory):
    """One (node, extended resource) row of the device-plugin path: 8 whole H100 cards, 2 in use."""

    class Meta:
        model = Device

    cluster = factory.SubFactory(ClusterFactory)
    node_name = factory.Sequence(lambda n: f"gpu-node-{n:03d}")
    resource_name = "nvidia.com/gpu"
    unit = factory.LazyAttribute(lambda o: o.resource_name)
    key = factory.LazyAttribute(lambda o: f"node/{o.node_name}/{o.resource_name}")
    path = Path.DEVICE_PLUGIN
    mode = Mode.WHOLE
    node_pool = "h100-pool"
    node_schedulable = True
    model = "NVIDIA-H100-80GB-HBM3"
    memory_mib = 81559
    architecture = "hopper"
    compute_capability = "9.0"
    units_per_card = 1
    cards = factory.LazyAttribute(lambda o: o.capacity / o.units_per_card)
    capacity = 8
    allocatable = 8
    in_use = 2
    free = factory.LazyAttribute(lambda o: max(0, o.allocatable - o.in_use))
    unhealthy = factory.LazyAttribute(lambda o: o.capacity - o.allocatable)
    health = Health.OK


class TimeSlicedDeviceFactory(PluginDeviceFactory):
    """4 T4 cards shared by time-slicing, 4 replicas per card = 16 units."""

    mode = Mode.TIME_SLICING
    model = "Tesla-T4"
    memory_mib = 15360
    node_pool = "t4-pool"
    units_per_card = 4
    capacity = 16
    allocatable = 16
    in_use = 5


class DraDeviceFactory(_DeviceFactory):
    """One DRA device (a whole A100) of a complete pool, unheld."""

    class Meta:
        model = Device

    cluster = factory.SubFactory(ClusterFactory)
    node_name = factory.Sequence(lambda n: f"dra-node-{n:03d}")
    driver = "gpu.nvidia.com"
    pool = factory.LazyAttribute(lambda o: o.node_name)
    device_name = factory.Sequence(lambda n: f"gpu-{n}")
    key = factory.LazyAttribute(lambda o: f"{o.driver}/{o.pool}/{o.device_name}")
    unit = "gpu.nvidia.com gpu"
    path = Path.DRA
    mode = Mode.DRA_DEVICE
    node_pool = "dra-pool"
    model = "NVIDIA-A100-SXM4-80GB"
    memory_mib = 81920
    cards = 1.0
    capacity = 1
    allocatable = 1
    in_use = 0
    free = 1
    health = Health.OK
    pool_generation = 3
    pool_complete = True
    attributes = factory.LazyFunction(
        lambda: {
            "type": {"string": "gpu"},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
            "uuid": {"string": GPU_UUID},
            "resource.kubernetes.io/pciBusID": {"string": PCI_BUS_ID},
            "driverVersion": {"version": "570.124.6"},
            "index": {"int": 0},
        }
    )
    capacities = factory.LazyFunction(lambda: {"memory": {"value": "80Gi"}})


class FindingFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Finding

    cluster = factory.SubFactory(ClusterFactory)
    kind = Finding.Kind.UNHEALTHY_DEVICES
    severity = Finding.Severity.WARNING
    node_name = factory.Sequence(lambda n: f"gpu-node-{n:03d}")
    scope = factory.LazyAttribute(lambda o: f"node/{o.node_name}")
    subject = factory.LazyAttribute(lambda o: f"node/{o.node_name}/nvidia.com/gpu")
    message = "1 of 8 nvidia.com/gpu units are unhealthy (allocatable 7 < capacity 8)."
    evidence = factory.LazyFunction(lambda: {"capacity": 8, "allocatable": 7})


class AcceleratorPodFactory(PodFactory):
    """A GPU pod the scheduler could not place."""

    accelerator = True
    phase = "Pending"
    scheduled = False
    stage = "pending-unscheduled"
    extended_requests = factory.LazyFunction(lambda: {"nvidia.com/gpu": 4})
    scheduling_message = "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    scheduling_reasons = factory.LazyFunction(
        lambda: {
            "parsed": True,
            "total_nodes": 3,
            "reasons": [
                {
                    "count": 1,
                    "reason": "Insufficient nvidia.com/gpu",
                    "category": "insufficient-resource",
                    "resource": "nvidia.com/gpu",
                    "taint": "",
                },
                {
                    "count": 2,
                    "reason": "node(s) didn't match Pod's node affinity/selector",
                    "category": "node-affinity",
                    "resource": "",
                    "taint": "",
                },
            ],
            "prefilter_message": "",
            "preemption_total": 3,
            "preemption_reasons": [],
            "postfilter": "",
        }
    )
    k8s_created_at = factory.LazyFunction(timezone.now)


class ResourceSliceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ResourceSlice

    cluster = factory.SubFactory(ClusterFactory)
    uid = factory.Faker("uuid4")
    name = factory.Sequence(lambda n: f"node-{n}-gpu.nvidia.com-abc")
    resource_version = "1"
    driver = "gpu.nvidia.com"
    pool_name = factory.Sequence(lambda n: f"node-{n}")
    pool_generation = 1
    pool_slice_count = 1
    node_name = factory.LazyAttribute(lambda o: o.pool_name)
    device_count = 1
    raw = factory.LazyAttribute(
        lambda o: {
            "kind": "ResourceSlice",
            "metadata": {"name": o.name},
            "spec": {
                "driver": o.driver,
                "nodeName": o.node_name,
                "pool": {"name": o.pool_name, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": "gpu-0",
                        "attributes": {"uuid": {"string": GPU_UUID}, "productName": {"string": "NVIDIA A100"}},
                    }
                ],
            },
        }
    )


class DeviceClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DeviceClass

    cluster = factory.SubFactory(ClusterFactory)
    uid = factory.Faker("uuid4")
    name = factory.Sequence(lambda n: f"gpu-{n}.nvidia.com")
    resource_version = "1"
    extended_resource_name = ""
    raw = factory.LazyAttribute(
        lambda o: {
            "kind": "DeviceClass",
            "metadata": {"name": o.name},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        }
    )


class ResourceClaimFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ResourceClaim

    cluster = factory.SubFactory(ClusterFactory)
    uid = factory.Faker("uuid4")
    namespace = "team-ml"
    name = factory.Sequence(lambda n: f"claim-{n}")
    resource_version = "1"
    allocated = True
    reserved_for_count = 1
    raw = factory.LazyAttribute(
        lambda o: {
            "kind": "ResourceClaim",
            "metadata": {"name": o.name, "namespace": o.namespace},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-0"}]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "trainer-0", "uid": "pod-uid-0"}],
            },
        }
    )


# Kubernetes API objects made by hand (plain dicts), fed through the sync with the `apply` fixture (tests/conftest.py).

_rv = itertools.count(100)


def meta(name: str, namespace: str = "", **extra: Any) -> dict[str, Any]:
    out = {"name": name, "uid": str(uuid.uuid5(uuid.NAMESPACE_OID, f"{namespace}/{name}")),
           "resourceVersion": str(next(_rv)), "creationTimestamp": "2026-01-01T00:00:00Z", **extra}
    if namespace:
        out["namespace"] = namespace
    return out


def node(name: str, *, capacity: dict[str, str] | None = None, allocatable: dict[str, str] | None = None,
         labels: dict[str, str] | None = None, unschedulable: bool = False) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", **(capacity or {})}
    return {"metadata": meta(name, labels=labels or {}), "spec": {"unschedulable": unschedulable},
            "status": {"capacity": capacity, "allocatable": {**capacity, **(allocatable or {})},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, node_name: str, limits: dict[str, str], *, phase: str = "Running", namespace: str = "team-a",
        deleted: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase, "startTime": "2026-01-01T01:00:00Z",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:59:00Z"}],
    }
    if phase in ("Succeeded", "Failed"):
        status["containerStatuses"] = [{"name": "main", "restartCount": 0, "state": {"terminated": {
            "exitCode": 0, "reason": "Completed", "startedAt": "2026-01-01T01:00:00Z",
            "finishedAt": "2026-01-01T03:00:00Z"}}}]
    extra = {"deletionTimestamp": "2026-01-01T05:00:00Z"} if deleted else {}
    return {"metadata": meta(name, namespace, **extra),
            "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "x",
                                                            "resources": {"limits": limits}}]},
            "status": status}


def gpu_device(name: str, **attrs: Any) -> dict[str, Any]:
    attributes = {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
                  "uuid": {"string": f"GPU-{name}"}, "cudaComputeCapability": {"version": "9.0.0"},
                  "driverVersion": {"version": "570.124.6"}}
    attributes.update({k: v for k, v in attrs.items() if k != "capacity"})
    return {"name": name, "attributes": attributes,
            "capacity": attrs.get("capacity", {"memory": {"value": "81559Mi"}})}


def resource_slice(name: str, pool: str, *, generation: int = 1, count: int = 1, node_name: str = "",
                   devices: list[dict[str, Any]] | None = None, counters: list[dict[str, Any]] | None = None,
                   driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "pool": {"name": pool, "generation": generation,
                                                       "resourceSliceCount": count}}
    if node_name:
        spec["nodeName"] = node_name
    else:
        spec["allNodes"] = True
    if counters is not None:
        spec["sharedCounters"] = counters
    else:
        spec["devices"] = devices or []
    return {"metadata": meta(name), "spec": spec}


def claim(name: str, results: list[tuple[str, str, str]], *, admin: bool = False, namespace: str = "team-a",
          reserved: list[str] = ()) -> dict[str, Any]:
    return {"metadata": meta(name, namespace),
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": d, "pool": p, "device": dev, **({"adminAccess": True} if admin else {})}
                for d, p, dev in results]}, "allocationTimestamp": "2026-01-02T00:00:00Z"},
                "reservedFor": [{"resource": "pods", "name": r, "uid": f"uid-{r}"} for r in reserved]}}
