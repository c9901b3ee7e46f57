"""Accelerator inventory pages: overview, free capacity, node device panel, device detail, pending pods, findings.

Read-only and thin: filtering lives in inventory.filtersets, aggregation in inventory.overview, the
sensitive-field rule in inventory.redaction.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.db.models import Case, F, QuerySet, Value, When
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, render
from django.views import View
from django.views.generic import DetailView, TemplateView
from django_filters.views import FilterView

from core.htmx import HtmxPartialMixin
from inventory.filtersets import PENDING_STAGES, DeviceFilterSet, FindingFilterSet, PodFilterSet
from inventory.models import Device, Finding, Node, Path, Pod, ResourceClaim
from inventory.overview import accelerator_overview
from inventory.podstatus import pod_claim_served_resources
from inventory.redaction import (
    REDACTED,
    can_see_sensitive,
    holder_rule,
    redact_attributes,
    redact_tree,
    redact_value,
)
from inventory.selectors import QueuedWorkload, evidence_events, queued_workloads

# Columns the list pages render; the JSON detail columns stay in the database.
DEVICE_LIST_DEFER = ("attributes", "capacities", "consumes_counters", "taints", "reserved_for", "cluster__kubeconfig")
NODE_PODS_SCANNED = 2000
SEVERITY_ORDER = (Finding.Severity.ERROR, Finding.Severity.WARNING, Finding.Severity.INFO)


class OverviewView(LoginRequiredMixin, HtmxPartialMixin, TemplateView):
    template_name = "inventory/overview.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        rows = accelerator_overview()
        context["clusters"] = [(name, list(group)) for name, group in groupby(rows, key=lambda r: r.cluster)]
        return context


class CapacityView(LoginRequiredMixin, HtmxPartialMixin, FilterView):
    """Where is free capacity: devices of both paths, filtered, by cluster and node."""

    model = Device
    filterset_class = DeviceFilterSet
    template_name = "inventory/capacity.html"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[Device]:
        return (
            Device.objects.select_related("cluster")
            .defer(*DEVICE_LIST_DEFER)
            # By cluster id, not name: the (cluster, node_name) index then yields a page without sorting every
            # device (78 → 3 ms on `large`).
            .order_by("cluster_id", "node_name", "unit", "key")
        )


class NodeDevicesView(LoginRequiredMixin, View):
    """The node page's lazily loaded panel: that node's devices (both paths) with usage and holder claims."""

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        node = get_object_or_404(Node.objects.only("pk", "cluster_id", "name"), pk=pk)
        devices = list(
            Device.objects.filter(cluster_id=node.cluster_id, node_name=node.name)
            .defer("attributes", "capacities", "consumes_counters", "taints")
            .order_by("path", "unit", "key")
        )
        visible = holder_rule(request.user)
        for device in devices:
            device.holder_hidden = not visible(device.cluster_id, device.claim_namespace)
        return render(request, "inventory/_node_devices.html", {"node": node, "devices": devices})


def typed_value(value: Any) -> tuple[str, str]:
    """A DRA attribute/capacity value ``{"string": "x"}`` / ``{"value": "80Gi"}`` as (type, text)."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, inner),) = value.items()
        return str(kind), str(inner)
    return ("" if value == REDACTED else type(value).__name__), str(value)


class DeviceDetailView(LoginRequiredMixin, DetailView):
    model = Device
    template_name = "inventory/device_detail.html"
    context_object_name = "device"

    def get_queryset(self) -> QuerySet[Device]:
        return Device.objects.select_related("cluster").defer("cluster__kubeconfig")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        device: Device = self.object
        user = self.request.user
        context["sensitive_visible"] = can_see_sensitive(user)
        context["attributes"] = [
            (k, *typed_value(v)) for k, v in sorted(redact_attributes(device.attributes, user).items())
        ]
        context["capacities"] = [
            (k, *typed_value(v)) for k, v in sorted(redact_attributes(device.capacities, user).items())
        ]
        context["consumes_counters"] = redact_tree(device.consumes_counters, user)
        context["parent"] = redact_value("parent", device.parent, user)
        visible = holder_rule(user)
        context["holder_hidden"] = not visible(device.cluster_id, device.claim_namespace)
        uids: list[str] = []
        if device.path == Path.DEVICE_PLUGIN:
            pods = device_plugin_pods(device)
            context["pods"] = [(pod, amount) for pod, amount in pods if visible(pod.cluster_id, pod.namespace)]
            context["other_pods"] = len(pods) - len(context["pods"])
            uids = [pod.uid for pod, _amount in context["pods"]]
        elif device.claim_name and not context["holder_hidden"]:
            uids = holder_claim_uids(device)
        # What the cluster said about the pods (and DRA claim) holding this device: Allocate and prepare failures.
        context["events"] = [e for found in evidence_events(cluster_ids=[device.cluster_id], uids=uids).values()
                             for e in found]
        context["events"].sort(key=lambda e: e.last_seen or device.updated_at, reverse=True)
        return context


