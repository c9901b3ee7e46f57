"""The inbox page and the navigation's unread badge."""

from __future__ import annotations

from django.contrib.auth.mixins import LoginRequiredMixin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views import View
from django.views.generic import ListView

from portal.notifications.models import Notification


class InboxView(LoginRequiredMixin, ListView):  # type: ignore[type-arg]  # no runtime generics (no django-stubs-ext)
    template_name = "portal/inbox.html"
    context_object_name = "notifications"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[Notification]:
        return Notification.objects.filter(user=self.request.user)  # type: ignore[misc]  # logged in: a User

    def post(self, request: HttpRequest) -> HttpResponse:
        unread = Notification.objects.filter(user=request.user, read_at__isnull=True)  # type: ignore[misc]  # a User
        unread.update(read_at=timezone.now())
        return redirect("portal:inbox")


class InboxUnreadView(LoginRequiredMixin, View):
    """The nav's unread badge, loaded lazily so pages do not pay a query for it."""

    def get(self, request: HttpRequest) -> HttpResponse:
        unread = Notification.objects.filter(user=request.user, read_at__isnull=True).count()  # type: ignore[misc]
        if not unread:
            return HttpResponse("")
        return HttpResponse(f'<span class="badge" data-testid="inbox-unread">{unread}</span>')
