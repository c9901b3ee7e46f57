"""Exceptions enforced in the cluster: what the portal writes, when a grant counts as active, and the undoing.

adminAccess — the namespace label `resource.kubernetes.io/admin-access: "true"`, server-side applied under our field
manager while any adminAccess grant of the namespace is in force, and removed (we stop applying it, so the server
drops the field we owned) when none is. The API server checks the label only when a claim is created, so at the end
the admin claims created during the window that still exist are flagged, and deleted where the policy says so.

privileged — a ValidatingAdmissionPolicy and its binding deny pods that violate the baseline Pod Security Standard
(inventory.k8s.podsecurity generates the CEL) in every namespace but the exempt system namespaces, unless the
exception ConfigMap `accelerator-portal-system/privileged-exceptions` has an entry
`<namespace>_<service account>[_<workload>]` (portal.models.exception_key); the portal keeps exactly the in-force
grants' entries there.

Everything is desired state computed from the database, so an apply is idempotent and safe to repeat after a
crash. A grant becomes active only when the sync shows the label / entry; an ended grant is "cleaned up" when the
sync shows it gone. `enforcement_reconcile` (beat) drives both and re-applies what drifted.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from audit.services import audit_record
from inventory.k8s.podsecurity import cel_variables
from inventory.k8s.types import PORTAL_SYSTEM_NAMESPACE
from inventory.models import AdmissionPolicy, AdmissionPolicyBinding, Cluster, ConfigMap, Namespace, ResourceClaim
from portal.access import IN_FORCE, access_policy, grant_snapshot
from portal.models import EXCEPTION_KEY_SEPARATOR, AccessKind, EnforcementSettings, Grant, GrantUse, TenantNamespace
from portal.quota import FIELD_MANAGER

if TYPE_CHECKING:
    from inventory.services.clients import ClientFactory  # imported inside the appliers at run time

logger = logging.getLogger(__name__)

ADMIN_LABEL = "resource.kubernetes.io/admin-access"
POLICY_NAME = "accelerator-portal-privileged"
EXCEPTIONS_NAME = "privileged-exceptions"
MANAGED_BY = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
RETRY_AFTER = dt.timedelta(minutes=2)


def in_force(now: dt.datetime) -> Q:
    return Q(state__in=IN_FORCE, starts_at__lte=now, ends_at__gt=now)


# ------------------------------------------------------------------------------------------------ documents


def admin_namespace_document(cluster_id: int, namespace: str, now: dt.datetime) -> dict[str, Any]:
    """The namespace as we apply it: only the admin-access label, and only while a grant is in force."""
    metadata: dict[str, Any] = {"name": namespace}
    if Grant.objects.filter(in_force(now), kind=AccessKind.ADMIN_ACCESS, cluster_id=cluster_id,
                            namespace=namespace).exists():
        metadata["labels"] = {ADMIN_LABEL: "true"}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def exception_entries(cluster_id: int, now: dt.datetime) -> dict[str, str]:
    entries: dict[str, str] = {}
    for grant in Grant.objects.filter(in_force(now), kind=AccessKind.PRIVILEGED, cluster_id=cluster_id
                                      ).order_by("ends_at"):
        entries[grant.exception_key] = f"grant={grant.pk} until={grant.ends_at.isoformat()}"
    return entries


def exempt_namespaces(cluster_id: int) -> list[str]:
    """The system namespaces where the policy is not bound and the scan does not look: the configured ones
    (PORTAL_ENFORCEMENT_EXEMPT_NAMESPACES + …_EXTRA_…), except any that is assigned to a tenant in this cluster (a
    tenant's namespace is always enforced, whatever its name)."""
    configured = {str(name).strip() for name in [*settings.PORTAL_ENFORCEMENT_EXEMPT_NAMESPACES,
                                                 *settings.PORTAL_ENFORCEMENT_EXTRA_EXEMPT_NAMESPACES]}
    tenants = set(TenantNamespace.objects.filter(cluster_id=cluster_id).values_list("namespace", flat=True))
    return sorted(configured - tenants - {""})


_SERVICE_ACCOUNT = ("has(object.spec.serviceAccountName) && object.spec.serviceAccountName != ''"
                    " ? object.spec.serviceAccountName : 'default'")
_WORKLOAD = ("has(object.metadata.labels) && 'app.kubernetes.io/name' in object.metadata.labels"
             " ? object.metadata.labels['app.kubernetes.io/name'] : ''")
_SEPARATOR = f"'{EXCEPTION_KEY_SEPARATOR}'"
_ALLOWED = ("variables.baselineViolations.size() == 0 || (has(params.data) && (variables.key in params.data"
            f" || (variables.workload != '' && (variables.key + {_SEPARATOR} + variables.workload) in params.data)))")
_MESSAGE = ("'the pod violates the baseline Pod Security Standard (' + variables.baselineViolations.join(', ')"
            " + ') and needs an active exception for service account ' + variables.serviceAccount + ' in '"
            " + request.namespace + ' (request one in the Accelerator Portal)'")
POLICY_HASH_ANNOTATION = "accelerator-portal/spec-sha256"


def _policy_spec() -> dict[str, Any]:
    return {
        "failurePolicy": "Fail",
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]},
            {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/ephemeralcontainers"],
             "operations": ["UPDATE"]},
        ]},
        "variables": [
            *cel_variables(),  # containers, one per baseline control, baselineViolations (inventory.k8s.podsecurity)
            {"name": "serviceAccount", "expression": _SERVICE_ACCOUNT},
            {"name": "workload", "expression": _WORKLOAD},
            {"name": "key", "expression": f"request.namespace + {_SEPARATOR} + variables.serviceAccount"},
        ],
        "validations": [{"expression": _ALLOWED, "messageExpression": _MESSAGE, "reason": "Forbidden"}],
    }


