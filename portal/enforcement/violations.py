"""Detection from synced data: what runs in the cluster against what the portal granted.

Per cluster, each scan computes the current findings and reconciles them with the open Violation rows: a new finding
opens a violation (audited), a finding that still holds refreshes its evidence, one that no longer holds is
resolved (audited) and kept. The same pass links uses — the admin claims and privileged pods a grant allowed — to
their grant (GrantUse, audited once), so a grant's id leads to everything it allowed.

Findings:
- an adminAccess claim (requested in the spec or allocated with `adminAccess` in the status) created when no grant
  covered its namespace; or one created under a grant that has since ended (outlived);
- a running or pending pod that violates the baseline Pod Security Standard (inventory.k8s.podsecurity: privileged,
  host namespaces, any hostPath, added capabilities, …), in any namespace but the exempt system namespaces, without
  an in-force exception for its service account (and workload);
- a namespace labelled `resource.kubernetes.io/admin-access: "true"` without a grant, by someone other than the
  portal (drift);
- a grant whose cluster state disagrees with the database (active but missing; ended but still present);
- the admission policy or its binding missing, changed or outdated where the portal manages it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from audit.services import audit_record
from inventory.k8s.podsecurity import pod_violations, prefilter_keys
from inventory.models import Cluster, Namespace, Pod
from portal.access.models import AccessKind, Grant, GrantUse, exception_key
from portal.access.services import IN_FORCE, access_policy
from portal.enforcement.models import EnforcementSettings, Violation
from portal.enforcement.services import (
    ADMIN_LABEL,
    POLICY_NAME,
    admin_claims,
    covering_grant,
    exception_keys,
    exempt_namespaces,
    in_force,
    label_owners,
    manages_policy,
    policy_problems,
)
from portal.quota.services import FIELD_MANAGER

Kind = Violation.Kind
GRACE = dt.timedelta(minutes=2)


@dataclass
class ViolationFinding:
    """A violation one scan found, before `_reconcile` opens, refreshes or resolves its `Violation` row."""

    namespace: str
    message: str
    evidence: dict[str, Any]
    grant_id: int | None = None


@dataclass
class Scan:
    findings: dict[tuple[str, str], ViolationFinding] = field(default_factory=dict)
    uses: list[tuple[Grant, str, Any]] = field(default_factory=list)

    def add(self, kind: str, subject: str, finding: ViolationFinding) -> None:
        self.findings[(kind, subject)] = finding


def privileged_details(raw: dict[str, Any]) -> dict[str, Any] | None:
    """What makes a pod need an exception (its baseline Pod Security Standard violations, from
    inventory.k8s.podsecurity), with its service account and workload label; None for a pod that meets the
    baseline."""
    found = pod_violations(raw)
    if not found:
        return None
    spec_value = raw.get("spec")
    spec = spec_value if isinstance(spec_value, dict) else {}
    labels = (raw.get("metadata") or {}).get("labels") or {}
    return {"violations": [{"control": v.control, "container": v.container, "container_kind": v.container_kind,
                            "field": v.field, "value": v.value} for v in found],
            "controls": sorted({v.title for v in found}),
            "service_account": str(spec.get("serviceAccountName") or "default"),
            "workload": str(labels.get("app.kubernetes.io/name") or "") if isinstance(labels, dict) else ""}


# A pod whose JSON has none of these cannot violate (podsecurity.prefilter_keys): for a pod the sync has not
# classified yet, a regex over its jsonb text narrows the candidates in SQL without ever dropping one that violates.
_PREFILTER = "|".join(re.escape(key) for key in prefilter_keys())


def _candidate_pods(cluster_id: int, exempt: list[str]) -> Any:
    """Pods that may need an exception: those the sync classified as violating the baseline (Pod.baseline_violating,
    the inv_pod_baseline index) and those it has not classified (null), which are checked here. On `large` this
    reads no pod instead of casting 20,000 pods' JSON to text every scan (2.9 s of PostgreSQL time)."""
    unclassified = Q(baseline_violating__isnull=True)
    pods = Pod.objects.live().filter(cluster_id=cluster_id).exclude(namespace__in=exempt).exclude(
        phase__in=("Succeeded", "Failed")).only("uid", "name", "namespace", "raw")
    if connection.vendor == "postgresql":
        pods = pods.alias(raw_text=Cast("raw", output_field=TextField()))
        unclassified &= Q(raw_text__regex=_PREFILTER)
    return pods.filter(Q(baseline_violating=True) | unclassified)


def _applied(grant: Grant) -> bool:
    return grant.activated_at is not None or grant.apply_attempted_at is not None


