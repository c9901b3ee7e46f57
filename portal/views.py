"""Tenant pages: who is in which team, and which namespaces of which cluster the team owns (and why)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.mixins import LoginRequiredMixin
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views import defaults
from django.views.generic import DetailView, ListView

from portal.models import NamespaceLabelRule, Tenant, sees_all_tenants
from portal.roles import Role, user_has_role

# Where each role's work is, in the order a user with several roles lands: the platform admin on the overview, an
# approver on the queue, finance on the statements; everyone else (tenants) on the catalog.
LANDING = (
    (Role.PLATFORM_ADMIN, "inventory:overview"),
    (Role.APPROVER, "portal:quota_queue"),
    (Role.SECURITY_APPROVER, "portal:access_queue"),
    (Role.FINANCE, "portal:chargeback"),
)


def landing_url_name(user: Any) -> str:
    for role, url_name in LANDING:
        if user_has_role(user, role):
            return url_name
    return "catalog:offering_list"


def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page's <link rel=icon> says."""
    from django.templatetags.static import static

    return redirect(static("favicon.svg"), permanent=True)


def home(request: HttpRequest) -> HttpResponse:
    """`/` and the page after logging in: where the user's work is."""
    if not request.user.is_authenticated:
        return redirect("login")
    return redirect(landing_url_name(request.user))


class TenantListView(LoginRequiredMixin, ListView):
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


class TenantDetailView(LoginRequiredMixin, DetailView):
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


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: API clients get DRF's JSON error (e.g. `/api/v1/quota-requests/1.5/approve/` matches no route),
    people the HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)