def spec_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def policy_document() -> dict[str, Any]:
    """The ValidatingAdmissionPolicy: a pod that violates the baseline Pod Security Standard is admitted only with an
    exception entry for its namespace and service account (and workload). Pods are checked on CREATE (their security
    context and volumes are immutable afterwards) and again when ephemeral containers are added (the whole pod, as
    upstream Pod Security admission does), so an expired exception never blocks the finalizer updates of a running
    pod. The annotation carries the hash of the spec, so the reconcile notices a policy from an older portal."""
    spec = _policy_spec()
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME, "labels": MANAGED_BY,
                     "annotations": {POLICY_HASH_ANNOTATION: spec_hash(spec)}},
        "spec": spec,
    }


def binding_document(exempt: list[str]) -> dict[str, Any]:
    """The binding: every namespace but the exempt system namespaces (enforcement does not depend on tenancy: a
    namespace nobody was assigned is where an unnoticed privileged pod would run). A missing exception object denies
    every pod create the binding matches (fail closed) until the portal re-applies it; the portal's own namespaces
    are exempt, so it keeps running meanwhile."""
    selector: dict[str, Any] = {}
    if exempt:  # NotIn needs at least one value; without exemptions every namespace matches
        selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                          "values": sorted(exempt)}]}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME, "labels": MANAGED_BY},
        "spec": {
            "policyName": POLICY_NAME,
            "validationActions": ["Deny"],
            "paramRef": {"name": EXCEPTIONS_NAME, "namespace": PORTAL_SYSTEM_NAMESPACE,
                         "parameterNotFoundAction": "Deny"},
            "matchResources": {"namespaceSelector": selector},
        },
    }


def manages_policy(cluster_id: int) -> bool:
    settings_row = EnforcementSettings.objects.filter(cluster_id=cluster_id).first()
    return settings_row.manage_admission_policy if settings_row else True


def privileged_documents(cluster_id: int, now: dt.datetime, *, include_policy: bool = True) -> list[dict[str, Any]]:
    """In apply order: the system namespace, the exception object, then the policy and (last, so its param exists
    first) the binding."""
    documents: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PORTAL_SYSTEM_NAMESPACE, "labels": MANAGED_BY}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": EXCEPTIONS_NAME, "namespace": PORTAL_SYSTEM_NAMESPACE, "labels": MANAGED_BY},
         "data": exception_entries(cluster_id, now)},
    ]
    if include_policy:
        documents += [policy_document(), binding_document(exempt_namespaces(cluster_id))]
    return documents


