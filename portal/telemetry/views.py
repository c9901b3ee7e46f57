"""Utilisation pages: "your GPUs right now" (live, each held unit with its last hour as a sparkline and an idle
flag, plus the findings the user may see), a device's telemetry history and an offering's utilisation history
(from the hourly rollups). Server-rendered SVG, no script."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.views.generic import TemplateView

from catalog.models import Offering
from inventory.models import Cluster, Device
from portal.telemetry.models import TelemetrySource
from portal.telemetry.selectors import (
    device_history,
    findings_visible_to,
    namespaces_visible_to,
    rollups_visible_to,
    sparkline_hours,
    summarize,
)
from portal.telemetry.services import live_units, sparkline
from portal.tenancy.models import sees_all_tenants


class MyGpusView(LoginRequiredMixin, TemplateView):
    template_name = "portal/utilization.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        clusters = []
        for cluster in Cluster.objects.order_by("name"):
            namespaces = namespaces_visible_to(user, cluster.pk)
            if namespaces is not None and not namespaces:
                continue
            units, problem = live_units(cluster, namespaces=namespaces)
            for unit in units:
                unit["points"] = sparkline(unit["series"])
            source = TelemetrySource.objects.filter(cluster=cluster).first()
            clusters.append({"cluster": cluster, "units": units, "problem": problem, "source": source,
                             "idle": sum(1 for u in units if u["idle"])})
        context.update({"clusters": clusters, "findings": findings_visible_to(user).order_by("kind", "subject"),
                        "sees_all": sees_all_tenants(user)})
        return context


class DeviceUtilizationPage(LoginRequiredMixin, TemplateView):
    template_name = "portal/device_utilization.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        device = get_object_or_404(Device, pk=kwargs["pk"])
        end = timezone.now()
        rows = device_history(self.request.user, device, end - dt.timedelta(hours=48), end)
        context.update({"device": device, "rows": list(reversed(rows)),
                        "points": sparkline(sparkline_hours(rows), width=480, height=60)})
        return context


class OfferingUtilizationPage(LoginRequiredMixin, TemplateView):
    template_name = "portal/offering_utilization.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        offering = get_object_or_404(Offering, slug=kwargs["slug"])
        end = timezone.now()
        rows = rollups_visible_to(self.request.user, end - dt.timedelta(days=7), end).filter(offering=offering)
        hours = summarize(rows, ("hour",))
        context.update({"offering": offering, "hours": list(reversed(hours)),
                        "points": sparkline([h["util_mean"] or 0.0 for h in hours], width=480, height=60),
                        "by_tenant": summarize(rows, ("tenant",))})
        return context
