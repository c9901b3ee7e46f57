"""Exceptions end to end against the simulator over real HTTP (the official client): grants applied under the
portal's field manager, confirmed by the sync, used, expired and undone; the admission policy enforced by the API
server; violations detected from synced data; the policy manifests valid against the Kubernetes schema."""

from __future__ import annotations

import datetime as dt

import kubernetes_validate
import pytest
import yaml
from django.utils import timezone
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from rest_framework.test import APIClient

from audit.models import AuditEvent
from inventory.errors import ClusterUnreachableError
from inventory.k8s.types import PORTAL_SYSTEM_NAMESPACE
from inventory.leases import lease_backend
from inventory.services.clients import client_for
from inventory.services.sync import cluster_sync_once
from portal.access import access_expire_due, access_request_create, access_request_review, grant_revoke
from portal.enforcement import (
    ADMIN_LABEL,
    EXCEPTIONS_NAME,
    POLICY_NAME,
    enforcement_apply,
    enforcement_apply_failed,
    grants_confirm,
    privileged_documents,
)
from portal.models import AccessPolicy, EnforcementSettings, Grant, GrantUse, Violation
from portal.quota import FIELD_MANAGER
from portal.roles import Role
from portal.violations import scan_cluster
from tests.conftest import make_user
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.slow
HOUR = dt.timedelta(hours=1)


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
    assert exceptions["data"] == {"ml-research.debug": f"grant={grant.pk} until={grant.ends_at.isoformat()}"}
    assert sim.store.get_stored("validatingadmissionpolicies", None, POLICY_NAME) is not None
    binding = sim.store.get_stored("validatingadmissionpolicybindings", None, POLICY_NAME).obj
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "gpu-admin", "ml-research"]
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
    assert "ml-research.debug" not in (sim.store.get_stored("configmaps", PORTAL_SYSTEM_NAMESPACE,
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
