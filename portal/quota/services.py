"""Quota requests: draft → submitted → approved/denied/withdrawn → applying → active → expired (or failed, retryable).

Any request past its `ends_at` expires, whatever its state: its units leave the desired quota at once (the desired
state never counts an ended period), and the namespace's quota is lowered in the cluster. Per namespace the portal
keeps what the cluster carries against what is granted (`QuotaNamespaceState`): drift — a failed apply, an edit or
deletion by someone else — is re-applied by the confirm beat with backoff and stays visible until the sync shows the
granted values.

Every transition is one durable transaction under a row lock, idempotent, with its audit event. Cluster I/O
(server-side apply under our own field manager) happens in a Celery task after commit; a request becomes active only
when the sync shows the applied values in the cluster. The applied quota is always the *desired state* of the
namespace — the sum of every granted, unexpired request per quota key — so applying twice, or after a worker was
killed, gives the same result.

Kubernetes enforces every ResourceQuota of a namespace (the tightest binds), so a grant is composed with the quotas
already there (`quota_plan`): each existing quota object that carries a granted accelerator key gets its baseline
(the key's value before the portal took it, recorded once) plus the grant, and only where no one else's quota
carries the key does the portal's own `portal-accelerators` object hold it. No other key is ever written. Another
field manager's key is taken over (forced apply) only where the platform admin's `QuotaOwnership` policy says the
portal owns accelerator keys; otherwise the apply is refused with the reason and a suggested fix.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from audit.services import audit_record
from catalog.models import DRA_KINDS, Lifecycle, Offering
from core.errors import PortalError, StateConflictError
from inventory.k8s.semantics import as_dict, format_quantity, is_extended_resource, parse_quantity
from inventory.models import DeviceClass, ResourceQuota
from portal.notifications.selectors import approvers
from portal.notifications.services import notify
from portal.quota.kueue import QueueTargetError, enqueue_queue, queue_shows, queues_reconcile, resolve_target
from portal.quota.models import (
    DEFAULT_APPROVALS,
    DEFAULT_APPROVALS_ABOVE,
    DEFAULT_THRESHOLD,
    ENDED,
    GRANTED,
    WITHDRAWABLE,
    QuotaDecision,
    QuotaNamespaceState,
    QuotaOwnership,
    QuotaPolicy,
    QuotaRequest,
    unexpired,
)
from portal.tenancy.models import QuotaTarget, TenantMembership, TenantNamespace
from portal.tenancy.roles import Role, user_has_role

if TYPE_CHECKING:
    from inventory.services.clients import ClientFactory  # imported inside the appliers at run time

logger = logging.getLogger(__name__)

QUOTA_NAME = "portal-accelerators"
FIELD_MANAGER = "accelerator-portal"
MAX_UNITS = 10_000
RETRY_AFTER = dt.timedelta(minutes=2)
MAX_BACKOFF = dt.timedelta(hours=1)
State = QuotaRequest.State
NamespaceStatus = QuotaNamespaceState.Status


class QuotaRequestError(PortalError):
    pass


class QuotaStateError(QuotaRequestError, StateConflictError):
    """The request is not in a state that allows this (maps to HTTP 409)."""


def quota_keys(offering: Offering, *, extended_resource_name: str = "") -> list[str]:
    """The ResourceQuota keys that count this offering's units."""
    if offering.unit_kind in DRA_KINDS:
        name = offering.device_class_name
        keys = [f"{name}.deviceclass.resource.k8s.io/devices", f"requests.deviceclass.resource.kubernetes.io/{name}"]
        if extended_resource_name:
            keys.append(f"requests.{extended_resource_name}")
        return keys
    return [f"requests.{offering.resource_name}"]


def _extended_name(cluster_id: int, offering: Offering) -> str:
    if offering.unit_kind not in DRA_KINDS:
        return ""
    raw = (DeviceClass.objects.live().filter(cluster_id=cluster_id, name=offering.device_class_name)
           .values_list("raw", flat=True).first()) or {}
    return str((raw.get("spec") or {}).get("extendedResourceName") or "")


def desired_hard(cluster_id: int, namespace: str, *, now: dt.datetime | None = None) -> dict[str, str]:
    """The portal's quota for a namespace: granted units of unexpired requests summed per key. A request past its
    end counts for nothing, even before the beat marks it expired."""
    return desired_hards([(cluster_id, namespace)], now=now)[(cluster_id, namespace)]


