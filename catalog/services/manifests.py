"""Glue between the validator, the feasibility explainer and a cluster: the full validation used by the pages,
the API and the generator.

- Layers 1-4 come from `catalog.validation` with the cluster's context (`context_for_cluster`, cached like the
  snapshot).
- Layer 5 (feasibility) explains each pod against a snapshot of the cluster built from the inventory. The snapshot
  is cached per cluster for `PORTAL_FEASIBILITY_SNAPSHOT_SECONDS` (default 15 s): building it reads every node and
  bound pod, explaining against it takes milliseconds.
- Layer 6 (dry run) is opt-in: each document is POSTed with `dryRun=All` to the real cluster; cluster I/O happens
  outside any database transaction, and nothing is persisted.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.conf import settings

from catalog.feasibility import ClusterSnapshot, Explanation, explain_pod, snapshot_for_cluster
from catalog.feasibility.gang import GangExplanation, GangPod, explain_gang, gang_pods
from catalog.feasibility.viewer import EVERYONE, Viewer
from catalog.services.queues import kueue_topologies
from catalog.validation import (
    ValidationContext,
    ValidationFinding,
    ValidationReport,
    context_for_cluster,
    validate_manifest,
)
from core.types import RequestUser
from inventory.errors import ClusterError
from inventory.models import Cluster
from inventory.redaction import holder_rule
from inventory.scoping import scope_for, targets_for
from inventory.selectors import cluster_discovery
from inventory.services.clients import client_for

logger = logging.getLogger(__name__)
FeasibilityCheck = Callable[[dict[str, Any], list[dict[str, Any]]], list[ValidationFinding]]
GangCheck = Callable[[dict[str, Any], int, list[dict[str, Any]]], list[ValidationFinding]]

_snapshots: dict[int, tuple[float, ClusterSnapshot]] = {}
_contexts: dict[int, tuple[float, ValidationContext]] = {}
_refreshing: set[tuple[int, int]] = set()
_snapshot_lock = threading.Lock()
MAX_FINDINGS_PER_POD = 12


def _ttl() -> float:
    return float(getattr(settings, "PORTAL_FEASIBILITY_SNAPSHOT_SECONDS", 15))


def _cached(store: dict[int, tuple[float, Any]], cluster: Cluster, build: Any) -> Any:
    """Per-cluster cache with stale-while-revalidate: a fresh value is returned as is; an expired one is returned
    while one background thread rebuilds it (so only the very first request pays for reading a large cluster)."""
    now = time.monotonic()
    with _snapshot_lock:
        cached = store.get(cluster.pk)
        if cached and now - cached[0] < _ttl():
            return cached[1]
        key = (id(store), cluster.pk)
        if cached and key not in _refreshing:
            _refreshing.add(key)
            threading.Thread(target=_refresh, args=(store, cluster, build, key), daemon=True).start()
        if cached:
            return cached[1]
    value = build(cluster)
    with _snapshot_lock:
        store[cluster.pk] = (time.monotonic(), value)
    return value


def _refresh(store: dict[int, tuple[float, Any]], cluster: Cluster, build: Any, key: tuple[int, int]) -> None:
    from django.db import connection

    try:
        value = build(cluster)
        with _snapshot_lock:
            store[cluster.pk] = (time.monotonic(), value)
    except Exception:  # keep serving the previous value; the next request retries
        logger.warning("refreshing the scheduling snapshot of cluster %s failed", cluster.pk, exc_info=True)
    finally:
        with _snapshot_lock:
            _refreshing.discard(key)
        connection.close()


def cluster_context(cluster: Cluster) -> ValidationContext:
    """The validator's view of the cluster (namespaces, resources, classes, quotas, taints), cached like the
    snapshot: reading it for 5,000 nodes takes far longer than validating against it."""
    context: ValidationContext = _cached(_contexts, cluster, context_for_cluster)
    return dataclasses.replace(context)


def cluster_snapshot(cluster: Cluster) -> ClusterSnapshot:
    """The cluster's scheduling snapshot (cached; see `_cached`)."""
    snapshot: ClusterSnapshot = _cached(_snapshots, cluster, snapshot_for_cluster)
    return snapshot


