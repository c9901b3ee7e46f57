"""Project-wide pages: where `/` sends each role, the favicon redirect, and the 404 handler (JSON under /api/)."""

from __future__ import annotations

from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views import defaults

from portal.tenancy.roles import Role, user_has_role

# Where each role's work is, in the order a user with several roles lands: the platform admin on the overview, an
# approver on the queue, finance on the statements; everyone else (tenants) on the catalog.
LANDING = (
    (Role.PLATFORM_ADMIN, "inventory:overview"),
    (Role.APPROVER, "portal:quota_queue"),
    (Role.SECURITY_APPROVER, "portal:access_queue"),
    (Role.FINANCE, "portal:chargeback"),
)


def landing_url_name(user: User | AnonymousUser) -> str:
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


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: API clients get DRF's JSON error (e.g. `/api/v1/quota-requests/1.5/approve/` matches no route),
    people the HTML page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)