def desired_hards(targets: Iterable[tuple[int, str]], *, now: dt.datetime | None = None,
                  ) -> dict[tuple[int, str], dict[str, str]]:
    """`desired_hard` of many (cluster, namespace) pairs in one query (a lead's quota page lists all of theirs)."""
    wanted = set(targets)
    totals: dict[tuple[int, str], dict[str, int]] = {target: defaultdict(int) for target in wanted}
    if not wanted:
        return {}
    condition = Q()
    for cluster_id, namespace in wanted:
        condition |= Q(cluster_id=cluster_id, namespace=namespace)
    keys: dict[tuple[int, int], list[str]] = {}  # per (cluster, offering): one DeviceClass lookup
    for request in QuotaRequest.objects.filter(condition, unexpired(now or timezone.now()), state__in=GRANTED,
                                               target=QuotaTarget.RESOURCE_QUOTA).select_related("offering"):
        target = (request.cluster_id, request.namespace)
        if (request.cluster_id, request.offering_id) not in keys:
            keys[(request.cluster_id, request.offering_id)] = quota_keys(
                request.offering, extended_resource_name=_extended_name(request.cluster_id, request.offering))
        for key in keys[(request.cluster_id, request.offering_id)]:
            totals[target][key] += request.units
    return {target: {key: str(value) for key, value in sorted(found.items())} for target, found in totals.items()}


def granted_units(cluster_id: int, offering: Offering, hard: dict[str, str]) -> int:
    """What a namespace's portal quota (`desired_hard`) grants on the offering's quota key: the total a new request
    adds to."""
    key = quota_keys(offering, extended_resource_name=_extended_name(cluster_id, offering))[0]
    return int(hard.get(key, 0))


def managed_keys(cluster_id: int, namespace: str) -> set[str]:
    """Every quota key the portal has granted in the namespace (live or ended): the keys it owns there."""
    keys: set[str] = set()
    offerings = Offering.objects.filter(pk__in=QuotaRequest.objects.filter(
        cluster_id=cluster_id, namespace=namespace, target=QuotaTarget.RESOURCE_QUOTA,
        state__in=(*GRANTED, State.EXPIRED)).values("offering_id"))
    for offering in offerings:
        keys.update(quota_keys(offering, extended_resource_name=_extended_name(cluster_id, offering)))
    return keys


def recent_increase(*, cluster_id: int, namespace: str, offering: Offering, now: dt.datetime | None = None,
                    exclude_id: int | None = None) -> int:
    """Units of the offering the namespace asked for within the threshold window that are pending or granted (not
    denied, withdrawn or expired): what a new request adds to when the approval threshold is applied."""
    since = (now or timezone.now()) - dt.timedelta(days=settings.PORTAL_QUOTA_THRESHOLD_WINDOW_DAYS)
    requests = QuotaRequest.objects.filter(
        cluster_id=cluster_id, namespace=namespace, offering=offering, created_at__gte=since,
        state__in=(State.DRAFT, State.SUBMITTED, State.APPROVED, *GRANTED))
    if exclude_id is not None:
        requests = requests.exclude(pk=exclude_id)
    return int(requests.aggregate(total=Sum("units"))["total"] or 0)


def recent_increases(requests: Sequence[QuotaRequest], *, now: dt.datetime | None = None) -> dict[int, int]:
    """`recent_increase` for each of many requests (excluding the request itself), in one query."""
    if not requests:
        return {}
    since = (now or timezone.now()) - dt.timedelta(days=settings.PORTAL_QUOTA_THRESHOLD_WINDOW_DAYS)
    condition = Q()
    for request in requests:
        condition |= Q(cluster_id=request.cluster_id, namespace=request.namespace, offering_id=request.offering_id)
    totals: dict[tuple[int, str, int], list[tuple[int, int]]] = defaultdict(list)
    for pk, cluster_id, namespace, offering_id, units in QuotaRequest.objects.filter(
            condition, created_at__gte=since, state__in=(State.DRAFT, State.SUBMITTED, State.APPROVED, *GRANTED),
    ).values_list("pk", "cluster_id", "namespace", "offering_id", "units"):
        totals[(cluster_id, namespace, offering_id)].append((pk, units))
    return {request.pk: sum(units for pk, units in totals[(request.cluster_id, request.namespace, request.offering_id)]
                            if pk != request.pk) for request in requests}


def approvals_required(offering: Offering, units: int, *, earlier_units: int = 0) -> int:
    """Distinct approvals a request needs. The threshold applies to the namespace's total increase within the window
    (`earlier_units` + this request), so splitting a big request into small ones never lowers the bar."""
    policy = QuotaPolicy.objects.filter(offering=offering).first()
    approvals = policy.approvals if policy else DEFAULT_APPROVALS
    threshold = policy.threshold_units if policy else DEFAULT_THRESHOLD
    above = policy.approvals_above if policy else DEFAULT_APPROVALS_ABOVE
    total = units + earlier_units
    return max(approvals, above) if threshold is not None and total > threshold else approvals


def _locked(request_id: int) -> QuotaRequest:
    return QuotaRequest.objects.select_for_update(of=("self",)).select_related("offering", "tenant").get(
        pk=request_id)