def holder_claim_uids(device: Device) -> list[str]:
    """The DRA claim holding the device and the pods it is reserved for (status.reservedFor): whose events count."""
    raw = (ResourceClaim.objects.live().filter(cluster_id=device.cluster_id, namespace=device.claim_namespace,
                                               name=device.claim_name).values_list("uid", "raw").first())
    if raw is None:
        return []
    uid, claim = raw
    reserved = ((claim or {}).get("status") or {}).get("reservedFor") or []
    return [uid, *(str(r.get("uid") or "") for r in reserved if isinstance(r, dict))]


def device_plugin_pods(device: Device) -> list[tuple[Pod, int]]:
    """Live pods on the device's node requesting its extended resource, with the amount (Python filter: SQLite too).
    Of every tenant: the caller shows only those `holder_rule` allows and counts the others. A request the scheduler
    served through a generated DRA claim (DRAExtendedResource) is not this device's: the claim's devices hold it."""
    pods = (
        Pod.objects.live()
        .filter(cluster_id=device.cluster_id, node_name=device.node_name, accelerator=True)
        .only("pk", "cluster_id", "uid", "namespace", "name", "phase", "stage", "extended_requests", "restarts")
        .annotate(claim_status=F("raw__status__extendedResourceClaimStatus"))
        .order_by("namespace", "name")[:NODE_PODS_SCANNED]
    )
    out = []
    for pod in pods:
        requests = pod.extended_requests if isinstance(pod.extended_requests, dict) else {}
        served = pod_claim_served_resources({"status": {"extendedResourceClaimStatus": pod.claim_status}})
        if device.resource_name in requests and device.resource_name not in served:
            out.append((pod, requests[device.resource_name]))
    return out


def _queued(user: Any, filters: dict[str, Any]) -> list[QueuedWorkload]:
    """Kueue Workloads waiting for quota (their Jobs have no pods yet), shown beside the unscheduled pods."""
    if filters.get("stage") not in (None, "", PENDING_STAGES[0][0]):
        return []
    cluster = filters.get("cluster")
    return queued_workloads(user, cluster_id=cluster.pk if cluster is not None else None,
                            namespace=filters.get("namespace") or "")


class PendingPodsView(LoginRequiredMixin, HtmxPartialMixin, FilterView):
    """Accelerator pods that do not run: unscheduled (default), bound but not started, failed after start."""

    model = Pod
    filterset_class = PodFilterSet
    template_name = "inventory/pending_pods.html"
    paginate_by = 50

    def get_filterset_kwargs(self, filterset_class: type[PodFilterSet]) -> dict[str, Any]:
        kwargs = super().get_filterset_kwargs(filterset_class)
        data = kwargs["data"].copy() if kwargs["data"] is not None else QueryDict(mutable=True)
        if data.get("stage") not in {value for value, _label in PENDING_STAGES}:
            data["stage"] = PENDING_STAGES[0][0]  # the page only shows pods that do not run
        kwargs["data"] = data
        return kwargs

    def get_queryset(self) -> QuerySet[Pod]:
        return (
            Pod.objects.live().visible_to(self.request.user)
            .filter(accelerator=True)
            .select_related("cluster")
            .defer("raw", "labels", "cluster__kubeconfig")
            .order_by("k8s_created_at", "namespace", "name", "pk")
        )

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        pods = list(context["page_obj"])
        events = evidence_events(cluster_ids={p.cluster_id for p in pods}, uids=[p.uid for p in pods])
        for pod in pods:
            pod.evidence = events.get(pod.uid, [])
        context["stages"] = PENDING_STAGES
        context["stage"] = self.filterset.form.cleaned_data.get("stage") if self.filterset.is_bound else ""
        context["queued"] = _queued(self.request.user, self.filterset.form.cleaned_data if self.filterset.is_bound
                                    else {})
        return context


class FindingListView(LoginRequiredMixin, HtmxPartialMixin, FilterView):
    model = Finding
    filterset_class = FindingFilterSet
    template_name = "inventory/findings.html"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[Finding]:
        severity_rank = Case(*(When(severity=s, then=Value(i)) for i, s in enumerate(SEVERITY_ORDER)), default=Value(9))
        return (
            Finding.objects.select_related("cluster")
            .defer("cluster__kubeconfig")
            .order_by("cluster__name", severity_rank, "kind", "subject", "pk")
        )

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        context["findings"] = [(f, redact_tree(f.evidence, user)) for f in context["page_obj"]]
        return context
