"""Exception tickets: DRA adminAccess and privileged containers, requested, reviewed, granted for a bounded time.

Request: submitted → approved (a grant is issued) / denied / withdrawn / expired (unanswered). Grant, kept apart:
pending → active (the sync shows it in the cluster) → expired / revoked. Break-glass: a platform admin issues a
grant at once with a mandatory reason; the security group reviews it afterwards (a denial revokes it).

Rules: only security approvers review; nobody reviews their own request or one from their own tenant; each reviewer
reviews once; N distinct approvals issue the grant (N per kind, AccessPolicy); an expired request cannot be
approved; a grant's end never moves — an extension is a new request (`extends`), which starts when the old grant
ends. Every transition is one durable transaction under a row lock with its audit event; cluster writes happen in
Celery tasks after commit (portal/enforcement.py).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from core.errors import PortalError, StateConflictError
from inventory.k8s.semantics import is_dns_subdomain
from inventory.models import Cluster
from inventory.selectors import admission_policy_unavailable_reason, dra_unavailable_reason
from portal.formatting import duration_text
from portal.models import (
    EXCEPTION_KEY_MAX,
    AccessKind,
    AccessPolicy,
    AccessRequest,
    AccessReview,
    Grant,
    TenantMembership,
    TenantNamespace,
    exception_key,
)
from portal.notifications import notify, users_with_role
from portal.roles import Role, user_has_role

RequestState = AccessRequest.State
GrantState = Grant.State
IN_FORCE = (GrantState.PENDING, GrantState.ACTIVE)
MAX_LEAD_TIME = dt.timedelta(days=30)

# Defaults when a platform admin has not set a policy for a kind (admin → Access policies).
DEFAULT_POLICIES: dict[str, dict[str, Any]] = {
    AccessKind.ADMIN_ACCESS: {"max_window": dt.timedelta(hours=8), "approvals": 2,
                              "review_timeout": dt.timedelta(hours=24), "delete_claims_at_end": False},
    AccessKind.PRIVILEGED: {"max_window": dt.timedelta(days=7), "approvals": 2,
                            "review_timeout": dt.timedelta(hours=72), "delete_claims_at_end": False},
}
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class AccessError(PortalError):
    pass


class AccessStateError(AccessError, StateConflictError):
    """Not allowed in the current state (HTTP 409)."""


def access_policy(kind: str) -> AccessPolicy:
    policy = AccessPolicy.objects.filter(kind=kind).first()
    return policy or AccessPolicy(kind=kind, **DEFAULT_POLICIES[kind])


def _request_snapshot(request: AccessRequest) -> dict[str, Any]:
    return {"state": request.state, "kind": request.kind, "namespace": request.namespace,
            "service_account": request.service_account, "workload": request.workload,
            "window_seconds": int(request.window.total_seconds()), "ticket_ref": request.ticket_ref,
            "break_glass": request.break_glass}


def grant_snapshot(grant: Grant) -> dict[str, Any]:
    return {"state": grant.state, "kind": grant.kind, "namespace": grant.namespace,
            "service_account": grant.service_account, "workload": grant.workload, "request": grant.request_id,
            "starts_at": grant.starts_at.isoformat(), "ends_at": grant.ends_at.isoformat(),
            "break_glass_review": grant.break_glass_review}


def _validate_scope(kind: str, namespace: str, service_account: str, workload: str) -> tuple[str, str]:
    service_account, workload = (service_account or "").strip(), (workload or "").strip()
    if kind == AccessKind.ADMIN_ACCESS:
        if service_account or workload:
            raise AccessError("adminAccess is granted to a whole namespace: leave service account and workload empty.")
        return "", ""
    if not service_account:
        raise AccessError("A privileged exception names the service account its pods run as.")
    if not is_dns_subdomain(service_account):
        raise AccessError(f"{service_account[:80]!r} is not a valid service account name.")
    if workload and (len(workload) > 63 or not _LABEL_VALUE.match(workload)):
        raise AccessError(f"{workload[:80]!r} is not a valid app.kubernetes.io/name label value.")
    if len(exception_key(namespace, service_account, workload)) > EXCEPTION_KEY_MAX:
        # One over-long key would make the whole exception object invalid, for every grant of the cluster.
        raise AccessError(f"Namespace, service account and workload are too long together: their exception key "
                          f"{exception_key(namespace, service_account, workload)[:80]!r}… may have at most "
                          f"{EXCEPTION_KEY_MAX} characters.")
    return service_account, workload


def _validate_window(policy: AccessPolicy, window: Any) -> dt.timedelta:
    if not isinstance(window, dt.timedelta) or window <= dt.timedelta(0):
        raise AccessError("The window must be a positive duration.")
    if window > policy.max_window:
        raise AccessError(f"The window may be at most {duration_text(policy.max_window)} for this kind of exception.")
    return window


def _check_cluster_serves(kind: str, cluster_id: int) -> None:
    """An exception the cluster cannot enforce is refused with the reason: a privileged exception is an entry of the
    portal's ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.30+), adminAccess is a DRA
    feature (resource.k8s.io)."""
    cluster = Cluster.objects.filter(pk=cluster_id).only("api_discovery").first()
    if cluster is None:
        raise AccessError("Unknown cluster.")
    if kind == AccessKind.PRIVILEGED:
        reason = admission_policy_unavailable_reason(cluster)
    else:
        reason = dra_unavailable_reason(cluster)
    if reason:
        raise AccessError(f"{AccessKind(kind).label} is unavailable on this cluster: {reason}.")


def _owner(cluster_id: int, namespace: str) -> TenantNamespace:
    owner = TenantNamespace.objects.filter(cluster_id=cluster_id, namespace=namespace).select_related("tenant").first()
    if owner is None:
        raise AccessError(f"Namespace {namespace!r} belongs to no tenant in this cluster.")
    return owner


def _text(value: str, what: str, limit: int) -> str:
    value = (value or "").strip()
    if not value:
        raise AccessError(f"{what} is required.")
    return value[:limit]


@transaction.atomic(durable=True)
def access_request_create(*, actor: Any, kind: str, cluster_id: int, namespace: str, reason: str, ticket_ref: str,
                          window: dt.timedelta, starts_at: dt.datetime | None = None, service_account: str = "",
                          workload: str = "", extends_grant_id: int | None = None) -> AccessRequest:
    """A tenant member asks for an exception in one of the tenant's namespaces."""
    if kind not in AccessKind.values:
        raise AccessError(f"Unknown kind of exception {kind!r}.")
    _check_cluster_serves(kind, cluster_id)
    owner = _owner(cluster_id, namespace)
    if not TenantMembership.objects.filter(tenant=owner.tenant, user=actor).exists():
        raise AccessError(f"Only members of {owner.tenant.name} may request exceptions for {namespace}.")
    service_account, workload = _validate_scope(kind, namespace, service_account, workload)
    policy = access_policy(kind)
    window = _validate_window(policy, window)
    now = timezone.now()
    extends = None
    if extends_grant_id is not None:
        extends = Grant.objects.filter(pk=extends_grant_id).first()
        if extends is None or (extends.kind, extends.cluster_id, extends.namespace, extends.service_account,
                               extends.workload) != (kind, cluster_id, namespace, service_account, workload):
            raise AccessError("An extension must have the same kind and scope as the grant it extends.")
        if extends.state not in IN_FORCE:
            raise AccessError(f"Grant {extends.pk} has ended; request a new exception instead.")
        starts_at = starts_at or extends.ends_at
    if starts_at is not None and not now - dt.timedelta(minutes=5) <= starts_at <= now + MAX_LEAD_TIME:
        raise AccessError("The window must start within the next 30 days.")
    request = AccessRequest.objects.create(
        kind=kind, tenant=owner.tenant, cluster_id=cluster_id, namespace=namespace, service_account=service_account,
        workload=workload, reason=_text(reason, "A reason", 4000), ticket_ref=_text(ticket_ref, "A ticket reference",
                                                                                      120),
        window=window, starts_at=starts_at, extends=extends, requested_by=actor,
        approvals_required=max(1, policy.approvals), review_due_at=now + policy.review_timeout,
    )
    audit_record(actor=actor, verb="access_request.created", target=request, after=_request_snapshot(request),
                 reason=request.reason[:500], data={"extends_grant": extends.pk if extends else None})
    notify(users=[u for u in users_with_role(Role.SECURITY_APPROVER) if u.pk != actor.pk],
           subject=f"Access request #{request.pk}: {request.get_kind_display()} for {namespace}",
           body=f"{request.ticket_ref}: {request.reason[:1000]}", url=request.get_absolute_url())
    return request


