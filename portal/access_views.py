"""Exception pages: request an exception and see one's requests and grants, a request's page (reviews, grant, uses,
violations, audit trail, actions), the security approvers' queue, break-glass, violations, and the admission policy
manifests to download for clusters where the portal may not write them."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import yaml
from django import forms
from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, UserPassesTestMixin
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views import View
from django.views.generic import ListView, TemplateView

from audit.models import AuditEvent
from core.errors import PortalError
from inventory.models import Cluster
from portal.access import (
    IN_FORCE,
    access_policy,
    access_request_create,
    access_request_review,
    access_request_withdraw,
    break_glass_grant,
    grant_revoke,
    reviewable_by,
)
from portal.access_api import visible_violations
from portal.enforcement import privileged_documents
from portal.formatting import duration_text
from portal.models import AccessKind, AccessRequest, Grant, TenantMembership, TenantNamespace, Violation
from portal.notifications import notifications_read
from portal.roles import Role, user_has_role


def _targets(queryset: QuerySet[TenantNamespace]) -> list[tuple[str, str]]:
    return [(f"{tn.cluster_id}/{tn.namespace}", f"{tn.cluster.name} / {tn.namespace}")
            for tn in queryset.select_related("cluster").order_by("cluster__name", "namespace")]


class AccessRequestForm(forms.Form):
    kind = forms.ChoiceField(choices=AccessKind.choices)
    target = forms.ChoiceField(label="Namespace")
    service_account = forms.CharField(required=False, max_length=253, help_text="Privileged only.")
    workload = forms.CharField(required=False, max_length=63, label="Workload (app.kubernetes.io/name, optional)")
    window_hours = forms.DecimalField(label="Window (hours)", min_value=0.1, max_value=8784, decimal_places=2)
    starts_at = forms.DateTimeField(required=False, label="Starts (empty: when approved)",
                                    widget=forms.DateTimeInput(attrs={"type": "datetime-local"}))
    ticket_ref = forms.CharField(max_length=120, label="Ticket reference")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=4000)

    def __init__(self, targets: list[tuple[str, str]], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["target"].choices = targets
        # The limits are said before submit: the window's maximum per kind (policy), the service account only for
        # privileged (portal.js disables it for adminAccess and swaps the maximum when the kind changes).
        self.max_hours = {kind: access_policy(kind).max_window.total_seconds() / 3600 for kind in AccessKind.values}
        limits = "; ".join(f"{AccessKind(kind).label}: at most {duration_text(dt.timedelta(hours=hours))}"
                           for kind, hours in self.max_hours.items())
        window = self.fields["window_hours"]
        window.help_text = limits
        window.widget.attrs.update({"data-max-hours": json.dumps(self.max_hours), "step": "any",
                                    "max": f"{max(self.max_hours.values()):g}"})
        self.fields["kind"].widget.attrs["data-controls"] = "access-scope"
        self.fields["service_account"].help_text = "Privileged only: adminAccess covers the whole namespace."
        self.fields["workload"].help_text = "Privileged only."

    def clean(self) -> dict[str, Any]:
        values = super().clean()
        kind, hours = values.get("kind"), values.get("window_hours")
        if kind in self.max_hours and hours is not None and float(hours) > self.max_hours[kind]:
            limit = duration_text(dt.timedelta(hours=self.max_hours[kind]))
            self.add_error("window_hours", f"{AccessKind(kind).label} is granted for at most {limit}.")
        return values

    def service_kwargs(self) -> dict[str, Any]:
        values = self.cleaned_data
        cluster_id, namespace = values["target"].split("/", 1)
        return {"kind": values["kind"], "cluster_id": int(cluster_id), "namespace": namespace,
                "service_account": values["service_account"], "workload": values["workload"],
                "window": dt.timedelta(hours=float(values["window_hours"])), "ticket_ref": values["ticket_ref"],
                "reason": values["reason"]}


def _is_reviewer(user: Any) -> bool:
    return user_has_role(user, Role.SECURITY_APPROVER) or user_has_role(user, Role.PLATFORM_ADMIN)


class AccessView(LoginRequiredMixin, TemplateView):
    template_name = "portal/access.html"

    def _form(self, data: Any = None) -> AccessRequestForm:
        owned = TenantNamespace.objects.filter(tenant__memberships__user=self.request.user)
        return AccessRequestForm(_targets(owned), data)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        context["form"] = kwargs.get("form") or self._form()
        context["requests"] = AccessRequest.objects.visible_to(user).select_related("cluster", "grant",
                                                                                     "requested_by")[:50]
        context["grants"] = Grant.objects.visible_to(user).filter(state__in=IN_FORCE).select_related("cluster")
        context["is_reviewer"] = _is_reviewer(user)
        context["is_admin"] = user_has_role(user, Role.PLATFORM_ADMIN)
        return context

    def post(self, request: HttpRequest) -> HttpResponse:
        form = self._form(request.POST)
        if form.is_valid():
            starts_at = form.cleaned_data.get("starts_at")
            try:
                created = access_request_create(actor=request.user, starts_at=starts_at, **form.service_kwargs())
            except PortalError as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Access request #{created.pk} submitted for security review.")
                return redirect(created)
        return self.render_to_response(self.get_context_data(form=form))


def _trail(access_request: AccessRequest, grant: Grant | None) -> QuerySet[AuditEvent]:
    """Everything recorded about the request, its grant and the violations linked to the grant."""
    condition = Q(target_type="portal.accessrequest", target_id=str(access_request.pk))
    if grant is not None:
        violation_ids = [str(pk) for pk in grant.violations.values_list("pk", flat=True)]
        condition |= Q(target_type="portal.grant", target_id=str(grant.pk))
        condition |= Q(target_type="portal.violation", target_id__in=violation_ids)
    return AuditEvent.objects.filter(condition).order_by("id")


class AccessRequestDetailView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        access_request = get_object_or_404(AccessRequest.objects.visible_to(request.user).select_related(
            "tenant", "cluster", "requested_by"), pk=pk)
        grant = Grant.objects.filter(request=access_request).select_related("ended_by").first()
        user = request.user
        in_force = grant is not None and grant.state in IN_FORCE
        return render(request, "portal/access_request.html", {
            "ar": access_request, "grant": grant, "reviews": access_request.reviews.select_related("reviewer"),
            # polled while other reviewers or the enforcement worker still move them (portal/_live_state.html)
            "ar_live": access_request.state == AccessRequest.State.SUBMITTED,
            "grant_live": grant is not None and grant.state == Grant.State.PENDING,
            "uses": grant.uses.all() if grant else [], "violations": grant.violations.all() if grant else [],
            "trail": _trail(access_request, grant),
            "can_review": reviewable_by(user, access_request),
            "can_withdraw": access_request.requested_by_id == user.pk and access_request.state == "submitted",
            "can_revoke": in_force and _is_reviewer(user),
            "can_extend": in_force and not access_request.break_glass and TenantMembership.objects.filter(
                tenant=access_request.tenant, user=user).exists(),
        })

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        access_request = get_object_or_404(AccessRequest.objects.visible_to(request.user), pk=pk)
        action = request.POST.get("action")
        comment = request.POST.get("comment", "")[:4000]
        target: Any = access_request
        try:
            if action in ("approve", "deny"):
                access_request_review(actor=request.user, request_id=pk, approve=action == "approve", comment=comment)
            elif action == "withdraw":
                access_request_withdraw(actor=request.user, request_id=pk)
            elif action == "revoke":
                grant_revoke(actor=request.user, grant_id=access_request.grant.pk, reason=comment)
            elif action == "extend":
                target = access_request_create(
                    actor=request.user, kind=access_request.kind, cluster_id=access_request.cluster_id,
                    namespace=access_request.namespace, service_account=access_request.service_account,
                    workload=access_request.workload, window=access_request.window,
                    ticket_ref=access_request.ticket_ref, reason=comment or f"Extension of request #{pk}",
                    extends_grant_id=access_request.grant.pk)
            else:
                messages.error(request, "Unknown action.")
                return redirect(access_request)
        except PortalError as exc:
            messages.error(request, str(exc))
            return redirect(access_request)
        notifications_read(request.user, access_request.get_absolute_url())
        messages.success(request, f"Request #{target.pk}: {action} recorded.")
        return redirect(target)


class ReviewerRequiredMixin(LoginRequiredMixin, UserPassesTestMixin):
    def test_func(self) -> bool:
        return _is_reviewer(self.request.user)


class AccessQueueView(ReviewerRequiredMixin, ListView):
    template_name = "portal/access_queue.html"
    context_object_name = "pending"

    def get_queryset(self) -> QuerySet[AccessRequest]:
        return AccessRequest.objects.filter(
            Q(state=AccessRequest.State.SUBMITTED) | Q(break_glass=True, grant__break_glass_review="pending")
        ).select_related("tenant", "cluster", "requested_by").prefetch_related("reviews").order_by("review_due_at")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["grants"] = Grant.objects.filter(state__in=IN_FORCE).select_related("cluster", "request")
        context["now"] = timezone.now()
        return context


class BreakGlassForm(AccessRequestForm):
    starts_at = None  # type: ignore[assignment] - break-glass starts now


class BreakGlassView(LoginRequiredMixin, UserPassesTestMixin, View):
    def test_func(self) -> bool:
        return user_has_role(self.request.user, Role.PLATFORM_ADMIN)

    def _form(self, data: Any = None) -> BreakGlassForm:
        return BreakGlassForm(_targets(TenantNamespace.objects.all()), data)

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, "portal/access_break_glass.html", {"form": self._form()})

    def post(self, request: HttpRequest) -> HttpResponse:
        form = self._form(request.POST)
        if form.is_valid():
            try:
                grant = break_glass_grant(actor=request.user, **form.service_kwargs())
            except PortalError as exc:
                form.add_error(None, str(exc))
            else:
                messages.warning(request, f"Break-glass grant {grant.pk} issued; security approvers must review it.")
                return redirect(grant.request)
        return render(request, "portal/access_break_glass.html", {"form": form})


class ViolationListView(LoginRequiredMixin, ListView):
    template_name = "portal/violations.html"
    context_object_name = "violations"
    paginate_by = 100

    def get_queryset(self) -> QuerySet[Violation]:
        violations = visible_violations(self.request.user)
        if self.request.GET.get("all") != "1":
            violations = violations.filter(resolved_at__isnull=True)
        return violations.order_by("resolved_at", "-first_seen_at")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["show_all"] = self.request.GET.get("all") == "1"
        context["clusters"] = Cluster.objects.all() if user_has_role(self.request.user, Role.PLATFORM_ADMIN) else []
        return context


class PolicyManifestView(LoginRequiredMixin, UserPassesTestMixin, View):
    """The privileged enforcement objects of one cluster as multi-document YAML (apply with kubectl where the
    portal may not write them)."""

    def test_func(self) -> bool:
        return user_has_role(self.request.user, Role.PLATFORM_ADMIN)

    def get(self, request: HttpRequest, name: str) -> HttpResponse:
        cluster = get_object_or_404(Cluster, name=name)
        documents = privileged_documents(cluster.pk, timezone.now())
        body = yaml.safe_dump_all(documents, sort_keys=False)
        response = HttpResponse(body, content_type="application/yaml")
        response["Content-Disposition"] = f'attachment; filename="accelerator-portal-privileged-{cluster.pk}.yaml"'
        return response
