"""Quota pages: a lead's quota and requests, a request's page (decisions, context, actions), the approvers'
queue, the platform admins' oversubscription view, and the inbox."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, UserPassesTestMixin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views import View
from django.views.generic import ListView, TemplateView

from catalog.models import Offering, OfferingCapacity
from core.errors import PortalError
from portal.models import Notification, QuotaNamespaceState, QuotaRequest, TenantMembership, TenantNamespace
from portal.notifications import notifications_read
from portal.quota import (
    MAX_UNITS,
    desired_hards,
    granted_units,
    quota_request_create,
    quota_request_decide,
    quota_request_reduce,
    quota_request_retry,
    quota_request_withdraw,
)
from portal.quota_api import quota_rows, request_context, request_contexts
from portal.roles import Role, user_has_role


class QuotaRequestForm(forms.Form):
    target = forms.ChoiceField(label="Namespace")
    offering = forms.ModelChoiceField(queryset=Offering.objects.browsable().order_by("name"), to_field_name="slug")
    units = forms.IntegerField(min_value=1, max_value=MAX_UNITS, label="Increase by (units)",
                               help_text="Added to what the namespace is granted now.")
    ends_at = forms.DateTimeField(required=False, label="Until (empty: open-ended)",
                                  widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    justification = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=4000)
    over_capacity = forms.BooleanField(required=False, label="Beyond physical capacity on purpose",
                                       help_text="Required when the total exceeds the cards the cluster has; say why "
                                                 "in the justification.")

    def __init__(self, user: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        led = list(TenantNamespace.objects.filter(
            tenant__memberships__user=user, tenant__memberships__role=TenantMembership.Role.LEAD
        ).select_related("cluster").order_by("cluster__name", "namespace"))
        self.fields["target"].choices = [(f"{tn.cluster_id}/{tn.namespace}", f"{tn.cluster.name} / {tn.namespace}")
                                         for tn in led]
        self.figures = _figures(led, list(self.fields["offering"].queryset))
        self.figures_json = json.dumps(self.figures)  # read by portal.js (a data attribute: no inline script)

    def clean(self) -> dict[str, Any]:
        """The resulting total against physical capacity: beyond it only when the lead says so on purpose."""
        values = super().clean()
        target, offering, units = values.get("target"), values.get("offering"), values.get("units")
        if target is None or offering is None or units is None:
            return values
        total = self.figures["granted"].get(f"{target}|{offering.slug}", 0) + units
        physical = self.figures["physical"].get(f"{target.split('/', 1)[0]}|{offering.slug}")
        if physical and total > physical and not values.get("over_capacity"):
            self.add_error("over_capacity", f"{total:,} units in total exceed the {physical:,} physical units of "
                                            f"{offering.name} in this cluster: tick this and say why in the "
                                            "justification, or ask for fewer.")
        return values


def _figures(led: list[TenantNamespace], offerings: list[Offering]) -> dict[str, dict[str, int]]:
    """For the form's live total: units granted per (namespace, offering) and physical units per (cluster,
    offering) from the last capacity recomputation."""
    granted: dict[str, int] = {}
    hards = desired_hards((tn.cluster_id, tn.namespace) for tn in led)
    for tn in led:
        hard = hards[(tn.cluster_id, tn.namespace)]
        for offering in offerings:
            granted[f"{tn.cluster_id}/{tn.namespace}|{offering.slug}"] = granted_units(tn.cluster_id, offering, hard)
    physical = {f"{row.cluster_id}|{row.offering.slug}": row.quota_capacity for row in OfferingCapacity.objects.filter(
        cluster_id__in={tn.cluster_id for tn in led}).select_related("offering") if row.quota_capacity}
    return {"granted": granted, "physical": physical}


class QuotaView(LoginRequiredMixin, TemplateView):
    template_name = "portal/quota.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        context["rows"] = quota_rows(user)
        context["form"] = kwargs.get("form") or QuotaRequestForm(user)
        context["requests"] = QuotaRequest.objects.visible_to(user).select_related("offering", "cluster")[:50]
        context["cluster_states"] = QuotaNamespaceState.objects.visible_to(user).select_related("cluster")
        context["is_approver"] = user_has_role(user, Role.APPROVER) or user_has_role(user, Role.PLATFORM_ADMIN)
        return context

    def post(self, request: HttpRequest) -> HttpResponse:
        form = QuotaRequestForm(request.user, request.POST)
        if form.is_valid():
            cluster_id, namespace = form.cleaned_data["target"].split("/", 1)
            try:
                created = quota_request_create(
                    actor=request.user, cluster_id=int(cluster_id), namespace=namespace,
                    offering_id=form.cleaned_data["offering"].pk, units=form.cleaned_data["units"],
                    ends_at=form.cleaned_data.get("ends_at"), justification=form.cleaned_data["justification"])
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
            and quota_request.requested_by_id != request.user.pk and quota_request.state == "submitted",
            "can_retry": quota_request.state == "failed" and (user_has_role(request.user, Role.APPROVER)
                                                              or user_has_role(request.user, Role.PLATFORM_ADMIN)),
            "can_withdraw": quota_request.requested_by_id == request.user.pk
            and quota_request.state in ("draft", "submitted"),
            "can_reduce": quota_request.state == "active" and TenantMembership.objects.filter(
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
        return QuotaRequest.objects.filter(state__in=["submitted", "failed"]).select_related(
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


class InboxView(LoginRequiredMixin, ListView):
    template_name = "portal/inbox.html"
    context_object_name = "notifications"
    paginate_by = 50

    def get_queryset(self) -> QuerySet[Notification]:
        return Notification.objects.filter(user=self.request.user)

    def post(self, request: HttpRequest) -> HttpResponse:
        Notification.objects.filter(user=request.user, read_at__isnull=True).update(read_at=timezone.now())
        return redirect("portal:inbox")


class InboxUnreadView(LoginRequiredMixin, View):
    """The nav's unread badge, loaded lazily so pages do not pay a query for it."""

    def get(self, request: HttpRequest) -> HttpResponse:
        unread = Notification.objects.filter(user=request.user, read_at__isnull=True).count()
        if not unread:
            return HttpResponse("")
        return HttpResponse(f'<span class="badge" data-testid="inbox-unread">{unread}</span>')