def _locked_request(request_id: int) -> AccessRequest:
    return AccessRequest.objects.select_for_update(of=("self",)).select_related("tenant").get(pk=request_id)


def _check_reviewer(actor: Any, request: AccessRequest) -> None:
    if not user_has_role(actor, Role.SECURITY_APPROVER):
        raise AccessError("Only security approvers review exception requests.")
    if request.requested_by_id == actor.pk:
        raise AccessError("Nobody reviews their own request.")
    if TenantMembership.objects.filter(tenant=request.tenant, user=actor).exists():
        raise AccessError(f"Members of {request.tenant.name} cannot review its requests.")


def access_request_review(*, actor: Any, request_id: int, approve: bool, comment: str = "",
                          now: dt.datetime | None = None) -> AccessRequest:
    """Record one security approver's review. A denial ends the request (or, after break-glass, revokes the grant);
    the N-th distinct approval issues the grant (or confirms the break-glass grant). Reviewing a request past its
    review time expires it (committed) and is refused."""
    with transaction.atomic(durable=True):
        request, expired = _review(actor, request_id, approve, comment, now or timezone.now())
    if expired:
        raise AccessStateError("The request expired unanswered; it can no longer be approved.")
    return request


def _review(actor: Any, request_id: int, approve: bool, comment: str, now: dt.datetime) -> tuple[AccessRequest, bool]:
    request = _locked_request(request_id)
    _check_reviewer(actor, request)
    decision = AccessReview.Decision.APPROVE if approve else AccessReview.Decision.DENY
    previous = AccessReview.objects.filter(request=request, reviewer=actor).first()
    if previous is not None:
        if previous.decision == decision:
            return request, False  # the same click twice
        raise AccessStateError("You have already reviewed this request.")
    if not approve and not (comment or "").strip():
        raise AccessError("Say why you deny it.")
    if request.break_glass:
        _review_break_glass(actor, request, decision, comment, now)
        return request, False
    if request.state == RequestState.SUBMITTED and request.review_due_at <= now:
        _expire_request(request)
        return request, True
    if request.state != RequestState.SUBMITTED:
        raise AccessStateError(f"Cannot review a request that is {request.get_state_display().lower()}.")
    before = _request_snapshot(request)
    AccessReview.objects.create(request=request, reviewer=actor, decision=decision, comment=(comment or "")[:4000])
    approvals = request.reviews.filter(decision=AccessReview.Decision.APPROVE).count()
    if approve:  # the cluster may have been downgraded (or first discovered) since the request was made
        _check_cluster_serves(request.kind, request.cluster_id)
    grant = None
    if not approve:
        request.state = RequestState.DENIED
    elif approvals >= request.approvals_required:
        request.state = RequestState.APPROVED
    request.save(update_fields=["state", "updated_at"])
    audit_record(actor=actor, verb=f"access_request.{'approved' if approve else 'denied'}", target=request,
                 before=before, after={**_request_snapshot(request), "approvals": approvals,
                                       "required": request.approvals_required}, reason=(comment or "")[:500])
    if request.state == RequestState.APPROVED:
        grant = _issue_grant(actor, request, now)
    if request.state != RequestState.SUBMITTED:
        outcome = (f"was approved: grant {grant.pk} is being applied" if grant
                   else f"was denied: {comment.strip()[:120]}")
        notify(users=[request.requested_by], subject=f"Access request #{request.pk} {outcome}",
               body="" if grant else f"Reason: {comment.strip()}", url=request.get_absolute_url())
    return request, False


