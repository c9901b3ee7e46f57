"""Quota pages: a lead's quota and requests, a request's page (decisions, context, actions), the approvers'
queue, the platform admins' oversubscription view, and the inbox."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, UserPassesTestMixin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views import View
from django.views.generic import ListView, TemplateView

from catalog.models import OfferingCapacity
from core.errors import PortalError
from portal.notifications.services import notifications_read
from portal.quota.forms import QuotaRequestForm
from portal.quota.models import WITHDRAWABLE, QuotaNamespaceState, QuotaRequest
from portal.quota.selectors import queue_rows, queue_states, quota_rows, request_context, request_contexts
from portal.quota.services import (
    quota_request_create,
    quota_request_decide,
    quota_request_reduce,
    quota_request_retry,
    quota_request_withdraw,
)
from portal.tenancy.models import TenantMembership
from portal.tenancy.roles import Role, user_has_role


class QuotaView(LoginRequiredMixin, TemplateView):
    template_name = "portal/quota.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        context["rows"] = quota_rows(user)
        context["form"] = kwargs.get("form") or QuotaRequestForm(user)
        context["requests"] = QuotaRequest.objects.visible_to(user).select_related("offering", "cluster")[:50]
        context["cluster_states"] = QuotaNamespaceState.objects.visible_to(user).select_related("cluster")
        context["queue_rows"] = queue_rows(user)
        context["queue_states"] = queue_states({(r["cluster"], r["cluster_queue"]) for r in context["queue_rows"]})
        context["is_approver"] = user_has_role(user, Role.APPROVER) or user_has_role(user, Role.PLATFORM_ADMIN)
        return context

    def post(self, request: HttpRequest) -> HttpResponse:
        form = QuotaRequestForm(request.user, request.POST)
        if form.is_valid():
            cluster_id, namespace = form.cleaned_data["target"].split("/", 1)
            queue, _, flavor = (form.cleaned_data.get("queue") or "").partition("|")
            try:
                created = quota_request_create(
                    actor=request.user, cluster_id=int(cluster_id), namespace=namespace,
                    offering_id=form.cleaned_data["offering"].pk, units=form.cleaned_data["units"],
                    ends_at=form.cleaned_data.get("ends_at"), justification=form.cleaned_data["justification"],
                    cluster_queue=queue, flavor=flavor)
            except PortalError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Quota request #{created.pk} submitted for approval.")
                return redirect("portal:quota_request_detail", pk=created.pk)
        return self.render_to_response(self.get_context_data(form=form))


# States the workers or other approvers move on without the viewer: the page polls its badge until it leaves them.
LIVE_STATES = frozenset({QuotaRequest.State.SUBMITTED, QuotaRequest.State.APPROVED, QuotaRequest.State.APPLYING,
                         QuotaRequest.State.FAILED})


class QuotaRequestDetailView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        quota_request = get_object_or_404(QuotaRequest.objects.visible_to(request.user).select_related(
            "offering", "cluster", "tenant", "requested_by"), pk=pk)
        return render(request, "portal/quota_request.html", {
            "qr": quota_request, "context": request_context(quota_request),
            "qr_live": quota_request.state in LIVE_STATES,
            "decisions": quota_request.decisions.select_related("approver"),
            "can_decide": user_has_role(request.user, Role.APPROVER)
            and quota_request.requested_by_id != request.user.pk and quota_request.state == QuotaRequest.State.SUBMITTED,
            "can_retry": quota_request.state == QuotaRequest.State.FAILED and (user_has_role(request.user, Role.APPROVER)
                                                              or user_has_role(request.user, Role.PLATFORM_ADMIN)),
            "can_withdraw": quota_request.requested_by_id == request.user.pk
            and quota_request.state in WITHDRAWABLE,
            "can_reduce": quota_request.state == QuotaRequest.State.ACTIVE and TenantMembership.objects.filter(
                tenant=quota_request.tenant, user=request.user, role=TenantMembership.Role.LEAD).exists(),
        })

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        quota_request = get_object_or_404(QuotaRequest.objects.visible_to(request.user), pk=pk)
        action = request.POST.get("action")
        comment = request.POST.get("comment", "")[:4000]
        try:
            if action in ("approve", "deny"):
                quota_request_decide(actor=request.user, request_id=quota_request.pk, approve=action == "approve",
                                     comment=comment)
            elif action == "withdraw":
                quota_request_withdraw(actor=request.user, request_id=quota_request.pk)
            elif action == "retry":
                quota_request_retry(actor=request.user, request_id=quota_request.pk)
            elif action == "reduce":
                try:
                    units = int(request.POST.get("units", ""))
                except ValueError:
                    messages.error(request, "Give the new number of units.")
                    return redirect("portal:quota_request_detail", pk=pk)
                quota_request_reduce(actor=request.user, request_id=quota_request.pk, units=units, reason=comment)
            else:
                messages.error(request, "Unknown action.")
                return redirect("portal:quota_request_detail", pk=pk)
        except PortalError as exc:
            messages.error(request, str(exc))
        else:
            notifications_read(request.user, reverse("portal:quota_request_detail", kwargs={"pk": pk}))
            messages.success(request, f"Request #{pk}: {action} recorded.")
        return redirect("portal:quota_request_detail", pk=pk)


class ApproverRequiredMixin(LoginRequiredMixin, UserPassesTestMixin):
    def test_func(self) -> bool:
        return user_has_role(self.request.user, Role.APPROVER) or user_has_role(self.request.user,
                                                                                Role.PLATFORM_ADMIN)


class ApprovalQueueView(ApproverRequiredMixin, ListView):
    template_name = "portal/quota_queue.html"
    context_object_name = "pending"

    def get_queryset(self) -> QuerySet[QuotaRequest]:
        return QuotaRequest.objects.filter(state__in=[QuotaRequest.State.SUBMITTED, QuotaRequest.State.FAILED]).select_related(
            "offering", "cluster", "tenant", "requested_by").order_by("created_at")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        pending = list(context["pending"])
        contexts = request_contexts(pending)
        context["rows"] = [(r, contexts[r.pk]) for r in pending]
        context["cluster_states"] = QuotaNamespaceState.objects.exclude(
            status=QuotaNamespaceState.Status.IN_SYNC).select_related("cluster")
        return context


class OversubscriptionView(ApproverRequiredMixin, TemplateView):
    """Granted quota against physical capacity, per offering and cluster (from the capacity recomputation)."""

    template_name = "portal/oversubscription.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        rows = OfferingCapacity.objects.select_related("offering", "cluster").filter(
            granted_quota__isnull=False).order_by("cluster__name", "offering__name")
        context["rows"] = sorted(rows, key=lambda r: -(r.oversubscription or 0))
        return context
