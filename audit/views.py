"""Audit log pages: a filtered list (htmx partial `#results`), an event's detail with its chain links, and a
"verify chain" action. Audit readers only (audit.permissions). Nothing here writes: verifying only reads."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views import View
from django.views.generic import DetailView
from django_filters.views import FilterView

from audit.chain import GENESIS, content_problem
from audit.checkpoints import CheckpointResult, checkpoints_verify_stored, verification_keys
from audit.errors import CheckpointKeyMissingError
from audit.filtersets import AuditEventFilterSet
from audit.models import AuditCheckpoint, AuditEvent
from audit.permissions import AuditReaderRequiredMixin
from audit.services import audit_verify
from core.htmx import HtmxPartialMixin, partial_template

LIST_COLUMNS = ("id", "occurred_at", "actor_id", "actor_name", "actor_kind", "verb", "target_type", "target_id",
                "target_repr", "request_id", "source_address")


class AuditEventListView(AuditReaderRequiredMixin, HtmxPartialMixin, FilterView):
    model = AuditEvent
    filterset_class = AuditEventFilterSet
    template_name = "audit/event_list.html"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[AuditEvent]:
        return AuditEvent.objects.only(*LIST_COLUMNS).order_by("-id")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["last_checkpoint"] = AuditCheckpoint.objects.order_by("-id").first()
        # the verb field's choice list (a <datalist>: typing still filters by substring)
        context["verbs"] = list(AuditEvent.objects.order_by("verb").values_list("verb", flat=True).distinct()[:300])
        return context


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


class AuditEventDetailView(AuditReaderRequiredMixin, DetailView):
    model = AuditEvent
    template_name = "audit/event_detail.html"
    context_object_name = "event"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        event: AuditEvent = self.object
        context.update(
            data_json=_pretty(event.data),
            before_json=None if event.before is None else _pretty(event.before),
            after_json=None if event.after is None else _pretty(event.after),
            is_genesis=event.prev_hash == GENESIS,
            previous=AuditEvent.objects.filter(hash=event.prev_hash).only("id", "verb").first(),
            # The row stored after it (primary-key lookup; prev_hash has no index), flagged if it does not link here.
            next=AuditEvent.objects.filter(id__gt=event.id).order_by("id").only("id", "verb", "prev_hash").first(),
            stored_before=AuditEvent.objects.filter(id__lt=event.id).order_by("-id").values_list("id", flat=True)
            .first(),
            content_problem=content_problem(event),
        )
        return context


class AuditVerifyView(AuditReaderRequiredMixin, View):
    """POST: recompute the chain and check the stored checkpoints; answers the `#verify-result` fragment to htmx."""

    template_name = "audit/verify.html"
    http_method_names = ["post"]

    def post(self, request: HttpRequest) -> HttpResponse:
        report = audit_verify()
        results: list[CheckpointResult] = []
        key_problem = ""
        try:
            results = checkpoints_verify_stored(keys=verification_keys())
        except CheckpointKeyMissingError as exc:
            key_problem = str(exc)  # names the setting, never its value
        failed = [r for r in results if not r.ok]
        context = {"report": report, "checkpoints": results, "failed_checkpoints": failed,
                   "key_problem": key_problem, "intact": report.intact and not failed}
        return render(request, partial_template(request, self.template_name, "verify-result"), context)