def snapshot_forget(cluster_id: int | None = None) -> None:
    with _snapshot_lock:
        if cluster_id is None:
            _snapshots.clear()
            _contexts.clear()
        else:
            _snapshots.pop(cluster_id, None)
            _contexts.pop(cluster_id, None)


def explanation_findings(explanation: Explanation) -> list[ValidationFinding]:
    """An explanation as validator findings: an error with the scheduler-style summary, per-node detail as info."""
    if explanation.schedulable:
        findings = [ValidationFinding(layer="feasibility", severity="info", path="", code="fits",
                            message=explanation.message)]
    else:
        # The most actionable hint is the fix: what would fit (a toleration, a smaller count), else the first.
        fix = next((h for h in explanation.hints if "would fit" in h or "largest" in h),
                   explanation.hints[0] if explanation.hints else "")
        findings = [ValidationFinding(layer="feasibility", severity="error", path="", code="unschedulable",
                            message=explanation.message, fix=fix)]
    findings += [ValidationFinding(layer="feasibility", severity="info", path="", code="hint", message=h)
                 for h in explanation.hints if h != findings[0].fix]
    return findings[:MAX_FINDINGS_PER_POD]


def _split_claims(claims: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {"extra_claims": [c for c in claims if c.get("kind") == "ResourceClaim"],
            "extra_claim_templates": [c for c in claims if c.get("kind") == "ResourceClaimTemplate"]}


def snapshot_feasibility(snapshot: ClusterSnapshot | Callable[[], ClusterSnapshot],
                         viewer: Viewer = EVERYONE) -> FeasibilityCheck:
    """The validator's feasibility layer over a snapshot (or a function returning the current one)."""
    def run(pod: dict[str, Any], claims: list[dict[str, Any]]) -> list[ValidationFinding]:
        current = snapshot() if callable(snapshot) else snapshot
        return explanation_findings(explain_pod(pod, current, viewer=viewer, **_split_claims(claims)))

    return run


def gang_findings(gang: GangExplanation) -> list[ValidationFinding]:
    """A gang explanation as validator findings. A gang none of whose pods fits adds nothing: the pod's own
    explanation already says why."""
    if not gang.placements:
        return []
    if gang.schedulable:
        return [ValidationFinding(layer="feasibility", severity="info", path="", code="gang-fits",
                        message=f"gang of {gang.total_pods} pods: {gang.message}")]
    largest = next((h for h in gang.hints if h.startswith("largest gang")), "")
    findings = [ValidationFinding(layer="feasibility", severity="error", path="", code="gang-unschedulable",
                        message=gang.message, fix=largest)]
    findings += [ValidationFinding(layer="feasibility", severity="info", path="", code="hint", message=h)
                 for h in gang.hints if h != largest]
    return findings[:MAX_FINDINGS_PER_POD]


def snapshot_gang_feasibility(snapshot: ClusterSnapshot | Callable[[], ClusterSnapshot],
                              viewer: Viewer = EVERYONE,
                              topologies: Callable[[], Mapping[str, Sequence[str]] | None] | None = None) -> GangCheck:
    """The validator's gang check (a Job's `parallelism` pods placed at once) over a snapshot; `topologies` gives
    Kueue's Topology levels (queues.kueue_topologies) when a topology annotation asks for them."""
    def run(pod: dict[str, Any], count: int, claims: list[dict[str, Any]]) -> list[ValidationFinding]:
        current = snapshot() if callable(snapshot) else snapshot
        pods, _, _, _ = gang_pods([pod], replicas=count)
        split = _split_claims(claims)
        return gang_findings(explain_gang(pods, current, viewer=viewer, extra_claims=split["extra_claims"],
                                          extra_claim_templates=split["extra_claim_templates"],
                                          topology_levels=topologies() if topologies is not None else None))

    return run


def viewer_for(user: RequestUser | None, cluster: Cluster) -> Viewer:
    """Names of other tenants' pods and claims in explanations follow the inventory's holder rule."""
    if user is None:
        return EVERYONE
    rule = holder_rule(user)
    return Viewer(shows=lambda namespace: rule(cluster.pk, namespace))


def _dry_run(cluster: Cluster) -> Any:
    def run(documents: list[dict[str, Any]]) -> list[ValidationFinding]:
        findings: list[ValidationFinding] = []
        try:
            client = client_for(cluster)
        except ClusterError as exc:
            return [ValidationFinding(layer="dry-run", severity="warning", path="", code="dry-run-unavailable",
                            message=f"The dry run could not reach {cluster.name}: {exc}")]
        try:
            for index, document in enumerate(documents):
                path = f"documents[{index}]"
                try:
                    result = client.create_dry_run(document)
                except ClusterError as exc:
                    findings.append(ValidationFinding(layer="dry-run", severity="warning", path=path,
                                            code="dry-run-unavailable", message=str(exc)[:500]))
                    continue
                if result.accepted:
                    findings.append(ValidationFinding(layer="dry-run", severity="info", path=path, code="dry-run-accepted",
                                            message=f"{cluster.name} accepted {document.get('kind')} (dry run; "
                                                    "nothing was created)."))
                    findings += [ValidationFinding(layer="dry-run", severity="warning", path=path, code="dry-run-warning",
                                         message=w) for w in result.warnings]
                elif result.status == 404 and result.reason == "NotFound" and "requested resource" in result.message:
                    findings.append(ValidationFinding(layer="dry-run", severity="warning", path=path,
                                            code="dry-run-kind-not-served",
                                            message=f"{cluster.name} does not serve {document.get('apiVersion')} "
                                                    f"{document.get('kind')}; not dry-run."))
                else:
                    findings.append(ValidationFinding(layer="dry-run", severity="error", path=path, code="dry-run-refused",
                                            message=f"{cluster.name} refused it: {result.message}",
                                            fix="; ".join(result.causes)[:500]))
        finally:
            client.close()
        return findings

    return run


def validation_context(cluster: Cluster | None, *, dry_run: bool = False, user: RequestUser | None = None) -> ValidationContext:
    """The validator's context. With a user (pages and API), documents outside the user's namespaces are an error
    and their quota and feasibility are not computed (platform roles may validate anywhere), and the dry run only
    runs in tenant namespaces the user may target. Without a user (the command line) nothing is restricted."""
    if cluster is None:
        return ValidationContext()
    context = cluster_context(cluster)
    viewer = viewer_for(user, cluster)
    context.feasibility = snapshot_feasibility(lambda: cluster_snapshot(cluster), viewer)
    context.gang_feasibility = snapshot_gang_feasibility(lambda: cluster_snapshot(cluster), viewer,
                                                         lambda: kueue_topologies(cluster))
    if user is not None:
        targets = frozenset(targets_for(user, cluster))
        context.allowed_namespaces = None if scope_for(user).everything else targets
        context.dry_run_namespaces = targets
    if dry_run:
        context.dry_run = _dry_run(cluster)
    return context


def manifest_validate(*, text: str, cluster: Cluster | None, user: RequestUser, dry_run: bool = False) -> ValidationReport:
    """Validate a manifest for `user` against a cluster (or only the cluster-independent layers). Writes nothing."""
    return validate_manifest(text, validation_context(cluster, dry_run=dry_run, user=user))


def pod_explain(*, pod: dict[str, Any], cluster: Cluster, user: RequestUser,
                claims: list[dict[str, Any]] | None = None) -> Explanation:
    """Explain a pod for `user`: other tenants' pods and claims are not named (viewer_for)."""
    return explain_pod(pod, cluster_snapshot(cluster), viewer=viewer_for(user, cluster),
                       **_split_claims(claims or []))


JOBSET_GROUP = "jobset.x-k8s.io"


def gang_explain(*, pods: list[GangPod], cluster: Cluster, user: RequestUser, claims: list[dict[str, Any]] | None = None,
                 topology: str = "") -> GangExplanation:
    """Explain a gang for `user` (can all its pods be placed at once, within one `topology` domain when given, or
    as Kueue's topology annotations ask with the cluster's synced Topology levels?); other tenants' names are
    hidden."""
    result = explain_gang(pods, cluster_snapshot(cluster), viewer=viewer_for(user, cluster), topology=topology,
                          topology_levels=kueue_topologies(cluster), **_split_claims(claims or []))
    served = cluster_discovery(cluster)
    if served is not None and JOBSET_GROUP not in served.groups and any(p.role.startswith("JobSet ") for p in pods):
        result.notes.append(f"cluster {cluster.name} does not serve {JOBSET_GROUP} (JobSet is not installed): the "
                            "API server would refuse this JobSet; its pods are explained as if it were installed")
    return result
