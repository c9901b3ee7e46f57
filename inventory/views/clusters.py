"""Inventory pages: clusters with their sync state, nodes with htmx filtering. Read-only; no ORM writes here."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views import View
from django.views.generic import DetailView, ListView
from django_filters.views import FilterView
from django_htmx.http import HttpResponseStopPolling

from core.htmx import HtmxPartialMixin
from inventory.filtersets import NodeFilterSet
from inventory.models import Cluster, Node, SyncIncident, SyncIssue
from inventory.redaction import holder_rule
from inventory.selectors import cluster_capabilities, cluster_sync_overview, node_pods, node_resources

RECENT_ISSUES = 20
NODE_PODS_SHOWN = 500


class ClusterListView(LoginRequiredMixin, HtmxPartialMixin, ListView):
    model = Cluster
    template_name = "inventory/cluster_list.html"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.only("pk", "name", "description", "connection", "sync_enabled", "server_version")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["overview"] = cluster_sync_overview(clusters=context["page_obj"].object_list)
        return context


class ClusterDetailView(LoginRequiredMixin, DetailView):
    model = Cluster
    template_name = "inventory/cluster_detail.html"

    def get_queryset(self) -> QuerySet[Cluster]:
        return Cluster.objects.defer("kubeconfig")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sync"] = cluster_sync_overview(clusters=[self.object])[0]
        context["capabilities"] = cluster_capabilities(self.object)
        context["issues"] = SyncIssue.objects.filter(cluster=self.object)[:RECENT_ISSUES]
        context["incidents"] = SyncIncident.objects.filter(cluster=self.object)[:RECENT_ISSUES]
        return context


class ClusterSyncStateView(LoginRequiredMixin, View):
    """The polled sync-state fragment of one cluster; HTTP 286 tells htmx to stop polling once nothing lists."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        cluster = get_object_or_404(Cluster.objects.defer("kubeconfig"), pk=pk)
        sync = cluster_sync_overview(clusters=[cluster])[0]
        response = render(request, "inventory/_sync_state.html", {"sync": sync})
        if not sync.listing:
            return HttpResponseStopPolling(response.content)
        return response


class NodeListView(LoginRequiredMixin, HtmxPartialMixin, FilterView):
    model = Node
    filterset_class = NodeFilterSet
    template_name = "inventory/node_list.html"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[Node]:
        return Node.objects.live().select_related("cluster").defer("raw", "cluster__kubeconfig").order_by("name", "pk")


class NodeDetailView(LoginRequiredMixin, DetailView):
    model = Node
    template_name = "inventory/node_detail.html"

    def get_queryset(self) -> QuerySet[Node]:
        return Node.objects.select_related("cluster").defer("raw", "cluster__kubeconfig")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["resources"] = node_resources(self.object, extended_only=False)
        visible = holder_rule(self.request.user)
        pods = list(node_pods(node=self.object).only("pk", "cluster_id", "namespace", "name", "phase")
                    [:NODE_PODS_SHOWN])
        context["pods"] = [pod for pod in pods if visible(pod.cluster_id, pod.namespace)]
        context["other_pods"] = len(pods) - len(context["pods"])  # other tenants' pods: counted, never named
        return context
