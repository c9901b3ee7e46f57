"""Exceptions end to end against the simulator over real HTTP (the official client): grants applied under the
portal's field manager, confirmed by the sync, used, expired and undone; the admission policy enforced by the API
server; violations detected from synced data; the policy manifests valid against the Kubernetes schema."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from django.db import connection
from django.utils import timezone
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from rest_framework.test import APIClient

from audit.models import AuditEvent
from inventory.errors import ClusterUnreachableError
from inventory.k8s.types import PORTAL_SYSTEM_NAMESPACE
from inventory.leases import lease_backend
from inventory.models import Pod
from inventory.services.clients import client_for
from inventory.services.sync import cluster_sync_once
from portal.access.services import access_expire_due, access_request_create, access_request_review, grant_revoke
from portal.enforcement.services import (
    ADMIN_LABEL,
    EXCEPTIONS_NAME,
    POLICY_NAME,
    enforcement_apply,
    enforcement_apply_failed,
    exception_keys,
    exempt_namespaces,
    grants_confirm,
    policy_document,
    policy_problems,
    privileged_documents,
    undone_in_cluster,
)
from portal.enforcement.violations import scan_cluster
from portal.models import AccessPolicy, EnforcementSettings, Grant, GrantUse, TenantNamespace, Violation
from portal.quota.services import FIELD_MANAGER
from portal.tenancy.roles import Role
from tests.conftest import make_user
from tests.kubesim.conftest import request
from tests.podsecurity_cases import CASES
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow
HOUR = dt.timedelta(hours=1)
EXEMPT = ["accelerator-portal", "accelerator-portal-system", "gpu-operator", "kube-node-lease", "kube-public",
          "kube-system", "nvidia-dra-driver-gpu"]  # the documented default (docs/access.md)


@pytest.fixture
def world(live_demo, member):
    sim, cluster = live_demo
    give_namespaces(member, cluster, "ml-research", tenant_slug="ml-research")
    give_namespaces(make_user("platform-member"), cluster, "gpu-admin", tenant_slug="platform")
    reviewers = [make_user(f"sec{i}", Role.SECURITY_APPROVER) for i in range(2)]
    api = k8s.ApiClient(_configuration(sim))
    yield {"sim": sim, "cluster": cluster, "member": member, "reviewers": reviewers,
           "core": k8s.CoreV1Api(api), "resource": k8s.ResourceV1Api(api)}
    api.close()


def _configuration(sim) -> k8s.Configuration:
    from kubernetes import config

    configuration = k8s.Configuration()
    config.load_kube_config_from_dict(sim.kubeconfig(), client_configuration=configuration)
    return configuration


def _sync(cluster) -> None:
    client = client_for(cluster)
    backend = lease_backend()
    try:
        cluster_sync_once(cluster_id=cluster.pk, client=client, lease_for=lambda s: backend.acquire(s, 30))
    finally:
        client.close()


def _granted(world, kind: str, **scope) -> Grant:
    request = access_request_create(actor=world["member"], kind=kind, cluster_id=world["cluster"].pk,
                                    namespace="ml-research", reason="DCGM diagnostics on busy GPUs",
                                    ticket_ref="CHG-42", window=2 * HOUR, **scope)
    for reviewer in world["reviewers"]:
        access_request_review(actor=reviewer, request_id=request.pk, approve=True, comment="ok")
    return Grant.objects.get(request=request)


def _admin_claim(name: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml-research"},
            "spec": {"devices": {"requests": [{"name": "all", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "allocationMode": "All", "adminAccess": True}}]}}}


def _namespace_labels(sim, name: str) -> dict:
    return sim.store.get_stored("namespaces", None, name).obj["metadata"].get("labels") or {}


def _open(cluster, kind: str) -> list[Violation]:
    return list(Violation.objects.filter(cluster=cluster, kind=kind, resolved_at__isnull=True))


@pytest.mark.parametrize("delete_at_end", [False, True])
def test_admin_access_grant_labels_the_namespace_and_expiry_handles_claims(world, delete_at_end) -> None:
    sim, cluster, resource = world["sim"], world["cluster"], world["resource"]
    AccessPolicy.objects.create(kind="admin-access", max_window=8 * HOUR, approvals=2, review_timeout=HOUR,
                                delete_claims_at_end=delete_at_end)
    with pytest.raises(ApiException) as refused:  # before the grant: the API server's own rule
        resource.create_namespaced_resource_claim("ml-research", _admin_claim("too-early"))
    assert refused.value.status == 422
    assert "admin-access" in str(refused.value.body)

    grant = _granted(world, "admin-access")
    assert enforcement_apply(cluster_id=cluster.pk, namespace="ml-research") == "applied"  # what the worker runs
    assert _namespace_labels(sim, "ml-research")[ADMIN_LABEL] == "true"
    managers = [m["manager"] for m in sim.store.get_stored("namespaces", None, "ml-research").obj["metadata"]
                ["managedFields"] if "f:labels" in str(m.get("fieldsV1"))]
    assert FIELD_MANAGER in managers
    assert grants_confirm()["activated"] == 0  # not active until the sync shows the label
    _sync(cluster)
    assert grants_confirm()["activated"] == 1
    grant.refresh_from_db()
    assert grant.state == "active"
    assert grant.activated_at is not None

    resource.create_namespaced_resource_claim("ml-research", _admin_claim("dcgm-sweep"))  # during the window
    _sync(cluster)
    scan_cluster(cluster.pk)
    use = GrantUse.objects.get(grant=grant)
    assert (use.object_kind, use.name, use.outlived_grant) == ("ResourceClaim", "dcgm-sweep", False)
    assert not Violation.objects.filter(cluster=cluster, namespace="ml-research", kind__startswith="admin-",
                                        resolved_at__isnull=True).exists()

    assert access_expire_due(now=grant.ends_at)["grants"] == 1
    enforcement_apply(cluster_id=cluster.pk, namespace="ml-research")
    assert ADMIN_LABEL not in _namespace_labels(sim, "ml-research")
    with pytest.raises(ApiException):  # the label is gone: no new admin claims
        resource.create_namespaced_resource_claim("ml-research", _admin_claim("after-the-end"))
    claim_left = sim.store.get_stored("resourceclaims", "ml-research", "dcgm-sweep") is not None
    assert claim_left is not delete_at_end
    _sync(cluster)
    now = timezone.now()
    scan_cluster(cluster.pk, now=now)
    assert grants_confirm()["cleaned"] == 1
    grant.refresh_from_db()
    assert grant.state == "expired"
    assert grant.cleanup_confirmed_at is not None
    outlived = _open(cluster, "admin-claim-outlived-grant")
    if delete_at_end:
        assert not outlived
        assert GrantUse.objects.get(grant=grant).deleted_by_portal_at is not None
        assert AuditEvent.objects.filter(verb="grant.claim_deleted", target_id=str(grant.pk)).exists()
    else:
        assert [v.subject for v in outlived] == ["resourceclaim/ml-research/dcgm-sweep"]
        assert outlived[0].grant_id == grant.pk
    verbs = list(AuditEvent.objects.filter(target_type="portal.grant", target_id=str(grant.pk)).order_by("id")
                 .values_list("verb", flat=True))
    for verb in ("grant.issued", "grant.apply_applied", "grant.active", "grant.used", "grant.expired",
                 "grant.cleanup_confirmed"):
        assert verb in verbs, verbs


def test_demo_violations_label_drift_and_admin_claim_without_grant(world) -> None:
    """The demo's gpu-admin namespace was labelled by hand (not by the portal) and runs an admin claim."""
    cluster = world["cluster"]
    scan_cluster(cluster.pk)
    drift = _open(cluster, "admin-label-drift")
    assert [v.subject for v in drift] == ["namespace/gpu-admin"]
    assert FIELD_MANAGER not in drift[0].evidence["label_owners"]
    claims = _open(cluster, "admin-claim-without-grant")
    assert "resourceclaim/gpu-admin/gpu-health-probe" in {v.subject for v in claims}
    assert AuditEvent.objects.filter(verb="violation.opened").count() == len(
        Violation.objects.filter(cluster=cluster))
    scan_cluster(cluster.pk)  # nothing new the second time
    assert AuditEvent.objects.filter(verb="violation.opened").count() == len(
        Violation.objects.filter(cluster=cluster))

    api = APIClient()
    api.force_authenticate(world["reviewers"][0])
    listed = api.get("/api/v1/violations/", {"open": "true"}).json()
    assert {v["subject"] for v in listed["results"]} >= {"namespace/gpu-admin",
                                                         "resourceclaim/gpu-admin/gpu-health-probe"}
    api.force_authenticate(world["member"])  # a tenant sees only its own namespaces' violations
    assert {v["namespace"] for v in api.get("/api/v1/violations/").json()["results"]} <= {"ml-research"}


