"""Account protections: the Django admin for platform admins only, and a login throttle against password guessing."""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

from portal.roles import Role


def admin_has_permission(request: HttpRequest) -> bool:
    """The admin site's gate: active staff who are superusers or platform admins (staff alone is not enough)."""
    user = request.user
    if not (user.is_active and user.is_staff):
        return False
    return user.is_superuser or user.groups.filter(name=Role.PLATFORM_ADMIN.value).exists()


def _keys(request: HttpRequest, username: str) -> list[str]:
    address = request.META.get("REMOTE_ADDR", "")
    digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:16]
    return [f"login-fail:addr:{address}", f"login-fail:user:{digest}"]


class ThrottledLoginView(auth_views.LoginView):
    """Counts failed logins per client address and per username (hashed); past PORTAL_LOGIN_MAX_FAILURES within
    PORTAL_LOGIN_WINDOW_SECONDS further attempts get 429 until the window passes. A success clears the username's
    count. The counters live in the shared cache (Redis in production)."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        limit = getattr(settings, "PORTAL_LOGIN_MAX_FAILURES", 10)
        keys = _keys(request, request.POST.get("username", ""))
        if any((cache.get(key) or 0) >= limit for key in keys):
            response = HttpResponse("Too many failed logins; try again later.\n", status=429,
                                    content_type="text/plain")
            response["Retry-After"] = str(getattr(settings, "PORTAL_LOGIN_WINDOW_SECONDS", 900))
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        window = getattr(settings, "PORTAL_LOGIN_WINDOW_SECONDS", 900)
        for key in _keys(self.request, self.request.POST.get("username", "")):
            if not cache.add(key, 1, timeout=window):
                try:
                    cache.incr(key)
                except ValueError:  # expired between add and incr
                    cache.add(key, 1, timeout=window)
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        cache.delete(_keys(self.request, self.request.POST.get("username", ""))[1])
        return super().form_valid(form)