def _snapshot(request: QuotaRequest) -> dict[str, Any]:
    snapshot = {"state": request.state, "units": request.units, "namespace": request.namespace,
                "offering": request.offering.slug, "ends_at": request.ends_at.isoformat() if request.ends_at else None}
    if request.on_cluster_queue:
        snapshot.update(cluster_queue=request.cluster_queue, flavor=request.flavor, resource=request.resource)
    return snapshot


@transaction.atomic(durable=True)
def quota_request_create(*, actor: User, cluster_id: int, namespace: str, offering_id: int, units: int,
                         justification: str, ends_at: dt.datetime | None = None, submit: bool = True,
                         cluster_queue: str = "", flavor: str = "") -> QuotaRequest:
    """A tenant lead asks for units of an offering in one of their tenant's namespaces. Where the tenant's quota
    lives in Kueue (`Tenant.quota_target`), the request targets one ClusterQueue cell (portal/quota/kueue.py):
    the only one its LocalQueues and the offering's flavors allow, or the one named by `cluster_queue`/`flavor`."""
    owner = TenantNamespace.objects.filter(cluster_id=cluster_id, namespace=namespace).select_related(
        "tenant", "cluster").first()
    if owner is None:
        raise QuotaRequestError(f"Namespace {namespace!r} belongs to no tenant in this cluster.")
    if not TenantMembership.objects.filter(tenant=owner.tenant, user=actor, role=TenantMembership.Role.LEAD).exists():
        raise QuotaRequestError(f"Only a lead of {owner.tenant.name} may request quota for {namespace}.")
    offering = Offering.objects.get(pk=offering_id)
    if offering.lifecycle not in {Lifecycle.ACTIVE, Lifecycle.DEPRECATED}:
        raise QuotaRequestError(f"{offering.name} is {offering.get_lifecycle_display().lower()}; it takes no "
                                "new quota.")
    if not isinstance(units, int) or not 1 <= units <= MAX_UNITS:
        raise QuotaRequestError(f"Request between 1 and {MAX_UNITS} units.")
    if ends_at is not None and ends_at <= timezone.now():
        raise QuotaRequestError("The end of the period must be in the future.")
    if not (justification or "").strip():
        raise QuotaRequestError("A justification is required.")
    target: dict[str, str] = {"target": QuotaTarget.RESOURCE_QUOTA}
    if owner.tenant.quota_target == QuotaTarget.CLUSTER_QUEUE:
        try:
            cell = resolve_target(owner.cluster, namespace, offering, cluster_queue=cluster_queue, flavor=flavor)
        except QueueTargetError as exc:
            raise QuotaRequestError(str(exc)) from None
        target = {"target": QuotaTarget.CLUSTER_QUEUE, "cluster_queue": cell.cluster_queue, "flavor": cell.flavor,
                  "resource": cell.resource}
    elif cluster_queue or flavor:
        raise QuotaRequestError(f"{owner.tenant.name}'s quota is granted in ResourceQuotas, not in Kueue "
                                "ClusterQueues: leave the ClusterQueue and flavor out.")
    # Serialise requests of one namespace so that two at once cannot both stay under the threshold.
    TenantNamespace.objects.select_for_update().filter(pk=owner.pk).first()
    earlier = recent_increase(cluster_id=cluster_id, namespace=namespace, offering=offering)
    request = QuotaRequest.objects.create(
        tenant=owner.tenant, cluster_id=cluster_id, namespace=namespace, offering=offering, units=units,
        ends_at=ends_at, justification=justification.strip()[:4000], requested_by=actor, **target,
        state=State.SUBMITTED if submit else State.DRAFT,
        approvals_required=approvals_required(offering, units, earlier_units=earlier),
    )
    audit_record(actor=actor, verb="quota_request.created", target=request, after=_snapshot(request),
                 reason=request.justification[:500],
                 data={"window_increase": earlier + units, "approvals_required": request.approvals_required})
    if request.state == State.SUBMITTED:
        _notify_submitted(request)
    return request


def _url(request: QuotaRequest) -> str:
    from django.urls import reverse

    return reverse("portal:quota_request_detail", kwargs={"pk": request.pk})


def _notify_submitted(request: QuotaRequest) -> None:
    notify(users=[u for u in approvers() if u.pk != request.requested_by_id],
           subject=f"Quota request #{request.pk}: {request.units} x {request.offering.name} for "
                   f"{request.namespace}", body=request.justification[:1000], url=_url(request))


def _notify_requester(request: QuotaRequest, what: str, *, reason: str = "") -> None:
    body = f"{request.units} x {request.offering.name} in {request.namespace}"
    notify(users=[request.requested_by], subject=f"Quota request #{request.pk} {what}",
           body=f"Reason: {reason}\n{body}" if reason else body, url=_url(request))


