"""Read-only REST resources for clusters and nodes."""

from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import viewsets

from core.api.exceptions import PortalExceptionHandlerMixin
from inventory.api.fast import NoCountLimitOffsetPagination
from inventory.api.serializers import ClusterSerializer, NodeSerializer
from inventory.filtersets import NodeFilterSet
from inventory.models import Cluster, Node


class ClusterViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet[Cluster]):
    """Registered clusters and their per-kind sync state. Connection secrets are never exposed."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = ClusterSerializer

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.defer("kubeconfig", "kubeconfig_path").prefetch_related("sync_states").order_by("name")


class NodeViewSet(PortalExceptionHandlerMixin, viewsets.ReadOnlyModelViewSet[Node]):
    """Live (not tombstoned) nodes of every cluster; see inventory.filtersets for the filter semantics.

    Paged without COUNT(*) (`count` is null, follow `next`): counting every live node of fifty clusters on every page
    costs more than the page."""

    token_scope = "inventory:read"  # noqa: S105 - a scope name, not a secret
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    pagination_class = NoCountLimitOffsetPagination

    def get_queryset(self) -> QuerySet[Node]:
        return Node.objects.live().select_related("cluster").defer("raw", "cluster__kubeconfig").order_by("name", "pk")
