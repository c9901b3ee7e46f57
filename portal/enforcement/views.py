"""Enforcement pages: the violations list, and the admission policy manifests to download for clusters where the
portal may not write them."""

from __future__ import annotations

from typing import Any

import yaml
from django.contrib.auth.mixins import LoginRequiredMixin, UserPassesTestMixin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.views import View
from django.views.generic import ListView

from inventory.models import Cluster
from portal.enforcement.models import Violation
from portal.enforcement.selectors import visible_violations
from portal.enforcement.services import privileged_documents
from portal.tenancy.roles import Role, user_has_role


class ViolationListView(LoginRequiredMixin, ListView):  # type: ignore[type-arg]  # no runtime generics
    template_name = "portal/violations.html"
    context_object_name = "violations"
    paginate_by = 100

    def get_queryset(self) -> QuerySet[Violation]:
        violations = visible_violations(self.request.user)
        if self.request.GET.get("all") != "1":
            violations = violations.filter(resolved_at__isnull=True)
        return violations.order_by("resolved_at", "-first_seen_at")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["show_all"] = self.request.GET.get("all") == "1"
        context["clusters"] = Cluster.objects.all() if user_has_role(self.request.user, Role.PLATFORM_ADMIN) else []
        return context


class PolicyManifestView(LoginRequiredMixin, UserPassesTestMixin, View):
    """The privileged enforcement objects of one cluster as multi-document YAML (apply with kubectl where the
    portal may not write them)."""

    def test_func(self) -> bool:
        return user_has_role(self.request.user, Role.PLATFORM_ADMIN)

    def get(self, request: HttpRequest, name: str) -> HttpResponse:
        cluster = get_object_or_404(Cluster, name=name)
        documents = privileged_documents(cluster.pk, timezone.now())
        body = yaml.safe_dump_all(documents, sort_keys=False)
        response = HttpResponse(body, content_type="application/yaml")
        response["Content-Disposition"] = f'attachment; filename="accelerator-portal-privileged-{cluster.pk}.yaml"'
        return response