@transaction.atomic(durable=True)
def quota_request_submit(*, actor: User, request_id: int) -> QuotaRequest:
    request = _locked(request_id)
    if request.state == State.SUBMITTED:
        return request
    if request.state != State.DRAFT or request.requested_by_id != actor.pk:
        raise QuotaStateError(f"Cannot submit a request that is {request.get_state_display().lower()}.")
    before = _snapshot(request)
    request.state = State.SUBMITTED
    request.save(update_fields=["state", "updated_at"])
    audit_record(actor=actor, verb="quota_request.submitted", target=request, before=before, after=_snapshot(request))
    _notify_submitted(request)
    return request


@transaction.atomic(durable=True)
def quota_request_withdraw(*, actor: User, request_id: int) -> QuotaRequest:
    request = _locked(request_id)
    if request.state == State.WITHDRAWN:
        return request
    if request.requested_by_id != actor.pk:
        raise QuotaStateError("Only the requester may withdraw a request.")
    if request.state not in WITHDRAWABLE:
        raise QuotaStateError(f"Cannot withdraw a request that is {request.get_state_display().lower()}.")
    before = _snapshot(request)
    request.state = State.WITHDRAWN
    request.save(update_fields=["state", "updated_at"])
    audit_record(actor=actor, verb="quota_request.withdrawn", target=request, before=before, after=_snapshot(request))
    return request


@transaction.atomic(durable=True)
def quota_request_decide(*, actor: User, request_id: int, approve: bool, comment: str = "") -> QuotaRequest:
    """Record one approver's decision. A denial ends the request; enough distinct approvals apply it."""
    if not user_has_role(actor, Role.APPROVER):
        raise QuotaRequestError("Only approvers decide quota requests.")
    request = _locked(request_id)
    if request.requested_by_id == actor.pk:
        raise QuotaRequestError("Requesters cannot approve or deny their own request.")
    if TenantMembership.objects.filter(tenant=request.tenant, user=actor).exists():
        raise QuotaRequestError(f"Members of {request.tenant.name} cannot decide its requests.")
    previous = QuotaDecision.objects.filter(request=request, approver=actor).first()
    if previous is not None:
        if previous.decision == ("approve" if approve else "deny"):
            return request  # idempotent repeat
        raise QuotaStateError("You have already decided this request.")
    if not approve and not (comment or "").strip():
        raise QuotaRequestError("Say why you deny it: the requester reads the reason.")
    if request.state != State.SUBMITTED:
        raise QuotaStateError(f"Cannot decide a request that is {request.get_state_display().lower()}.")
    if request.ends_at is not None and request.ends_at <= timezone.now():
        raise QuotaStateError(f"The period of request #{request.pk} ended on {request.ends_at:%Y-%m-%d %H:%M} UTC "
                              "before a decision; it expires and grants nothing.")
    before = _snapshot(request)
    QuotaDecision.objects.create(request=request, approver=actor, decision="approve" if approve else "deny",
                                 comment=(comment or "")[:4000])
    approvals = QuotaDecision.objects.filter(request=request, decision="approve").count()
    if not approve:
        request.state = State.DENIED
    elif approvals >= request.approvals_required:
        request.state = State.APPLYING
    request.save(update_fields=["state", "updated_at"])
    audit_record(actor=actor, verb="quota_request.approved" if approve else "quota_request.denied", target=request,
                 before=before, after={**_snapshot(request), "approvals": approvals,
                                       "required": request.approvals_required}, reason=comment[:500])
    if request.state == State.APPLYING:
        _enqueue_apply(request)
        _notify_requester(request, "was approved and is being applied")
    elif request.state == State.DENIED:
        _notify_requester(request, f"was denied: {comment.strip()[:120]}", reason=comment.strip())
    return request


def _enqueue_apply(request: QuotaRequest) -> None:
    _enqueue_scope(_scope(request))


# What one apply writes: a namespace's ResourceQuotas, or a ClusterQueue's nominal quota.
Scope = tuple[str, int, str]


def _scope(request: QuotaRequest) -> Scope:
    if request.on_cluster_queue:
        return (QuotaTarget.CLUSTER_QUEUE, request.cluster_id, request.cluster_queue)
    return (QuotaTarget.RESOURCE_QUOTA, request.cluster_id, request.namespace)


def _enqueue_scope(scope: Scope) -> None:
    target, cluster_id, name = scope
    if target == QuotaTarget.CLUSTER_QUEUE:
        enqueue_queue(cluster_id, name)
    else:
        _enqueue_namespace(cluster_id, name)


