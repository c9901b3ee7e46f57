"""factory_boy factories for the inventory models; each test creates the rows it asserts on."""

from __future__ import annotations

import factory
from django.utils import timezone

from inventory.models import Cluster, Node, Pod, SyncState


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