def _issue_grant(actor: Any, request: AccessRequest, now: dt.datetime, *,
                 review: str = Grant.Review.NONE) -> Grant:
    starts_at = request.starts_at if request.starts_at and request.starts_at > now else now
    grant = Grant.objects.create(
        request=request, kind=request.kind, cluster_id=request.cluster_id, namespace=request.namespace,
        service_account=request.service_account, workload=request.workload, starts_at=starts_at,
        ends_at=starts_at + request.window, break_glass_review=review,
    )
    audit_record(actor=actor, verb="grant.issued", target=grant, after=grant_snapshot(grant),
                 data={"request": request.pk, "ticket_ref": request.ticket_ref})
    if starts_at <= now:
        enqueue_enforcement(grant)
    return grant


def enqueue_enforcement(grant: Grant) -> None:
    """After commit, bring the cluster to the desired state for this grant's scope (idempotent task)."""
    from portal.tasks import enforcement_apply_task

    cluster_id = grant.cluster_id
    namespace = grant.namespace if grant.kind == AccessKind.ADMIN_ACCESS else ""
    transaction.on_commit(lambda: enforcement_apply_task.delay(cluster_id, namespace))


def _review_break_glass(actor: Any, request: AccessRequest, decision: str, comment: str, now: dt.datetime) -> None:
    grant = Grant.objects.select_for_update().get(request=request)
    if grant.break_glass_review != Grant.Review.PENDING:
        raise AccessStateError(f"This break-glass grant was already {grant.get_break_glass_review_display().lower()}.")
    AccessReview.objects.create(request=request, reviewer=actor, decision=decision, comment=(comment or "")[:4000],
                                after_the_fact=True)
    approvals = request.reviews.filter(decision=AccessReview.Decision.APPROVE).count()
    before = grant_snapshot(grant)
    if decision == AccessReview.Decision.DENY:
        grant.break_glass_review = Grant.Review.REJECTED
    elif approvals >= request.approvals_required:
        grant.break_glass_review = Grant.Review.CONFIRMED
    grant.save(update_fields=["break_glass_review", "updated_at"])
    audit_record(actor=actor, verb=f"grant.break_glass_{'approved' if decision == 'approve' else 'denied'}",
                 target=grant, before=before, after={**grant_snapshot(grant), "approvals": approvals,
                                                     "required": request.approvals_required},
                 reason=(comment or "")[:500])
    if grant.break_glass_review == Grant.Review.REJECTED and grant.state in IN_FORCE:
        _end_grant(grant, GrantState.REVOKED, actor=actor, reason=f"break-glass review denied: {comment}"[:500],
                   now=now)