@transaction.atomic(durable=True)
def quota_request_reduce(*, actor: User, request_id: int, units: int, reason: str = "") -> QuotaRequest:
    """A lead lowers an active grant (no approval needed to give back); the lower quota is applied like any other
    change and the request is active again once the sync shows it."""
    request = _locked(request_id)
    if not TenantMembership.objects.filter(tenant=request.tenant, user=actor,
                                           role=TenantMembership.Role.LEAD).exists():
        raise QuotaRequestError(f"Only a lead of {request.tenant.name} may reduce its quota.")
    if request.state != State.ACTIVE:
        raise QuotaStateError(f"Only an active grant can be reduced (the request is {request.state}).")
    if not isinstance(units, int) or not 1 <= units < request.units:
        raise QuotaRequestError(f"Reduce to between 1 and {request.units - 1} units (withdraw by letting it expire).")
    before = _snapshot(request)
    request.units = units
    request.state = State.APPLYING
    request.save(update_fields=["units", "state", "updated_at"])
    audit_record(actor=actor, verb="quota_request.reduced", target=request, before=before, after=_snapshot(request),
                 reason=(reason or "")[:500])
    _enqueue_apply(request)
    return request


@transaction.atomic(durable=True)
def quota_request_retry(*, actor: User, request_id: int) -> QuotaRequest:
    """An approver or platform admin retries a failed apply."""
    if not (user_has_role(actor, Role.APPROVER) or user_has_role(actor, Role.PLATFORM_ADMIN)):
        raise QuotaRequestError("Only approvers and platform admins retry applies.")
    request = _locked(request_id)
    if request.state == State.APPLYING:
        return request
    if request.state != State.FAILED:
        raise QuotaStateError(f"Only a failed apply can be retried (the request is {request.state}).")
    request.state = State.APPLYING
    request.save(update_fields=["state", "updated_at"])
    audit_record(actor=actor, verb="quota_request.retried", target=request, after=_snapshot(request))
    _enqueue_apply(request)
    return request


# ------------------------------------------------------------------------------------------------ cluster side


def is_accelerator_key(key: str) -> bool:
    """The quota keys the portal may write: `requests.<extended resource>` (device plugins, and DRA's implicit
    `deviceclass.resource.kubernetes.io/<class>`) and `<class>.deviceclass.resource.k8s.io/devices`. Never cpu,
    memory, pods or object counts."""
    if key.endswith(".deviceclass.resource.k8s.io/devices"):
        return len(key) > len(".deviceclass.resource.k8s.io/devices")
    return key.startswith("requests.") and is_extended_resource(key[len("requests."):])


def portal_owns_keys(cluster_id: int, namespace: str) -> bool:
    """The platform admin's policy (QuotaOwnership): the namespace's own row, else its tenant's, else no."""
    row = QuotaOwnership.objects.filter(cluster_id=cluster_id, namespace=namespace).first()
    if row is None:
        owner = TenantNamespace.objects.filter(cluster_id=cluster_id, namespace=namespace).values("tenant_id").first()
        row = QuotaOwnership.objects.filter(tenant_id=owner["tenant_id"]).first() if owner else None
    return bool(row and row.portal_owns_accelerator_keys)


@dataclass
class QuotaPlan:
    """What the portal applies in a namespace so that every quota constraining a granted key rises by the grant.

    `targets`: per quota object, the accelerator keys the portal writes and their values; `baselines`: per object
    written by someone else, each key's value before the portal managed it; `granted`: granted units per key;
    `before`: each object's `spec.hard` as the sync shows it (None: not in the cluster)."""

    granted: dict[str, str]
    targets: dict[str, dict[str, str]]
    baselines: dict[str, dict[str, str]]
    before: dict[str, dict[str, Any] | None]


def _amount(value: Any) -> Fraction:
    try:
        return parse_quantity(value)
    except ValueError:
        return Fraction(0)


def quota_plan(cluster_id: int, namespace: str, *, now: dt.datetime | None = None) -> QuotaPlan:
    """Compose the grant with every quota of the namespace (upstream enforces each: the tightest binds).

    For each accelerator key the portal grants or granted: every existing quota object that carries the key gets
    its baseline (its value before the portal took the key, recorded once) plus the granted units; where no quota
    of anyone else carries the key, the portal's own `portal-accelerators` object holds it. No other key of any
    object is touched."""
    granted = desired_hard(cluster_id, namespace, now=now)
    keys = sorted(k for k in managed_keys(cluster_id, namespace) | set(granted) if is_accelerator_key(k))
    mirrored = {q["name"]: q["hard"] or {} for q in ResourceQuota.objects.live().filter(
        cluster_id=cluster_id, namespace=namespace).values("name", "hard")}
    state = QuotaNamespaceState.objects.filter(cluster_id=cluster_id, namespace=namespace).values(
        "baselines", "targets").first() or {"baselines": {}, "targets": {}}
    baselines = {name: dict(values) for name, values in (state["baselines"] or {}).items() if name in mirrored}
    targets: dict[str, dict[str, str]] = {}
    for key in keys:
        units = _amount(granted.get(key, 0))
        carriers = [name for name, hard in sorted(mirrored.items()) if name != QUOTA_NAME
                    and (key in hard or key in baselines.get(name, {}))]
        if carriers:
            for name in carriers:
                base = baselines.setdefault(name, {}).setdefault(key, str(mirrored[name].get(key, "0")))
                targets.setdefault(name, {})[key] = format_quantity(_amount(base) + units)
        elif units:
            targets.setdefault(QUOTA_NAME, {})[key] = granted[key]
    if QUOTA_NAME in mirrored or QUOTA_NAME in (state["targets"] or {}):
        targets.setdefault(QUOTA_NAME, {})  # applied even when empty: drops the keys it no longer carries
    return QuotaPlan(granted, targets, baselines, {name: mirrored.get(name) for name in targets})