# ------------------------------------------------------------------------------------------------ cluster state


def label_owners(raw: dict[str, Any]) -> list[str]:
    owners = []
    for entry in (raw.get("metadata") or {}).get("managedFields") or []:
        labels = (((entry or {}).get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
        if f"f:{ADMIN_LABEL}" in labels:
            owners.append(str(entry.get("manager") or ""))
    return owners


def namespace_label_state(cluster_id: int, namespace: str) -> tuple[bool, list[str], str]:
    """(label is "true", field managers that own it, resourceVersion) as the sync shows the namespace."""
    row = Namespace.objects.live().filter(cluster_id=cluster_id, name=namespace).values("labels", "raw",
                                                                                         "resource_version").first()
    if row is None:
        return False, [], ""
    return (row["labels"] or {}).get(ADMIN_LABEL) == "true", label_owners(row["raw"] or {}), row["resource_version"]


def exception_keys(cluster_id: int) -> tuple[set[str], str] | None:
    """The entries of the exception object as the sync shows it (None: the object does not exist)."""
    row = ConfigMap.objects.live().filter(cluster_id=cluster_id, namespace=PORTAL_SYSTEM_NAMESPACE,
                                          name=EXCEPTIONS_NAME).values("raw", "resource_version").first()
    if row is None:
        return None
    data = (row["raw"] or {}).get("data") or {}
    return set(data) if isinstance(data, dict) else set(), row["resource_version"]


def shows_in_cluster(grant: Grant) -> dict[str, Any] | None:
    """Evidence that the cluster carries the grant (None: not yet)."""
    if grant.kind == AccessKind.ADMIN_ACCESS:
        labelled, owners, version = namespace_label_state(grant.cluster_id, grant.namespace)
        return {"namespace_resource_version": version, "label_owners": owners} if labelled else None
    keys = exception_keys(grant.cluster_id)
    if keys is None or grant.exception_key not in keys[0]:
        return None
    return {"exception_object_resource_version": keys[1], "key": grant.exception_key}


def undone_in_cluster(grant: Grant, now: dt.datetime) -> dict[str, Any] | None:
    """Evidence that what this grant put in the cluster is gone, or stays for another grant (None: not yet)."""
    same_scope = Grant.objects.filter(in_force(now), kind=grant.kind, cluster_id=grant.cluster_id,
                                      namespace=grant.namespace).exclude(pk=grant.pk)
    if grant.kind == AccessKind.ADMIN_ACCESS:
        other = same_scope.values_list("pk", flat=True).first()
        if other is not None:
            return {"label_kept_for_grant": other}
        labelled, owners, version = namespace_label_state(grant.cluster_id, grant.namespace)
        if labelled and FIELD_MANAGER in owners:
            return None
        if access_policy(grant.kind).delete_claims_at_end and outliving_claims(grant, now):
            return None
        return {"namespace_resource_version": version, "label_still_set_by": owners if labelled else []}
    other = next((g.pk for g in same_scope if g.exception_key == grant.exception_key), None)
    if other is not None:
        return {"entry_kept_for_grant": other}
    keys = exception_keys(grant.cluster_id)
    if keys is not None and keys[0] & {grant.exception_key, grant.legacy_exception_key}:
        return None  # still there (in either format: an exception object from before the upgrade is rewritten)
    return {"exception_object_resource_version": keys[1] if keys else None}


def admin_claim(raw: dict[str, Any]) -> bool:
    """A claim asks for (spec) or holds (status) admin access to devices."""
    spec_requests = ((raw.get("spec") or {}).get("devices") or {}).get("requests") or []
    for request in spec_requests:
        if isinstance(request, dict) and isinstance(request.get("exactly"), dict) \
                and request["exactly"].get("adminAccess") is True:
            return True
    results = (((raw.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return any(isinstance(r, dict) and r.get("adminAccess") is True for r in results)


def admin_claims(cluster_id: int, namespace: str | None = None) -> list[ResourceClaim]:
    claims = ResourceClaim.objects.live().filter(cluster_id=cluster_id).only(
        "uid", "name", "namespace", "raw", "k8s_created_at")
    if connection.vendor == "postgresql":  # jsonb containment: the few admin claims among 10,000, found in SQL
        claims = claims.filter(Q(raw__spec__devices__requests__contains=[{"exactly": {"adminAccess": True}}])
                               | Q(raw__status__allocation__devices__results__contains=[{"adminAccess": True}]))
    if namespace is not None:
        claims = claims.filter(namespace=namespace)
    return [claim for claim in claims if admin_claim(claim.raw or {})]


def covering_grant(grants: list[Grant], created_at: dt.datetime | None) -> Grant | None:
    """The adminAccess grant whose window covered a claim's creation (the label was set then)."""
    if created_at is None:
        return None
    for grant in grants:
        end = grant.ended_at or grant.ends_at
        if grant.starts_at - dt.timedelta(seconds=5) <= created_at <= end + dt.timedelta(seconds=5):
            return grant
    return None


def outliving_claims(grant: Grant, now: dt.datetime) -> list[ResourceClaim]:
    """Admin claims of the namespace created during this grant's window that still exist after it ended."""
    if grant.state in IN_FORCE and grant.ends_at > now:
        return []
    return [claim for claim in admin_claims(grant.cluster_id, grant.namespace)
            if covering_grant([grant], claim.k8s_created_at) is not None]


# ------------------------------------------------------------------------------------------------ apply


def enforcement_apply(*, cluster_id: int, namespace: str, client_factory: ClientFactory | None = None,
                      now: dt.datetime | None = None) -> str:
    """Bring one scope to its desired state: an adminAccess namespace (namespace given) or the cluster's privileged
    enforcement (namespace empty). Outside any transaction; returns "applied", "conflict" or "refused"; raises
    ClusterUnreachableError for retryable failures (the task retries with backoff)."""
    from inventory.models import Cluster
    from inventory.services.clients import client_for

    now = now or timezone.now()
    cluster = Cluster.objects.get(pk=cluster_id)
    if namespace:
        documents = [admin_namespace_document(cluster_id, namespace, now)]
    else:
        documents = privileged_documents(cluster_id, now, include_policy=manages_policy(cluster_id))
    client = (client_factory or client_for)(cluster)
    outcome, message, deleted = "applied", "", []
    try:
        for document in documents:
            result = client.apply(document, field_manager=FIELD_MANAGER)
            if not result.applied:
                outcome = "conflict" if result.conflict else "refused"
                message = f"{document['kind']} {document['metadata']['name']}: {result.message}"
                break
        if outcome == "applied" and namespace and "labels" not in documents[0]["metadata"]:
            deleted = _delete_outliving_claims(client, cluster_id, namespace, now)
    finally:
        client.close()
    _record_apply(cluster_id, namespace, outcome, message, documents, deleted, now)
    return outcome


def _delete_outliving_claims(client: Any, cluster_id: int, namespace: str, now: dt.datetime) -> list[tuple[int, Any]]:
    """Where the policy says so, delete the admin claims that outlived their grant (uid precondition)."""
    if not access_policy(AccessKind.ADMIN_ACCESS).delete_claims_at_end:
        return []
    ended = list(Grant.objects.filter(kind=AccessKind.ADMIN_ACCESS, cluster_id=cluster_id, namespace=namespace,
                                      state__in=(Grant.State.EXPIRED, Grant.State.REVOKED)).order_by("-ended_at"))
    deleted = []
    for claim in admin_claims(cluster_id, namespace):
        grant = covering_grant(ended, claim.k8s_created_at)
        if grant is not None and client.delete("resource.k8s.io/v1", "ResourceClaim", namespace=namespace,
                                               name=claim.name, uid=claim.uid):
            deleted.append((grant.pk, claim))
    return deleted


@transaction.atomic
def _record_apply(cluster_id: int, namespace: str, outcome: str, message: str, documents: list[dict[str, Any]],
                  deleted: list[tuple[int, Any]], now: dt.datetime) -> None:
    kind = AccessKind.ADMIN_ACCESS if namespace else AccessKind.PRIVILEGED
    if not namespace:
        EnforcementSettings.objects.update_or_create(cluster_id=cluster_id, defaults={"privileged_applied_at": now})
    scope = Grant.objects.select_for_update().filter(kind=kind, cluster_id=cluster_id).filter(
        Q(state=Grant.State.PENDING) | Q(state__in=(Grant.State.EXPIRED, Grant.State.REVOKED),
                                         cleanup_confirmed_at__isnull=True))
    if namespace:
        scope = scope.filter(namespace=namespace)
    summary = [{"kind": d["kind"], "name": d["metadata"]["name"],
                **({"labels": d["metadata"].get("labels", {})} if d["kind"] == "Namespace" else {}),
                **({"keys": sorted(d["data"])} if d["kind"] == "ConfigMap" else {})} for d in documents]
    for grant in scope:
        grant.apply_attempted_at = now
        grant.apply_error = "" if outcome == "applied" else f"{outcome}: {message}"[:2000]
        grant.save(update_fields=["apply_attempted_at", "apply_error", "updated_at"])
        audit_record(actor=None, verb=f"grant.apply_{outcome}", target=grant,
                     after={"documents": summary, "message": message[:500]})
    for grant_id, claim in deleted:
        grant = Grant.objects.get(pk=grant_id)
        use, _ = GrantUse.objects.get_or_create(grant=grant, object_uid=claim.uid, defaults={
            "object_kind": "ResourceClaim", "namespace": claim.namespace, "name": claim.name})
        use.outlived_grant = True
        use.deleted_by_portal_at = now
        use.save(update_fields=["outlived_grant", "deleted_by_portal_at"])
        audit_record(actor=None, verb="grant.claim_deleted", target=grant,
                     data={"claim": f"{claim.namespace}/{claim.name}", "uid": claim.uid,
                           "reason": "adminAccess claim outlived its grant; policy deletes such claims"})


def enforcement_apply_failed(*, cluster_id: int, namespace: str, error: str) -> None:
    """Retries exhausted: the grants in scope carry the error (the reconcile tries again later)."""
    _record_apply(cluster_id, namespace, "refused", error, [], [], timezone.now())


# ------------------------------------------------------------------------------------------------ reconcile


def _enqueue(cluster_id: int, namespace: str) -> None:
    from portal.tasks import enforcement_apply_task

    transaction.on_commit(lambda: enforcement_apply_task.delay(cluster_id, namespace))


def _scope_key(grant: Grant) -> tuple[int, str]:
    return grant.cluster_id, grant.namespace if grant.kind == AccessKind.ADMIN_ACCESS else ""


def grants_confirm(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Beat: pending grants the sync now shows become active; ended grants the sync shows undone are marked
    cleaned up; lost or failed applies are re-enqueued (once per scope). Idempotent; a grant that was revoked or
    expired meanwhile is never activated (state re-read under the row lock)."""
    now = now or timezone.now()
    counts = {"activated": 0, "cleaned": 0, "reenqueued": 0}
    enqueue: set[tuple[int, str]] = set()
    for grant in Grant.objects.filter(in_force(now), state=Grant.State.PENDING):
        evidence = shows_in_cluster(grant)
        if evidence is None:
            if grant.apply_attempted_at is None or now - grant.apply_attempted_at > RETRY_AFTER:
                enqueue.add(_scope_key(grant))
            continue
        with transaction.atomic():
            locked = Grant.objects.select_for_update(of=("self",)).select_related("request__requested_by").filter(
                pk=grant.pk, state=Grant.State.PENDING, ends_at__gt=now).first()
            if locked is None:
                continue
            before = grant_snapshot(locked)
            locked.state = Grant.State.ACTIVE
            locked.activated_at = now
            locked.save(update_fields=["state", "activated_at", "updated_at"])
            audit_record(actor=None, verb="grant.active", target=locked, before=before, after=grant_snapshot(locked),
                         data={"evidence": evidence})
            from portal.notifications import notify

            notify(users=[locked.request.requested_by], subject=f"Grant {locked.pk} is active in the cluster",
                   body=f"{locked.get_kind_display()} for {locked.namespace} until {locked.ends_at:%Y-%m-%d %H:%M} UTC",
                   url=locked.request.get_absolute_url())
            counts["activated"] += 1
    for grant in Grant.objects.filter(state__in=(Grant.State.EXPIRED, Grant.State.REVOKED),
                                      cleanup_confirmed_at__isnull=True):
        evidence = undone_in_cluster(grant, now)
        if evidence is None:
            attempted = grant.apply_attempted_at
            if attempted is None or (grant.ended_at and attempted < grant.ended_at
                                     and now - grant.ended_at > dt.timedelta(seconds=30)) \
                    or now - attempted > RETRY_AFTER:
                enqueue.add(_scope_key(grant))
            continue
        with transaction.atomic():
            locked = Grant.objects.select_for_update().filter(pk=grant.pk, cleanup_confirmed_at__isnull=True).first()
            if locked is None:
                continue
            locked.cleanup_confirmed_at = now
            locked.save(update_fields=["cleanup_confirmed_at", "updated_at"])
            audit_record(actor=None, verb="grant.cleanup_confirmed", target=locked, data={"evidence": evidence})
            counts["cleaned"] += 1
    enqueue |= _policy_drift(now)
    with transaction.atomic():
        for cluster_id, namespace in sorted(enqueue):
            _enqueue(cluster_id, namespace)
    counts["reenqueued"] = len(enqueue)
    return counts


def _policy_drift(now: dt.datetime) -> set[tuple[int, str]]:
    """Enabled clusters whose exception object, policy or binding differ from the desired state (never applied,
    deleted, edited, written by an older portal, the exempt namespaces changed): re-apply the privileged scope, at
    most once a minute per cluster. Enforcement does not wait for tenant namespaces."""
    scopes = set()
    recent = set(EnforcementSettings.objects.filter(privileged_applied_at__gt=now - dt.timedelta(seconds=60)
                                                    ).values_list("cluster_id", flat=True))
    for cluster_id in Cluster.objects.enabled().exclude(pk__in=recent).values_list("pk", flat=True):
        keys = exception_keys(cluster_id)
        stale_entries = keys is None or keys[0] != set(exception_entries(cluster_id, now))
        if stale_entries or (manages_policy(cluster_id) and policy_problems(cluster_id)):
            scopes.add((cluster_id, ""))
    return scopes


def policy_problems(cluster_id: int) -> list[str]:
    """How the synced policy and binding differ from what the portal would apply (empty: as desired)."""
    problems = []
    raw = AdmissionPolicy.objects.live().filter(cluster_id=cluster_id, name=POLICY_NAME).values_list(
        "raw", flat=True).first()
    desired = policy_document()
    if raw is None:
        problems.append(f"ValidatingAdmissionPolicy {POLICY_NAME} is missing")
    else:
        annotations = ((raw.get("metadata") or {}).get("annotations") or {})
        spec = raw.get("spec") or {}
        if annotations.get(POLICY_HASH_ANNOTATION) != desired["metadata"]["annotations"][POLICY_HASH_ANNOTATION] \
                or any(spec.get(part) != desired["spec"][part] for part in ("variables", "validations", "paramKind")):
            problems.append(f"ValidatingAdmissionPolicy {POLICY_NAME} differs from the portal's (edited, or written "
                            "by an older portal)")
    binding = AdmissionPolicyBinding.objects.live().filter(cluster_id=cluster_id, name=POLICY_NAME).values_list(
        "raw", flat=True).first()
    if binding is None:
        problems.append(f"ValidatingAdmissionPolicyBinding {POLICY_NAME} is missing")
    else:
        spec, wanted = binding.get("spec") or {}, binding_document(exempt_namespaces(cluster_id))["spec"]
        if "Deny" not in (spec.get("validationActions") or []):
            problems.append("the binding no longer denies (validationActions without Deny)")
        if spec.get("paramRef") != wanted["paramRef"] or spec.get("policyName") != wanted["policyName"] \
                or (spec.get("matchResources") or {}).get("namespaceSelector") \
                != wanted["matchResources"]["namespaceSelector"]:
            problems.append("the binding's namespaces or exception object differ from the portal's")
    return problems