def _scan_admin_claims(scan: Scan, cluster_id: int, now: dt.datetime) -> None:
    grants: dict[str, list[Grant]] = defaultdict(list)
    for applied in Grant.objects.filter(kind=AccessKind.ADMIN_ACCESS, cluster_id=cluster_id).order_by("-starts_at"):
        if _applied(applied):
            grants[applied.namespace].append(applied)
    for claim in admin_claims(cluster_id):
        subject = f"resourceclaim/{claim.namespace}/{claim.name}"
        evidence = {"claim": f"{claim.namespace}/{claim.name}", "uid": claim.uid,
                    "created": claim.k8s_created_at.isoformat() if claim.k8s_created_at else None}
        grant = covering_grant(grants[claim.namespace], claim.k8s_created_at)
        if grant is None:
            scan.add(Kind.ADMIN_CLAIM_WITHOUT_GRANT, subject, ViolationFinding(
                claim.namespace, f"adminAccess claim {claim.namespace}/{claim.name} was created without a grant",
                evidence))
            continue
        scan.uses.append((grant, "ResourceClaim", claim))
        if grant.state not in IN_FORCE or grant.ends_at <= now:
            deletes = access_policy(AccessKind.ADMIN_ACCESS).delete_claims_at_end
            scan.add(Kind.ADMIN_CLAIM_OUTLIVED, subject, ViolationFinding(
                claim.namespace, f"adminAccess claim {claim.namespace}/{claim.name} outlived grant {grant.pk} "
                f"({grant.state}); {'the portal deletes it' if deletes else 'delete it or request a new grant'}",
                {**evidence, "grant": grant.pk, "grant_ended": (grant.ended_at or grant.ends_at).isoformat()},
                grant.pk))


def _scan_privileged_pods(scan: Scan, cluster_id: int, exempt: list[str], now: dt.datetime) -> None:
    exceptions = {g.exception_key: g for g in Grant.objects.filter(
        in_force(now), kind=AccessKind.PRIVILEGED, cluster_id=cluster_id) if _applied(g)}
    for pod in _candidate_pods(cluster_id, exempt):
        details = privileged_details(pod.raw or {})
        if details is None:
            continue
        account, workload = details["service_account"], details["workload"]
        grant = exceptions.get(exception_key(pod.namespace, account)) or (
            exceptions.get(exception_key(pod.namespace, account, workload)) if workload else None)
        if grant is not None:
            scan.uses.append((grant, "Pod", pod))
            continue
        what = "; ".join(f"{v['control']} ({v['field']}{'' if v['value'] is True else ' = ' + str(v['value'])[:80]})"
                         for v in details["violations"][:5])
        scan.add(Kind.PRIVILEGED_WITHOUT_EXCEPTION, f"pod/{pod.namespace}/{pod.name}", ViolationFinding(
            pod.namespace, f"pod {pod.namespace}/{pod.name} violates the baseline Pod Security Standard "
            f"({', '.join(details['controls'])}: {what}) without an exception for service account {account}",
            {"pod": f"{pod.namespace}/{pod.name}", "uid": pod.uid, **details}))


def _scan_labels_and_grants(scan: Scan, cluster_id: int, now: dt.datetime) -> None:
    granted = set(Grant.objects.filter(in_force(now), kind=AccessKind.ADMIN_ACCESS, cluster_id=cluster_id
                                       ).values_list("namespace", flat=True))
    for row in Namespace.objects.live().filter(cluster_id=cluster_id, labels__has_key=ADMIN_LABEL
                                               ).values("name", "labels", "raw", "resource_version"):
        if (row["labels"] or {}).get(ADMIN_LABEL) != "true" or row["name"] in granted:
            continue
        owners = label_owners(row["raw"] or {})
        if FIELD_MANAGER in owners:
            continue  # ours, left over: the grant's own drift check below covers it
        scan.add(Kind.LABEL_DRIFT, f"namespace/{row['name']}", ViolationFinding(
            row["name"], f"namespace {row['name']} carries {ADMIN_LABEL}=true without a grant, set by "
            f"{', '.join(owners) or 'an unknown manager'}",
            {"label_owners": owners, "namespace_resource_version": row["resource_version"]}))
    grants = list(Grant.objects.filter(cluster_id=cluster_id).filter(
        Q(state=Grant.State.ACTIVE, ends_at__gt=now)
        | Q(state__in=(Grant.State.EXPIRED, Grant.State.REVOKED), cleanup_confirmed_at__isnull=True,
            ended_at__lt=now - GRACE)))
    # What the cluster carries, read once for all active grants (not one query per grant).
    keys = exception_keys(cluster_id)
    entries = keys[0] if keys is not None else set()
    labelled = {name for name, labels in Namespace.objects.live().filter(
        cluster_id=cluster_id, name__in={g.namespace for g in grants if g.kind == AccessKind.ADMIN_ACCESS}
    ).values_list("name", "labels") if (labels or {}).get(ADMIN_LABEL) == "true"}
    for grant in grants:
        if grant.state == Grant.State.ACTIVE:
            carried = (grant.namespace in labelled if grant.kind == AccessKind.ADMIN_ACCESS
                       else grant.exception_key in entries)
            if not carried:
                scan.add(Kind.GRANT_DRIFT, f"grant/{grant.pk}", ViolationFinding(
                    grant.namespace, f"grant {grant.pk} is active but the cluster no longer carries it "
                    "(label or exception entry removed outside the portal); the portal re-applies it",
                    {"grant": grant.pk, "kind": grant.kind}, grant.pk))
        else:
            scan.add(Kind.GRANT_DRIFT, f"grant/{grant.pk}", ViolationFinding(
                grant.namespace, f"grant {grant.pk} ended {grant.ended_at:%Y-%m-%d %H:%M} UTC but the cluster still "
                f"carries it{': ' + grant.apply_error[:200] if grant.apply_error else ''}",
                {"grant": grant.pk, "kind": grant.kind, "apply_error": grant.apply_error[:500]}, grant.pk))


