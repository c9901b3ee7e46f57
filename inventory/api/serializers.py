"""Read-only API representations of the inventory. Field lists are explicit; Cluster.kubeconfig/kubeconfig_path
never appear, and hardware identifiers are redacted for non-platform users by inventory.redaction (the same rule as
the pages)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.types import RequestUser
from inventory.k8s.semantics import as_dict as _dict
from inventory.k8s.semantics import as_list as _list
from inventory.models import Cluster, Device, DeviceClass, Finding, Node, Pod, ResourceClaim, ResourceSlice, SyncState
from inventory.redaction import holder_visible, redact_attributes, redact_holder, redact_tree, redact_value
from inventory.representations import DEVICE_DOCUMENT_FIELDS


class SyncStateSerializer(serializers.ModelSerializer):
    class Meta:
        model = SyncState
        fields = [
            "kind",
            "phase",
            "resource_version",
            "listed_count",
            "list_total",
            "last_event_at",
            "last_success_at",
            "relists",
            "last_error",
            "served_version",
            "unavailable_reason",
        ]
        read_only_fields = fields


class ClusterSerializer(serializers.ModelSerializer):
    sync_states = SyncStateSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = ["id", "name", "description", "connection", "sync_enabled", "server_version", "sync_states"]
        read_only_fields = fields


class ClusterRefSerializer(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name"]
        read_only_fields = fields


class NodeSerializer(serializers.ModelSerializer):
    cluster = ClusterRefSerializer(read_only=True)
    labels = serializers.DictField(child=serializers.CharField(), read_only=True)
    capacity = serializers.DictField(child=serializers.CharField(), read_only=True, help_text="Quantity strings.")
    allocatable = serializers.DictField(child=serializers.CharField(), read_only=True, help_text="Quantity strings.")
    taints = serializers.ListField(child=serializers.DictField(), read_only=True)
    conditions = serializers.ListField(child=serializers.DictField(), read_only=True)
    issues = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "cluster",
            "uid",
            "name",
            "labels",
            "ready",
            "unschedulable",
            "capacity",
            "allocatable",
            "taints",
            "conditions",
            "kubelet_version",
            "k8s_created_at",
            "resource_version",
            "issues",
        ]
        read_only_fields = fields


def _user(serializer: serializers.Serializer) -> RequestUser | None:
    request = serializer.context.get("request")
    return getattr(request, "user", None)


class DeviceSerializer(serializers.ModelSerializer):
    cluster = ClusterRefSerializer(read_only=True)
    attributes = serializers.SerializerMethodField()
    capacities = serializers.SerializerMethodField()
    consumes_counters = serializers.SerializerMethodField()
    parent = serializers.SerializerMethodField()
    taints = serializers.ListField(child=serializers.DictField(), read_only=True)
    reserved_for = serializers.ListField(child=serializers.DictField(), read_only=True)

    class Meta:
        model = Device
        fields = ["id", "cluster", *DEVICE_DOCUMENT_FIELDS]  # one list: the stored documents follow it too
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_attributes(self, obj: Device) -> dict[str, Any]:
        return redact_attributes(obj.attributes, _user(self))

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_capacities(self, obj: Device) -> dict[str, Any]:
        return redact_attributes(obj.capacities, _user(self))

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_consumes_counters(self, obj: Device) -> list[Any]:
        return redact_tree(_list(obj.consumes_counters), _user(self))

    @extend_schema_field(OpenApiTypes.STR)
    def get_parent(self, obj: Device) -> str:
        return redact_value("parent", obj.parent, _user(self))

    def to_representation(self, instance: Device) -> dict[str, Any]:
        data = super().to_representation(instance)
        if not holder_visible(_user(self), instance.cluster_id, instance.claim_namespace):
            data = redact_holder(data)  # another tenant's claim: in use, never by whom
        return data


class AcceleratorPodSerializer(serializers.ModelSerializer):
    cluster = ClusterRefSerializer(read_only=True)
    extended_requests = serializers.DictField(child=serializers.IntegerField(), read_only=True)
    claim_names = serializers.ListField(child=serializers.CharField(), read_only=True)
    scheduling_reasons = serializers.DictField(read_only=True, help_text="Parsed FailedScheduling message.")

    class Meta:
        model = Pod
        fields = [
            "id",
            "cluster",
            "uid",
            "namespace",
            "name",
            "node_name",
            "phase",
            "stage",
            "stage_layer",
            "stage_detail",
            "restarts",
            "extended_requests",
            "claim_names",
            "scheduling_message",
            "scheduling_reasons",
            "k8s_created_at",
        ]
        read_only_fields = fields


class ResourceSliceSerializer(serializers.ModelSerializer):
    cluster = ClusterRefSerializer(read_only=True)
    spec = serializers.SerializerMethodField(help_text="The raw spec; hardware identifiers redacted for tenants.")

    class Meta:
        model = ResourceSlice
        fields = [
            "id",
            "cluster",
            "uid",
            "name",
            "driver",
            "pool_name",
            "pool_generation",
            "pool_slice_count",
            "node_name",
            "device_count",
            "spec",
        ]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_spec(self, obj: ResourceSlice) -> dict[str, Any]:
        return redact_tree(_dict(_dict(obj.raw).get("spec")), _user(self))


class DeviceClassSerializer(serializers.ModelSerializer):
    cluster = ClusterRefSerializer(read_only=True)
    selectors = serializers.SerializerMethodField(help_text="spec.selectors (CEL expressions).")

    class Meta:
        model = DeviceClass
        fields = ["id", "cluster", "uid", "name", "extended_resource_name", "selectors"]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_selectors(self, obj: DeviceClass) -> list[Any]:
        return _list(_dict(_dict(obj.raw).get("spec")).get("selectors"))


class ResourceClaimSerializer(serializers.ModelSerializer):
    cluster = ClusterRefSerializer(read_only=True)
    devices = serializers.SerializerMethodField(help_text="status.allocation.devices.results.")
    reserved_for = serializers.SerializerMethodField(help_text="status.reservedFor.")

    class Meta:
        model = ResourceClaim
        fields = [
            "id",
            "cluster",
            "uid",
            "namespace",
            "name",
            "allocated",
            "reserved_for_count",
            "devices",
            "reserved_for",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_devices(self, obj: ResourceClaim) -> list[Any]:
        status = _dict(_dict(obj.raw).get("status"))
        results = _list(_dict(_dict(status.get("allocation")).get("devices")).get("results"))
        return redact_tree(results, _user(self))

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_reserved_for(self, obj: ResourceClaim) -> list[Any]:
        return _list(_dict(_dict(obj.raw).get("status")).get("reservedFor"))


class FindingSerializer(serializers.ModelSerializer):
    cluster = ClusterRefSerializer(read_only=True)
    evidence = serializers.SerializerMethodField()

    class Meta:
        model = Finding
        fields = [
            "id",
            "cluster",
            "kind",
            "severity",
            "scope",
            "subject",
            "node_name",
            "message",
            "evidence",
            "first_seen_at",
            "updated_at",
        ]
        read_only_fields = fields

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_evidence(self, obj: Finding) -> Any:
        return redact_tree(obj.evidence, _user(self))