def _pod(name: str, service_account: str, *, privileged: bool = True) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml-research"},
            "spec": {"serviceAccountName": service_account, "containers": [{
                "name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                "securityContext": {"privileged": privileged}}]}}


def test_privileged_pod_is_a_violation_until_an_exception_is_granted_and_the_policy_enforces_it(world) -> None:
    sim, cluster, core = world["sim"], world["cluster"], world["core"]
    scan_cluster(cluster.pk)
    found = _open(cluster, "privileged-without-exception")
    assert [v.subject for v in found] == ["pod/ml-research/nccl-debug"]  # the demo's privileged debug pod
    assert found[0].evidence["service_account"] == "debug"

    grant = _granted(world, "privileged", service_account="debug")
    assert enforcement_apply(cluster_id=cluster.pk, namespace="") == "applied"
    exceptions = sim.store.get_stored("configmaps", PORTAL_SYSTEM_NAMESPACE, EXCEPTIONS_NAME).obj
    assert exceptions["data"] == {"ml-research_debug": f"grant={grant.pk} until={grant.ends_at.isoformat()}"}
    assert sim.store.get_stored("validatingadmissionpolicies", None, POLICY_NAME) is not None
    binding = sim.store.get_stored("validatingadmissionpolicybindings", None, POLICY_NAME).obj
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": sorted(EXEMPT)}]
    _sync(cluster)
    assert grants_confirm()["activated"] == 1
    scan_cluster(cluster.pk)
    assert not _open(cluster, "privileged-without-exception")
    assert GrantUse.objects.filter(grant=grant, object_kind="Pod", name="nccl-debug").exists()

    # The API server now enforces it: another service account is refused, the granted one admitted.
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("ml-research", _pod("rogue", "default"))
    assert refused.value.status in (403, 422)
    assert "ValidatingAdmissionPolicy 'accelerator-portal-privileged'" in str(refused.value.body)
    core.create_namespaced_pod("ml-research", _pod("sweep", "debug"))
    core.create_namespaced_pod("ml-research", _pod("plain", "default", privileged=False))

    grant_revoke(actor=world["reviewers"][0], grant_id=grant.pk, reason="incident closed")
    enforcement_apply(cluster_id=cluster.pk, namespace="")
    assert "ml-research_debug" not in (sim.store.get_stored("configmaps", PORTAL_SYSTEM_NAMESPACE,
                                                            EXCEPTIONS_NAME).obj.get("data") or {})
    with pytest.raises(ApiException):
        core.create_namespaced_pod("ml-research", _pod("sweep-2", "debug"))
    _sync(cluster)
    assert grants_confirm()["cleaned"] == 1
    scan_cluster(cluster.pk)
    assert {v.subject for v in _open(cluster, "privileged-without-exception")} == {
        "pod/ml-research/nccl-debug", "pod/ml-research/sweep"}


def test_deleted_exception_object_is_drift_and_is_reapplied(world) -> None:
    sim, cluster = world["sim"], world["cluster"]
    grant = _granted(world, "privileged", service_account="debug")
    enforcement_apply(cluster_id=cluster.pk, namespace="")
    _sync(cluster)
    grants_confirm()
    world["core"].delete_namespaced_config_map(EXCEPTIONS_NAME, PORTAL_SYSTEM_NAMESPACE)
    _sync(cluster)
    scan_cluster(cluster.pk)
    assert [v.subject for v in _open(cluster, "grant-drift")] == [f"grant/{grant.pk}"]
    EnforcementSettings.objects.filter(cluster=cluster).update(privileged_applied_at=None)
    assert grants_confirm()["reenqueued"] >= 1  # the reconcile re-applies the desired state…
    enforcement_apply(cluster_id=cluster.pk, namespace="")  # …(what the enqueued task runs)
    _sync(cluster)
    scan_cluster(cluster.pk)
    assert not _open(cluster, "grant-drift")
    assert sim.store.get_stored("configmaps", PORTAL_SYSTEM_NAMESPACE, EXCEPTIONS_NAME) is not None


def test_policy_manifests_validate_against_the_kubernetes_schema(world) -> None:
    _granted(world, "privileged", service_account="debug", workload="nccl-tests")
    documents = privileged_documents(world["cluster"].pk, timezone.now())
    assert [d["kind"] for d in documents] == ["Namespace", "ConfigMap", "ValidatingAdmissionPolicy",
                                              "ValidatingAdmissionPolicyBinding"]
    for document in documents:
        kubernetes_validate.validate(document, "1.34.0", strict=True)
    broken = {**documents[2], "spec": {**documents[2]["spec"], "validation": []}}  # a typo: strict schemas refuse it
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.34.0", strict=True)

    admin = make_user("platform", Role.PLATFORM_ADMIN)
    api = APIClient()
    api.force_login(admin)
    response = api.get(f"/access/policy/{world['cluster'].name}.yaml")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/yaml"
    downloaded = list(yaml.safe_load_all(response.content))
    assert downloaded == documents
    api.force_login(world["member"])
    assert api.get(f"/access/policy/{world['cluster'].name}.yaml").status_code == 403


def test_conflicts_and_unreachable_clusters_are_recorded_on_the_grant(world) -> None:
    sim, cluster = world["sim"], world["cluster"]
    grant = _granted(world, "admin-access")
    # Someone else manages the label with another value: our apply conflicts and says so on the grant.
    other = client_for(cluster)
    try:
        assert other.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": "ml-research", "labels": {ADMIN_LABEL: "false"}}}, field_manager="kubectl").applied
    finally:
        other.close()
    assert enforcement_apply(cluster_id=cluster.pk, namespace="ml-research") == "conflict"
    grant.refresh_from_db()
    assert grant.state == "pending"
    assert grant.apply_error.startswith("conflict: Namespace ml-research")
    assert AuditEvent.objects.filter(verb="grant.apply_conflict", target_id=str(grant.pk)).exists()

    sim.faults.fail_next_requests(1, status=503)  # retryable: the task's autoretry takes over
    with pytest.raises(ClusterUnreachableError):
        enforcement_apply(cluster_id=cluster.pk, namespace="ml-research")
    enforcement_apply_failed(cluster_id=cluster.pk, namespace="ml-research", error="ClusterUnreachableError: 503")
    grant.refresh_from_db()
    assert "503" in grant.apply_error
    assert grant.state == "pending"  # never active without the cluster's confirmation


# ------------------------------------------------------------------------------------------------ the baseline definition


def _create_namespace(core, name: str) -> None:
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _add_ephemeral(sim, namespace: str, name: str, container: dict) -> int:
    return request(sim, "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/ephemeralcontainers",
                   {"spec": {"ephemeralContainers": [container]}},
                   headers={"Content-Type": "application/strategic-merge-patch+json"}).status


def test_the_scan_flags_exactly_the_shared_cases_that_violate_the_baseline(world) -> None:
    """The shared case list (tests/podsecurity_cases.py) as running pods in a namespace of no tenant: after a sync,
    the scan (its SQL prefilter included) flags exactly the cases that need an exception."""
    sim, cluster, core = world["sim"], world["cluster"], world["core"]
    _create_namespace(core, "cases")
    names = {}
    for position, case in enumerate(CASES):
        name = names[case.id] = f"case-{position}"
        assert request(sim, "POST", "/api/v1/namespaces/cases/pods", case.pod(name, with_ephemeral=False)).status == 201
        if case.ephemeral is not None:  # added afterwards, as `kubectl debug` does
            assert _add_ephemeral(sim, "cases", name, case.ephemeral_container()) == 200
    _sync(cluster)
    scan_cluster(cluster.pk)
    flagged = {v.subject: v for v in _open(cluster, "privileged-without-exception") if v.namespace == "cases"}
    assert set(flagged) == {f"pod/cases/{names[c.id]}" for c in CASES if c.needs_exception}
    for case in CASES:
        if case.needs_exception:
            evidence = flagged[f"pod/cases/{names[case.id]}"].evidence
            assert {v["control"] for v in evidence["violations"]} == case.violates, case.id
    # The sync classified each pod as it stored it, and the scan read the classification.
    classified = dict(Pod.objects.live().filter(cluster=cluster, namespace="cases").values_list("name",
                                                                                             "baseline_violating"))
    assert classified == {names[c.id]: c.needs_exception for c in CASES}
    # Pods stored before the sync classified them (null) are checked by the scan itself, through the jsonb-text
    # prefilter: the same pods are still flagged (a pod the scan no longer finds would have its violation resolved).
    Pod.objects.filter(cluster=cluster, namespace="cases").update(baseline_violating=None)
    scan_cluster(cluster.pk)
    again = {v.subject for v in _open(cluster, "privileged-without-exception") if v.namespace == "cases"}
    assert again == set(flagged)
    assert connection.vendor == "postgresql"  # so the jsonb-text prefilter above was the one that ran


def test_a_namespace_of_no_tenant_is_enforced_and_scanned_and_system_namespaces_are_not(world) -> None:
    cluster, core = world["cluster"], world["core"]
    _create_namespace(core, "scratch")  # nobody assigned it to a tenant
    assert not TenantNamespace.objects.filter(cluster=cluster, namespace="scratch").exists()
    core.create_namespaced_pod("scratch", {**_pod("before", "default"), "metadata": {"name": "before"}})
    core.create_namespaced_pod("kube-system", {**_pod("agent", "default"), "metadata": {"name": "agent"}})
    _sync(cluster)
    scan_cluster(cluster.pk)
    assert {v.subject for v in _open(cluster, "privileged-without-exception")} == {
        "pod/ml-research/nccl-debug", "pod/scratch/before"}  # not the kube-system agent

    assert enforcement_apply(cluster_id=cluster.pk, namespace="") == "applied"  # no grant needed to enforce
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("scratch", {**_pod("after", "default"), "metadata": {"name": "after"}})
    assert "ValidatingAdmissionPolicy 'accelerator-portal-privileged'" in str(refused.value.body)
    core.create_namespaced_pod("kube-system", {**_pod("agent-2", "default"), "metadata": {"name": "agent-2"}})
    core.create_namespaced_pod("scratch", {**_pod("plain", "default", privileged=False),
                                           "metadata": {"name": "plain"}})


def test_a_tenant_namespace_is_enforced_even_when_listed_as_exempt(world, settings) -> None:
    settings.PORTAL_ENFORCEMENT_EXTRA_EXEMPT_NAMESPACES = ["ml-research", "scratch"]
    assert exempt_namespaces(world["cluster"].pk) == sorted([*EXEMPT, "scratch"])


def _apply_as_an_older_portal(cluster, entries: dict[str, str], *documents: dict) -> None:
    """The system namespace, an exception object with `entries` and `documents`, under the portal's field manager."""
    old = client_for(cluster)
    try:
        for document in [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PORTAL_SYSTEM_NAMESPACE}},
            {"apiVersion": "v1", "kind": "ConfigMap", "data": entries,
             "metadata": {"name": EXCEPTIONS_NAME, "namespace": PORTAL_SYSTEM_NAMESPACE}},
            *documents,
        ]:
            assert old.apply(document, field_manager=FIELD_MANAGER).applied
    finally:
        old.close()


def _legacy_documents(namespaces: list[str]) -> list[dict]:
    docs = list(yaml.safe_load_all((Path(__file__).parent / "legacy_privileged_policy.yaml").read_text()))
    docs[1]["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] = namespaces
    return docs


def test_an_upgrade_rewrites_old_exception_keys_and_the_old_policy_in_one_reconcile(world) -> None:
    """A cluster as an older portal left it: `<ns>.<sa>[.<workload>]` keys and the hand-written policy bound to the
    tenant namespaces. One reconcile (drift → apply) converges: new keys only, the generated policy, the binding
    everywhere; the in-force grant still admits its pod and nothing else does."""
    sim, cluster, core = world["sim"], world["cluster"], world["core"]
    grant = _granted(world, "privileged", service_account="runner", workload="diag")
    Grant.objects.filter(pk=grant.pk).update(state="active", activated_at=timezone.now(),
                                             apply_attempted_at=timezone.now())
    _apply_as_an_older_portal(cluster, {grant.legacy_exception_key: f"grant={grant.pk}"},
                              *_legacy_documents(["gpu-admin", "ml-research"]))
    diag = {"app.kubernetes.io/name": "diag"}
    # Before: the old key is ambiguous, so service account "runner.diag" passes too, and hostPID is not checked.
    core.create_namespaced_pod("ml-research", _labelled(_pod("dotted-before", "runner.diag"), {}))
    core.create_namespaced_pod("ml-research", {**_pod("pid-before", "default", privileged=False),
                                               "spec": {"hostPID": True, "containers": [{"name": "m", "image": "x"}]}})
    _sync(cluster)
    assert policy_problems(cluster.pk)
    EnforcementSettings.objects.update_or_create(cluster=cluster, defaults={"privileged_applied_at": None})
    assert grants_confirm()["reenqueued"] >= 1
    assert enforcement_apply(cluster_id=cluster.pk, namespace="") == "applied"  # what the enqueued task runs

    data = sim.store.get_stored("configmaps", PORTAL_SYSTEM_NAMESPACE, EXCEPTIONS_NAME).obj["data"]
    assert set(data) == {"ml-research_runner_diag"}
    stored = sim.store.get_stored("validatingadmissionpolicies", None, POLICY_NAME).obj
    assert stored["spec"]["variables"] == policy_document()["spec"]["variables"]
    _sync(cluster)
    assert policy_problems(cluster.pk) == []
    assert exception_keys(cluster.pk)[0] == {"ml-research_runner_diag"}
    core.create_namespaced_pod("ml-research", _labelled(_pod("granted", "runner"), diag))
    for refused_pod in (_pod("dotted-after", "runner.diag"), _labelled(_pod("other", "runner"), {}),
                        {**_pod("pid-after", "default", privileged=False),
                         "spec": {"hostPID": True, "containers": [{"name": "m", "image": "x"}]}}):
        with pytest.raises(ApiException):
            core.create_namespaced_pod("ml-research", refused_pod)
    grant.refresh_from_db()
    assert grant.state == "active"


def test_an_ended_grant_is_not_cleaned_up_while_its_old_format_key_remains(world) -> None:
    cluster = world["cluster"]
    grant = _granted(world, "privileged", service_account="debug")
    _apply_as_an_older_portal(cluster, {grant.legacy_exception_key: f"grant={grant.pk}"})
    grant_revoke(actor=world["reviewers"][0], grant_id=grant.pk, reason="done")
    _sync(cluster)
    grant.refresh_from_db()
    assert undone_in_cluster(grant, timezone.now()) is None  # "ml-research.debug" still admits its pods
    enforcement_apply(cluster_id=cluster.pk, namespace="")
    _sync(cluster)
    assert undone_in_cluster(grant, timezone.now()) is not None


def _labelled(pod: dict, labels: dict) -> dict:
    return {**pod, "metadata": {**pod["metadata"], "labels": labels}}