@transaction.atomic(durable=True)
def access_request_withdraw(*, actor: Any, request_id: int) -> AccessRequest:
    request = _locked_request(request_id)
    if request.state == RequestState.WITHDRAWN:
        return request
    if request.requested_by_id != actor.pk:
        raise AccessError("Only the requester may withdraw a request.")
    if request.state != RequestState.SUBMITTED:
        raise AccessStateError(f"Cannot withdraw a request that is {request.get_state_display().lower()}.")
    before = _request_snapshot(request)
    request.state = RequestState.WITHDRAWN
    request.save(update_fields=["state", "updated_at"])
    audit_record(actor=actor, verb="access_request.withdrawn", target=request, before=before,
                 after=_request_snapshot(request))
    return request


@transaction.atomic(durable=True)
def break_glass_grant(*, actor: Any, kind: str, cluster_id: int, namespace: str, reason: str, ticket_ref: str,
                      window: dt.timedelta, service_account: str = "", workload: str = "") -> Grant:
    """A platform admin grants at once; the security group must review it afterwards."""
    if not user_has_role(actor, Role.PLATFORM_ADMIN):
        raise AccessError("Only platform admins may break the glass.")
    if kind not in AccessKind.values:
        raise AccessError(f"Unknown kind of exception {kind!r}.")
    _check_cluster_serves(kind, cluster_id)
    owner = _owner(cluster_id, namespace)
    service_account, workload = _validate_scope(kind, namespace, service_account, workload)
    policy = access_policy(kind)
    window = _validate_window(policy, window)
    now = timezone.now()
    request = AccessRequest.objects.create(
        kind=kind, tenant=owner.tenant, cluster_id=cluster_id, namespace=namespace, service_account=service_account,
        workload=workload, reason=_text(reason, "A break-glass reason", 4000),
        ticket_ref=_text(ticket_ref, "A ticket reference", 120), window=window, requested_by=actor,
        state=RequestState.APPROVED, break_glass=True, approvals_required=max(1, policy.approvals),
        review_due_at=now + policy.review_timeout,
    )
    audit_record(actor=actor, verb="access.break_glass", target=request, after=_request_snapshot(request),
                 reason=request.reason[:500])
    grant = _issue_grant(actor, request, now, review=Grant.Review.PENDING)
    notify(users=[u for u in users_with_role(Role.SECURITY_APPROVER) if u.pk != actor.pk],
           subject=f"Break-glass grant {grant.pk} for {namespace}: review required",
           body=request.reason[:1000], url=request.get_absolute_url())
    return grant