def _scan_policy(scan: Scan, cluster_id: int, now: dt.datetime) -> None:
    if not manages_policy(cluster_id):
        return
    applied = EnforcementSettings.objects.filter(cluster_id=cluster_id).values_list("privileged_applied_at",
                                                                                     flat=True).first()
    if applied is None or now - applied < dt.timedelta(seconds=60):
        return  # the portal has not had its chance to apply it yet
    problems = policy_problems(cluster_id)
    if problems:
        scan.add(Kind.ENFORCEMENT_MISSING, f"policy/{POLICY_NAME}", ViolationFinding(
            "", "; ".join(problems) + ": pods that violate the baseline Pod Security Standard may not be blocked",
            {"problems": problems}))


def scan_cluster(cluster_id: int, *, now: dt.datetime | None = None) -> dict[str, int]:
    now = now or timezone.now()
    scan = Scan()
    _scan_admin_claims(scan, cluster_id, now)
    _scan_privileged_pods(scan, cluster_id, exempt_namespaces(cluster_id), now)
    _scan_labels_and_grants(scan, cluster_id, now)
    _scan_policy(scan, cluster_id, now)
    with transaction.atomic():
        counts = _reconcile(cluster_id, scan, now)
        counts["uses"] = _record_uses(scan, now)
    return counts


def _reconcile(cluster_id: int, scan: Scan, now: dt.datetime) -> dict[str, int]:
    counts = {"opened": 0, "resolved": 0, "open": len(scan.findings)}
    current = {(v.kind, v.subject): v for v in Violation.objects.select_for_update().filter(
        cluster_id=cluster_id, resolved_at__isnull=True)}
    for key, finding in scan.findings.items():
        violation = current.get(key)
        if violation is None:
            violation = Violation.objects.create(
                cluster_id=cluster_id, kind=key[0], subject=key[1][:600], namespace=finding.namespace,
                message=finding.message, evidence=finding.evidence, grant_id=finding.grant_id, last_seen_at=now)
            audit_record(actor=None, verb="violation.opened", target=violation,
                         data={"kind": violation.kind, "subject": violation.subject, "message": finding.message,
                               "evidence": finding.evidence, "grant": finding.grant_id})
            counts["opened"] += 1
        else:
            violation.message, violation.evidence, violation.last_seen_at = finding.message, finding.evidence, now
            violation.grant_id = finding.grant_id
            violation.save(update_fields=["message", "evidence", "last_seen_at", "grant"])
    for key, violation in current.items():
        if key not in scan.findings:
            violation.resolved_at = now
            violation.save(update_fields=["resolved_at"])
            audit_record(actor=None, verb="violation.resolved", target=violation,
                         data={"kind": violation.kind, "subject": violation.subject, "grant": violation.grant_id})
            counts["resolved"] += 1
    return counts


def _record_uses(scan: Scan, now: dt.datetime) -> int:
    if not scan.uses:
        return 0
    known = set(GrantUse.objects.filter(grant_id__in={g.pk for g, _, _ in scan.uses}).values_list("grant_id",
                                                                                                  "object_uid"))
    created = 0
    for grant, kind, obj in scan.uses:
        if (grant.pk, obj.uid) in known:
            continue
        known.add((grant.pk, obj.uid))
        GrantUse.objects.create(grant=grant, object_kind=kind, object_uid=obj.uid, namespace=obj.namespace,
                                name=obj.name, outlived_grant=grant.state not in IN_FORCE or grant.ends_at <= now)
        audit_record(actor=None, verb="grant.used", target=grant,
                     data={"kind": kind, "object": f"{obj.namespace}/{obj.name}", "uid": obj.uid})
        created += 1
    return created


def violations_scan(*, now: dt.datetime | None = None) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for cluster_id in Cluster.objects.enabled().values_list("pk", flat=True):
        for key, value in scan_cluster(cluster_id, now=now).items():
            totals[key] += value
    return dict(totals)
