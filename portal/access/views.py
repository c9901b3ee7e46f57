"""Exception pages: request an exception and see one's requests and grants, a request's page (reviews, grant, uses,
violations, audit trail, actions), the security approvers' queue, break-glass, violations, and the admission policy
manifests to download for clusters where the portal may not write them."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, UserPassesTestMixin
from django.contrib.auth.models import AnonymousUser, User
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views import View
from django.views.generic import ListView, TemplateView

from core.errors import PortalError
from portal.access.forms import AccessRequestForm, BreakGlassForm, target_choices
from portal.access.models import AccessRequest, Grant
from portal.access.selectors import access_request_trail
from portal.access.services import (
    IN_FORCE,
    access_request_create,
    access_request_review,
    access_request_withdraw,
    break_glass_grant,
    grant_revoke,
    reviewable_by,
)
from portal.notifications.services import notifications_read
from portal.tenancy.models import TenantMembership, TenantNamespace
from portal.tenancy.roles import Role, user_has_role


def _is_reviewer(user: User | AnonymousUser) -> bool:
    return user_has_role(user, Role.SECURITY_APPROVER) or user_has_role(user, Role.PLATFORM_ADMIN)


class AccessView(LoginRequiredMixin, TemplateView):
    template_name = "portal/access.html"

    def _form(self, data: Any = None) -> AccessRequestForm:
        owned = TenantNamespace.objects.filter(tenant__memberships__user=self.request.user)
        return AccessRequestForm(target_choices(owned), data)

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
            "trail": access_request_trail(access_request, grant),
            "can_review": reviewable_by(user, access_request),
            "can_withdraw": access_request.requested_by_id == user.pk and access_request.state == AccessRequest.State.SUBMITTED,
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
            Q(state=AccessRequest.State.SUBMITTED) | Q(break_glass=True, grant__break_glass_review=Grant.Review.PENDING)
        ).select_related("tenant", "cluster", "requested_by").prefetch_related("reviews").order_by("review_due_at")

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["grants"] = Grant.objects.filter(state__in=IN_FORCE).select_related("cluster", "request")
        context["now"] = timezone.now()
        return context


class BreakGlassView(LoginRequiredMixin, UserPassesTestMixin, View):
    def test_func(self) -> bool:
        return user_has_role(self.request.user, Role.PLATFORM_ADMIN)

    def _form(self, data: Any = None) -> BreakGlassForm:
        return BreakGlassForm(target_choices(TenantNamespace.objects.all()), data)

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
