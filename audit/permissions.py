"""Who may read the audit log: superusers and members of PORTAL_AUDIT_READER_GROUPS (group names, so that this
app needs no import of portal.tenancy.roles)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.mixins import LoginRequiredMixin, UserPassesTestMixin
from django.http import HttpRequest
from rest_framework.permissions import BasePermission

from core.identity import in_any_group
from core.types import RequestUser

DEFAULT_READER_GROUPS = ("platform-admin", "finance")
# The nav link reads this session flag instead of querying groups on every page; it is set at login and refreshed
# whenever an audit page checks the real permission. Access itself is always checked against the database.
SESSION_FLAG = "audit_reader"


def reader_groups() -> list[str]:
    return list(getattr(settings, "PORTAL_AUDIT_READER_GROUPS", DEFAULT_READER_GROUPS))


def is_audit_reader(user: RequestUser) -> bool:
    return in_any_group(user, reader_groups())


def remember_reader(request: HttpRequest, reader: bool) -> None:
    session = getattr(request, "session", None)
    if session is not None and session.get(SESSION_FLAG) is not reader:
        session[SESSION_FLAG] = reader


def nav_visible(request: HttpRequest) -> bool:
    """Whether to show the Audit nav link (no query for superusers or once the session knows)."""
    user: RequestUser | None = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return False
    if getattr(user, "is_superuser", False):
        return True
    session = getattr(request, "session", None)
    if session is not None and isinstance(session.get(SESSION_FLAG), bool):
        return bool(session[SESSION_FLAG])
    reader = is_audit_reader(user)
    remember_reader(request, reader)
    return reader


class AuditReaderRequiredMixin(LoginRequiredMixin, UserPassesTestMixin):
    """Anonymous users go to the login page; signed-in users who are not audit readers get 403."""

    request: HttpRequest
    raise_exception = False

    def test_func(self) -> bool:
        reader = is_audit_reader(self.request.user)
        remember_reader(self.request, reader)
        return reader


class IsAuditReader(BasePermission):
    message = "Only audit readers may read the audit log."

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_audit_reader(request.user)
