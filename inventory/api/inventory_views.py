"""Read-only REST resources of the accelerator inventory; filters in inventory.inventory_filtersets."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import viewsets

from inventory.api.inventory_serializers import (
    AcceleratorPodSerializer,
    DeviceClassSerializer,
    DeviceSerializer,
    FindingSerializer,
    ResourceClaimSerializer,
    ResourceSliceSerializer,
)
from inventory.inventory_filtersets import DeviceFilterSet, FindingFilterSet, PodFilterSet
from inventory.models import Device, DeviceClass, Finding, Pod, ResourceClaim, ResourceSlice
from portal.api import PortalExceptionHandlerMixin


class DeviceViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    """Sellable accelerator units of both paths (device-plugin node resources and DRA devices) with live usage."""

    serializer_class = DeviceSerializer
    filterset_class = DeviceFilterSet

    def get_queryset(self) -> QuerySet[Device]:
        return Device.objects.select_related("cluster").defer("cluster__kubeconfig").order_by("cluster_id", "key")


class AcceleratorPodViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    """Live pods that request accelerators (vendor extended resources or resource claims), with their stage."""

    serializer_class = AcceleratorPodSerializer
    filterset_class = PodFilterSet

    def get_queryset(self) -> QuerySet[Pod]:
        return (
            Pod.objects.live()
            .filter(accelerator=True)
            .select_related("cluster")
            .defer("raw", "labels", "cluster__kubeconfig")
            .order_by("namespace", "name", "pk")
        )


class ResourceSliceViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = ResourceSliceSerializer
    filterset_fields = ["cluster", "driver", "pool_name", "node_name"]

    def get_queryset(self) -> QuerySet[ResourceSlice]:
        return (
            ResourceSlice.objects.live().select_related("cluster").defer("cluster__kubeconfig").order_by("name", "pk")
        )


class DeviceClassViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = DeviceClassSerializer
    filterset_fields = ["cluster", "name", "extended_resource_name"]

    def get_queryset(self) -> QuerySet[DeviceClass]:
        return DeviceClass.objects.live().select_related("cluster").defer("cluster__kubeconfig").order_by("name", "pk")


class ResourceClaimViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = ResourceClaimSerializer
    filterset_fields = ["cluster", "namespace", "allocated"]

    def get_queryset(self) -> QuerySet[ResourceClaim]:
        return (
            ResourceClaim.objects.live()
            .select_related("cluster")
            .defer("cluster__kubeconfig")
            .order_by("namespace", "name", "pk")
        )


class FindingViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet):
    """Health and drift problems, present while the condition holds."""

    serializer_class = FindingSerializer
    filterset_class = FindingFilterSet

    def get_queryset(self) -> QuerySet[Finding]:
        return Finding.objects.select_related("cluster").defer("cluster__kubeconfig").order_by("cluster_id", "pk")
