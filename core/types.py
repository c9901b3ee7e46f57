"""Types shared by every app."""

from __future__ import annotations

from typing import TypeAlias

from django.contrib.auth.models import AnonymousUser, User
from django.http import HttpRequest

# Whoever asks: `request.user`, signed in (the project's user model, Django's default `auth.User`) or anonymous.
# Pages, APIs, selectors and services that act for a request take this; `RequestUser | None` where the system may
# act without anybody (a command, a beat task): the audit log records those as "system".
RequestUser: TypeAlias = User | AnonymousUser


class AuthenticatedHttpRequest(HttpRequest):
    """The request of a view behind LoginRequiredMixin (or login_required): its user is signed in."""

    user: User