def quota_document(cluster_id: int, namespace: str, *, name: str = QUOTA_NAME,
                   hard: dict[str, str] | None = None) -> dict[str, Any]:
    """The object we apply: only the fields we own. Keys absent from `hard` that we applied before are removed by
    the server (we owned them); on someone else's quota object we own nothing but our keys."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if name == QUOTA_NAME:
        metadata["labels"] = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata,
            "spec": {"hard": desired_hard(cluster_id, namespace) if hard is None else hard}}


def _conflict_message(name: str, message: str, hard: dict[str, str], namespace: str) -> str:
    wanted = ", ".join(f"{key}={value}" for key, value in sorted(hard.items()))
    return (f"ResourceQuota {name}: {message} The portal does not take keys over from another field manager in "
            f"{namespace} (quota ownership policy). Fix: have that manager set {wanted} on {name}, or ask a platform "
            f"admin to let the portal own accelerator keys in {namespace} (admin: quota ownership policies), then "
            "retry.")


def quota_apply(*, cluster_id: int, namespace: str, client_factory: ClientFactory | None = None) -> str:
    """Apply the namespace's plan (outside any transaction), then record the answer on the requests.

    Returns "applied", "conflict" or "refused". Raises ClusterUnreachableError for retryable failures. Another field
    manager's key is forced only where the admin's policy says the portal owns accelerator keys."""
    from inventory.models import Cluster
    from inventory.services.clients import client_for

    cluster = Cluster.objects.get(pk=cluster_id)
    plan = quota_plan(cluster_id, namespace)
    _remember(cluster_id, namespace, plan)  # before the apply: a baseline must never include our own grant
    force = portal_owns_keys(cluster_id, namespace)
    client = (client_factory or client_for)(cluster)
    outcome, message, objects = "applied", "", []
    try:
        # Someone else's objects first, ours last: the effective limit rises before our copy of a key goes away.
        for name in sorted(plan.targets, key=lambda n: (n == QUOTA_NAME, n)):
            document = quota_document(cluster_id, namespace, name=name, hard=plan.targets[name])
            result = client.apply(document, field_manager=FIELD_MANAGER)
            forced = False
            if result.conflict and force:
                result, forced = client.apply(document, field_manager=FIELD_MANAGER, force=True), True
            after = as_dict(as_dict(result.object).get("spec")).get("hard") if result.applied else None
            objects.append({"quota": name, "before": plan.before.get(name), "after": after, "forced": forced,
                            "applied": plan.targets[name], "outcome": "applied" if result.applied else "failed"})
            if not result.applied:
                outcome = "conflict" if result.conflict else "refused"
                message = (_conflict_message(name, result.message, plan.targets[name], namespace)
                           if result.conflict else f"ResourceQuota {name}: {result.message}")
                break
    finally:
        client.close()
    _record_apply(cluster_id, namespace, plan.granted, outcome, message, objects=objects)
    return outcome


@transaction.atomic
def _remember(cluster_id: int, namespace: str, plan: QuotaPlan) -> None:
    state, _ = QuotaNamespaceState.objects.select_for_update().get_or_create(cluster_id=cluster_id,
                                                                              namespace=namespace)
    state.baselines, state.targets = plan.baselines, plan.targets
    state.save(update_fields=["baselines", "targets"])


@transaction.atomic
def _record_apply(cluster_id: int, namespace: str, hard: dict[str, str], outcome: str, message: str,
                  objects: list[dict[str, Any]] | None = None) -> None:
    now = timezone.now()
    requests = list(QuotaRequest.objects.select_for_update().filter(
        cluster_id=cluster_id, namespace=namespace, target=QuotaTarget.RESOURCE_QUOTA,
        state__in=(State.APPLYING, State.FAILED)).select_related("requested_by"))
    reviewers = approvers() if outcome != "applied" and requests else []
    for request in requests:
        request.apply_attempts += 1
        request.apply_attempted_at = now
        request.applied_hard = hard
        if outcome == "applied":
            request.apply_error = ""
            request.state = State.APPLYING  # a failed one included in a later successful apply is applied too
        else:
            request.state = State.FAILED
            request.apply_error = (f"{'Field manager conflict' if outcome == 'conflict' else 'The cluster refused'}: "
                                   f"{message}")[:2000]
            notify(users=[request.requested_by, *reviewers], subject=f"Quota request #{request.pk}: apply failed",
                   body=request.apply_error[:1000], url=_url(request))
        request.save()
        audit_record(actor=None, verb=f"quota_request.apply_{outcome}", target=request,
                     after={"hard": hard, "namespace": namespace, "message": message[:500]})
    state, _ = QuotaNamespaceState.objects.select_for_update().get_or_create(cluster_id=cluster_id,
                                                                              namespace=namespace)
    for entry in objects or []:  # every quota object written: its hard before and after, in this transaction
        audit_record(actor=None, verb=f"quota_object.{entry['outcome']}", target=state,
                     before={"quota": entry["quota"], "hard": entry["before"]},
                     after={"quota": entry["quota"], "hard": entry["after"], "applied": entry["applied"],
                            "forced": entry["forced"]},
                     data={"field_manager": FIELD_MANAGER, "namespace": namespace})
    before = state.status
    state.attempted_at = now
    state.desired = hard
    if outcome == "applied":
        state.status = NamespaceStatus.APPLYING  # until the sync shows it (the reconcile then says in sync)
        state.failures = 0
        state.last_error = ""
    else:
        state.status = NamespaceStatus.FAILED
        state.failures += 1
        state.last_error = (f"{'Field manager conflict' if outcome == 'conflict' else 'The cluster refused'}: "
                            f"{message}")[:2000]
    state.save()
    if state.status != before:
        audit_record(actor=None, verb=f"quota_namespace.{state.status}", target=state,
                     before={"status": before}, after=_state_snapshot(state))


def quota_apply_failed(*, cluster_id: int, namespace: str, error: str) -> None:
    """Retries are exhausted: the requests become failed with the error, visible and retryable; the namespace's
    state says so and the reconcile tries again after a backoff."""
    _record_apply(cluster_id, namespace, desired_hard(cluster_id, namespace), "refused", error)


def _mirrored_hard(cluster_id: int, namespace: str) -> dict[str, dict[str, Any]]:
    return {q["name"]: q["hard"] or {} for q in ResourceQuota.objects.live().filter(
        cluster_id=cluster_id, namespace=namespace).values("name", "hard")}


def _plan_shows(plan: QuotaPlan, mirrored: dict[str, dict[str, Any]]) -> bool:
    """Does the cluster (as the sync shows it) carry every value of the plan, and no stale key in our object?"""
    for name, hard in plan.targets.items():
        if name not in mirrored:
            if hard:
                return False
            continue
        if name == QUOTA_NAME and {k for k in mirrored[name] if is_accelerator_key(k)} - set(hard):
            return False
        try:
            if any(parse_quantity(mirrored[name].get(k, "-1")) != parse_quantity(v) for k, v in hard.items()):
                return False
        except ValueError:
            return False
    return True


def _quota_shows(cluster_id: int, namespace: str, now: dt.datetime | None = None) -> bool:
    return _plan_shows(quota_plan(cluster_id, namespace, now=now), _mirrored_hard(cluster_id, namespace))


def _observed(plan: QuotaPlan, mirrored: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Per key, the increase the cluster carries: the least, over the objects the plan writes that carry the key,
    of their value minus the baseline (our own object's baseline is 0)."""
    increases: dict[str, Fraction] = {}
    for name, hard in plan.targets.items():
        keys = set(hard) | ({k for k in mirrored.get(name, {}) if is_accelerator_key(k)} if name == QUOTA_NAME
                            else set())
        for key in keys:
            if key not in mirrored.get(name, {}):
                continue
            increase = _amount(mirrored[name][key]) - _amount(plan.baselines.get(name, {}).get(key, 0))
            increases[key] = min(increases.get(key, increase), increase)
    return {key: format_quantity(value) for key, value in sorted(increases.items())
            if value or key in plan.granted}


