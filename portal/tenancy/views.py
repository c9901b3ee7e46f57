"""Tenant pages: who is in which team, and which namespaces of which cluster the team owns (and why)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.db.models import Count, QuerySet
from django.views.generic import DetailView, ListView

from portal.tenancy.models import NamespaceLabelRule, Tenant, sees_all_tenants


class TenantListView(LoginRequiredMixin, ListView):  # type: ignore[type-arg]  # no runtime generics (no django-stubs-ext)
    template_name = "portal/tenant_list.html"
    context_object_name = "tenants"

    def get_queryset(self) -> QuerySet[Tenant]:
        return Tenant.objects.visible_to(self.request.user).annotate(
            members=Count("memberships", distinct=True), namespace_count=Count("namespaces", distinct=True))

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["rules"] = NamespaceLabelRule.objects.select_related("cluster").order_by("cluster__name")
        context["sees_all"] = sees_all_tenants(self.request.user)
        return context


class TenantDetailView(LoginRequiredMixin, DetailView):  # type: ignore[type-arg]
    template_name = "portal/tenant_detail.html"
    slug_field = "slug"
    context_object_name = "tenant"

    def get_queryset(self) -> QuerySet[Tenant]:  # another tenant's page answers 404
        return Tenant.objects.visible_to(self.request.user).prefetch_related("memberships__user")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["namespaces"] = self.object.namespaces.select_related("cluster").order_by("cluster__name",
                                                                                            "namespace")
        return context
