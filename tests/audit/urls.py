"""A test-only URLconf: one view that records an event, to follow a request's context into the audit log."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.urls import include, path

from audit.services import audit_record


def record_view(request: HttpRequest) -> JsonResponse:
    group, _ = Group.objects.get_or_create(name="via-request")
    with transaction.atomic():
        event = audit_record(actor=request.user, verb="test.via_request", target=group)
    return JsonResponse({"id": event.pk})


urlpatterns = [
    path("record/", record_view),
    path("", include("portal.urls")),
]
