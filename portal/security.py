"""Account protections: the Django admin for platform admins only, and a login throttle against password guessing.

The throttle counts failed password checks in the shared cache (Redis in production) under two keys:

- (client, username): `PORTAL_LOGIN_MAX_FAILURES` (10) failures within `PORTAL_LOGIN_WINDOW_SECONDS` (900) lock that
  username *from that client*; somebody else typing a wrong password for alice cannot lock alice out from her own
  machine, and two users behind the same proxy never share a bucket;
- client: `PORTAL_LOGIN_MAX_FAILURES_PER_CLIENT` (100) failures within the window lock the client for every
  username (one address spraying a common password over many accounts).

"Client" is the real client address: REMOTE_ADDR, or behind `PORTAL_TRUSTED_PROXIES` the address the trusted proxies
put in X-Forwarded-For (`audit.context.client_address`, the rule the audit log uses). An untrusted peer's
X-Forwarded-For is ignored, so a client cannot pick a fresh bucket per attempt.

Every password check goes through `authenticate()`, and so through `ThrottledModelBackend` (AUTHENTICATION_BACKENDS)
and the `user_login_failed` signal: the login page, the admin's login page and any future password path are counted
and refused alike. The two login pages answer a throttled POST with 429 and Retry-After before checking the password.
The API takes no passwords (tokens and sessions only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import User
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

from audit.context import client_address
from core.identity import in_any_group
from portal.tenancy.roles import Role


def admin_has_permission(request: HttpRequest) -> bool:
    """The admin site's gate: active staff who are superusers or platform admins (staff alone is not enough)."""
    user = request.user
    if not (user.is_active and user.is_staff):
        return False
    return in_any_group(user, (Role.PLATFORM_ADMIN.value,))


def _window() -> int:
    return int(getattr(settings, "PORTAL_LOGIN_WINDOW_SECONDS", 900))


def request_client(request: Any) -> str:
    """The real client address of a request (trusted proxies' X-Forwarded-For honoured, anybody else's ignored)."""
    meta = getattr(request, "META", {}) or {}
    return client_address(meta.get("REMOTE_ADDR"), meta.get("HTTP_X_FORWARDED_FOR"),
                          list(getattr(settings, "PORTAL_TRUSTED_PROXIES", [])))


def _limits(request: Any, username: str) -> list[tuple[str, int]]:
    """(cache key, limit) pairs counted for a password check; hashed so neither names nor addresses are cache keys."""
    client = request_client(request) or "unknown"
    name = (username or "").strip().lower()
    pair = hashlib.sha256(f"{client}\x00{name}".encode()).hexdigest()[:32]
    addr = hashlib.sha256(client.encode()).hexdigest()[:32]
    return [(f"login-fail:pair:{pair}", int(getattr(settings, "PORTAL_LOGIN_MAX_FAILURES", 10))),
            (f"login-fail:client:{addr}", int(getattr(settings, "PORTAL_LOGIN_MAX_FAILURES_PER_CLIENT", 100)))]


def login_throttled(request: Any, username: str) -> bool:
    """Whether password checks for `username` from this request's client are refused for now."""
    return any((cache.get(key) or 0) >= limit for key, limit in _limits(request, username))


def login_failure_record(request: Any, username: str) -> None:
    window = _window()
    for key, _limit in _limits(request, username):
        if not cache.add(key, 1, timeout=window):
            try:
                cache.incr(key)
            except ValueError:  # expired between add and incr
                cache.add(key, 1, timeout=window)


def login_success_record(request: Any, username: str) -> None:
    """A successful login clears its (client, username) count; the client's count stays (spraying)."""
    cache.delete(_limits(request, username)[0][0])


def too_many_attempts() -> HttpResponse:
    response = HttpResponse("Too many failed logins; try again later.\n", status=429, content_type="text/plain")
    response["Retry-After"] = str(_window())
    return response


class ThrottledModelBackend(ModelBackend):
    """Django's model backend, refusing any password check (whichever view asks) while its client and username are
    throttled: PermissionDenied stops `authenticate()` without checking the password."""

    def authenticate(self, request: Any, username: str | None = None, password: str | None = None,
                     **kwargs: Any) -> Any:
        if username is None:
            username = kwargs.get(self._username_field(), "")
        if request is not None and login_throttled(request, username or ""):
            raise PermissionDenied("too many failed logins")
        return super().authenticate(request, username=username, password=password, **kwargs)

    @staticmethod
    def _username_field() -> str:
        from django.contrib.auth import get_user_model

        return get_user_model().USERNAME_FIELD


@receiver(user_login_failed, dispatch_uid="portal.security.login_failed")
def _count_failure(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    if request is not None:
        login_failure_record(request, str(credentials.get("username", "")))


@receiver(user_logged_in, dispatch_uid="portal.security.logged_in")
def _clear_on_success(sender: Any, request: Any, user: User, **kwargs: Any) -> None:
    if request is not None and user is not None:
        login_success_record(request, user.get_username())


def throttle_login_posts(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap a login view: a POST whose client and username are throttled answers 429 before any password check."""

    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST" and login_throttled(request, request.POST.get("username", "")):
            return too_many_attempts()
        return view(request, *args, **kwargs)

    wrapped.__name__ = getattr(view, "__name__", "login")
    wrapped.__doc__ = view.__doc__
    return wrapped


class ThrottledLoginView(auth_views.LoginView):
    """The login page; failures are counted by the `user_login_failed` signal (module docstring), and a throttled
    POST answers 429 with Retry-After."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if login_throttled(request, request.POST.get("username", "")):
            return too_many_attempts()
        return super().post(request, *args, **kwargs)