def quota_requests_confirm(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Beat: requests past their end expire whatever their state (granted ones lower the quota); applying requests
    whose quota the sync now shows become active; applies that never happened (worker killed) are re-enqueued;
    then every managed namespace is compared with the cluster (`quota_namespaces_reconcile`). Idempotent."""
    now = now or timezone.now()
    counts = {"activated": 0, "expired": 0, "reenqueued": 0}
    enqueue: set[Scope] = set()
    with transaction.atomic():
        for request in QuotaRequest.objects.select_for_update().filter(ends_at__lte=now).exclude(state__in=ENDED):
            before = _snapshot(request)
            granted = request.state in GRANTED
            request.state = State.EXPIRED
            request.save(update_fields=["state", "updated_at"])
            audit_record(actor=None, verb="quota_request.expired", target=request, before=before,
                         after=_snapshot(request), data={"was_granted": granted})
            if granted:
                enqueue.add(_scope(request))
            counts["expired"] += 1
    for pk in QuotaRequest.objects.filter(state=State.APPLYING).values_list("pk", flat=True):
        with transaction.atomic():
            request = QuotaRequest.objects.select_for_update().filter(pk=pk, state=State.APPLYING).first()
            if request is None:
                continue
            scope = _scope(request)
            if request.applied_hard and _scope_shows(scope, now):
                before = _snapshot(request)
                request.state = State.ACTIVE
                request.save(update_fields=["state", "updated_at"])
                audit_record(actor=None, verb="quota_request.active", target=request, before=before,
                             after={**_snapshot(request), "hard": request.applied_hard})
                _notify_requester(request, "is active in the cluster")
                counts["activated"] += 1
            elif request.apply_attempted_at is None or now - request.apply_attempted_at > RETRY_AFTER:
                enqueue.add(scope)
                counts["reenqueued"] += 1
    drifted = {(QuotaTarget.RESOURCE_QUOTA, *due) for due in quota_namespaces_reconcile(
        now=now, skip={(c, n) for t, c, n in enqueue if t == QuotaTarget.RESOURCE_QUOTA})}
    drifted |= {(QuotaTarget.CLUSTER_QUEUE, *due) for due in queues_reconcile(
        now=now, skip={(c, n) for t, c, n in enqueue if t == QuotaTarget.CLUSTER_QUEUE}, backoff=_backoff)}
    with transaction.atomic():
        for scope in sorted(enqueue | drifted):
            _enqueue_scope(scope)
    counts["drift_reapplied"] = len(drifted)
    return counts


def _scope_shows(scope: Scope, now: dt.datetime) -> bool:
    target, cluster_id, name = scope
    if target == QuotaTarget.CLUSTER_QUEUE:
        return queue_shows(cluster_id, name, now=now)
    return _quota_shows(cluster_id, name, now)


def _enqueue_namespace(cluster_id: int, namespace: str) -> None:
    from portal.quota.tasks import quota_apply_task

    transaction.on_commit(lambda: quota_apply_task.delay(cluster_id, namespace))


def _backoff(failures: int) -> dt.timedelta:
    return min(RETRY_AFTER * 2 ** min(max(failures - 1, 0), 6), MAX_BACKOFF)


def _state_snapshot(state: QuotaNamespaceState) -> dict[str, Any]:
    return {"namespace": state.namespace, "status": state.status, "desired": state.desired,
            "observed": state.observed, "error": state.last_error[:500]}


def quota_namespaces_reconcile(*, now: dt.datetime | None = None,
                               skip: set[tuple[int, str]] | None = None) -> set[tuple[int, str]]:
    """Compare every namespace where the portal grants (or granted) quota with what the sync shows, record the
    status, and return the namespaces whose drift is due for a re-apply (backoff after failures; `skip`: already
    enqueued). Like the grants' reconcile, this is what lowers a quota whose lowering failed."""
    now = now or timezone.now()
    skip = skip or set()
    due: set[tuple[int, str]] = set()
    scopes = set(QuotaRequest.objects.filter(state__in=(*GRANTED, State.EXPIRED), target=QuotaTarget.RESOURCE_QUOTA)
                 .values_list("cluster_id", "namespace").distinct())
    scopes |= set(QuotaNamespaceState.objects.values_list("cluster_id", "namespace"))
    for cluster_id, namespace in sorted(scopes):
        plan = quota_plan(cluster_id, namespace, now=now)
        mirrored = _mirrored_hard(cluster_id, namespace)
        desired, observed = plan.granted, _observed(plan, mirrored)
        applying = QuotaRequest.objects.filter(cluster_id=cluster_id, namespace=namespace,
                                               state=State.APPLYING).exists()
        with transaction.atomic():
            state, _ = QuotaNamespaceState.objects.select_for_update().get_or_create(
                cluster_id=cluster_id, namespace=namespace, defaults={"status": NamespaceStatus.IN_SYNC})
            before = state.status
            state.desired, state.observed, state.checked_at = desired, observed, now
            if state.observe(shows=_plan_shows(plan, mirrored), applying=applying, now=now,
                             backoff=_backoff(state.failures)) and (cluster_id, namespace) not in skip:
                due.add((cluster_id, namespace))
            state.save()
            if state.status != before:
                audit_record(actor=None, verb=f"quota_namespace.{state.status}", target=state,
                             before={"status": before}, after=_state_snapshot(state))
    return due
