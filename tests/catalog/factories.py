"""factory_boy factories for the catalog, and builders of the manifests (plain dicts) and ValidationContexts that
the validator tests feed in."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import factory
from django.utils import timezone

from catalog.models import DEFAULT_ISOLATION, Lifecycle, Offering, OfferingPrice, UnitKind
from catalog.validation import ValidationContext


class OfferingFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Offering

    slug = factory.Sequence(lambda n: f"offering-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.replace("-", " ").title())
    unit_kind = UnitKind.WHOLE
    isolation = factory.LazyAttribute(lambda o: DEFAULT_ISOLATION[UnitKind(o.unit_kind)])
    resource_name = ""
    device_class_name = ""
    request_sizes = factory.LazyFunction(lambda: [1])
    lifecycle = Lifecycle.ACTIVE


class OfferingPriceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = OfferingPrice

    offering = factory.SubFactory(OfferingFactory, resource_name="nvidia.com/gpu")
    unit_price = Decimal("2.5000")
    currency = "EUR"
    effective_from = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(days=30))


# Manifests for the validator (catalog/validation).

NS = "team-ml"


def container(name: str = "main", *, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
              image: str = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "4", "memory": "16Gi", **(requests or {})}}
    if limits:
        resources["limits"] = dict(limits)
    return {"name": name, "image": image, "command": ["python", "train.py"], "resources": resources, **extra}


def pod(name: str = "trainer", *, namespace: str | None = NS, containers: list[dict[str, Any]] | None = None,
        **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": containers or [container(limits={"nvidia.com/gpu": 1})], **spec}}


def job(name: str = "train", *, namespace: str = NS, parallelism: int | None = None, completions: int | None = None,
        containers: list[dict[str, Any]] | None = None, **pod_spec: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"backoffLimit": 2, "template": {"metadata": {"labels": {"app": name}}, "spec": {
        "restartPolicy": "Never", "containers": containers or [container(limits={"nvidia.com/gpu": 1})],
        **pod_spec}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def exactly(device_class: str = "gpu.nvidia.com", count: int | None = 1, **extra: Any) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": device_class, **extra}
    if count is not None:
        request["count"] = count
    return request


def claim_spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests or [{"name": "gpu", "exactly": exactly()}])}}


def claim(name: str = "shared-gpus", *requests: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace}, "spec": claim_spec(*requests)}


def template(name: str = "train-gpus", *requests: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"spec": claim_spec(*requests)}}


def claim_container(claim_name: str = "gpus", **extra: Any) -> dict[str, Any]:
    item = container(**extra)
    item["resources"]["claims"] = [{"name": claim_name}]
    return item


def with_template(workload: dict[str, Any], template_name: str = "train-gpus") -> dict[str, Any]:
    """The workload's containers use one pod claim "gpus" generated from `template_name`."""
    spec = workload["spec"]["template"]["spec"] if workload["kind"] == "Job" else workload["spec"]
    spec["containers"] = [claim_container()]
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template_name}]
    return workload


def cluster_context(**overrides: Any) -> ValidationContext:
    """A cluster with 3 nodes of whole H100s, 1 node of MIG slices and 5 CPU-only nodes."""
    values: dict[str, Any] = {
        "namespaces": {NS: {}, "monitoring": {"resource.kubernetes.io/admin-access": "true"}, "default": {}},
        "node_resources": {"nvidia.com/gpu": 3, "nvidia.com/mig-1g.10gb": 1, "nvidia.com/mig-3g.40gb": 1},
        "gpu_node_count": 4,
        "cpu_only_node_count": 5,
        "device_classes": {
            "gpu.nvidia.com": {"spec": {"extendedResourceName": "nvidia.com/gpu"}},
            "mig.nvidia.com": {"spec": {}},
        },
        "admin_access_namespaces": frozenset({"monitoring"}),
        "node_taints": {"dedicated": {"h100"}, "nvidia.com/gpu": {""}},
        "node_taint_labels": {"dedicated": {"pool": "h100"}},
        "quotas": None,
    }
    values.update(overrides)
    return ValidationContext(**values)
