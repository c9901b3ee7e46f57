"""Read-only API representations. Field lists are explicit; Cluster.kubeconfig/kubeconfig_path never appear."""

from __future__ import annotations

from rest_framework import serializers

from inventory.models import Cluster, Node, SyncState


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