def _end_grant(grant: Grant, state: str, *, actor: Any, reason: str, now: dt.datetime) -> None:
    before = grant_snapshot(grant)
    grant.state = state
    grant.ended_at = now
    grant.ended_by = actor if getattr(actor, "pk", None) else None
    grant.end_reason = reason[:2000]
    grant.save(update_fields=["state", "ended_at", "ended_by", "end_reason", "updated_at"])
    audit_record(actor=actor, verb=f"grant.{state}", target=grant, before=before, after=grant_snapshot(grant),
                 reason=reason[:500])
    enqueue_enforcement(grant)
    notify(users=[grant.request.requested_by], subject=f"Grant {grant.pk} ({grant.get_kind_display()}, "
                                                       f"{grant.namespace}) {state}", body=reason[:1000])


@transaction.atomic(durable=True)
def grant_revoke(*, actor: Any, grant_id: int, reason: str) -> Grant:
    """An approver or platform admin ends a grant early."""
    if not (user_has_role(actor, Role.SECURITY_APPROVER) or user_has_role(actor, Role.PLATFORM_ADMIN)):
        raise AccessError("Only security approvers and platform admins revoke grants.")
    reason = _text(reason, "A reason", 2000)
    grant = Grant.objects.select_for_update(of=("self",)).select_related("request__requested_by").get(pk=grant_id)
    if grant.state not in IN_FORCE:
        raise AccessStateError(f"Grant {grant.pk} is already {grant.state}.")
    _end_grant(grant, GrantState.REVOKED, actor=actor, reason=reason, now=timezone.now())
    return grant


def _expire_request(request: AccessRequest) -> None:
    before = _request_snapshot(request)
    request.state = RequestState.EXPIRED
    request.save(update_fields=["state", "updated_at"])
    audit_record(actor=None, verb="access_request.expired", target=request, before=before,
                 after=_request_snapshot(request))
    notify(users=[request.requested_by], subject=f"Access request #{request.pk} expired unanswered",
           url=request.get_absolute_url())


def access_expire_due(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Beat: unanswered requests past their review time expire; grants past their end expire. Idempotent, and safe
    against a concurrent revoke (each row is re-read under its lock; an ended grant is left alone)."""
    now = now or timezone.now()
    counts = {"requests": 0, "grants": 0}
    for pk in AccessRequest.objects.filter(state=RequestState.SUBMITTED, review_due_at__lte=now
                                           ).values_list("pk", flat=True):
        with transaction.atomic():
            request = AccessRequest.objects.select_for_update().filter(
                pk=pk, state=RequestState.SUBMITTED, review_due_at__lte=now).first()
            if request is not None:
                _expire_request(request)
                counts["requests"] += 1
    for pk in Grant.objects.filter(state__in=IN_FORCE, ends_at__lte=now).values_list("pk", flat=True):
        with transaction.atomic():
            grant = Grant.objects.select_for_update(of=("self",)).select_related("request__requested_by").filter(
                pk=pk, state__in=IN_FORCE, ends_at__lte=now).first()
            if grant is not None:
                _end_grant(grant, GrantState.EXPIRED, actor=None, reason="the window ended", now=now)
                counts["grants"] += 1
    return counts


def reviewable_by(user: Any, request: AccessRequest) -> bool:
    """Whether the page should offer this user the review buttons (the service re-checks everything)."""
    if not user_has_role(user, Role.SECURITY_APPROVER) or request.requested_by_id == user.pk:
        return False
    if request.reviews.filter(reviewer=user).exists():
        return False
    if TenantMembership.objects.filter(tenant=request.tenant, user=user).exists():
        return False
    if request.break_glass:
        return Grant.objects.filter(request=request, break_glass_review=Grant.Review.PENDING).exists()
    return request.state == RequestState.SUBMITTED and request.review_due_at > timezone.now()
