"""components/admission-guards against the simulator's ValidatingAdmissionPolicy admission (same CEL semantics as
the API server): the portal's real writes pass, anything else its identities try is refused."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from inventory.k8s.client import KubernetesClusterClient
from kubesim import Simulator
from portal.enforcement.services import ADMIN_LABEL
from portal.quota.services import FIELD_MANAGER

from .conftest import SYSTEM_NAMESPACE, Doc, applied_documents, of_kind

WRITER = "system:serviceaccount:accelerator-portal:accelerator-portal-writer"
REMOTE_WRITER = "system:serviceaccount:accelerator-portal-system:accelerator-portal-writer"
WEB = "system:serviceaccount:accelerator-portal:accelerator-portal-web"
REMOTE_WEB = "system:serviceaccount:accelerator-portal-system:accelerator-portal-dry-run"
ADMIN = "kubernetes-admin"


def _scenario() -> list[Doc]:
    namespaces = [{"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": name, "labels": {"portal.example.com/tenant": "ml"},
                                "annotations": {"owner": "ml-team"}}}
                  for name in ("team-a", "team-b")]
    return [*namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM_NAMESPACE}}]


@pytest.fixture(scope="module")
def sim(admission_guards: list[Doc]) -> Iterator[Simulator]:
    with Simulator(scenario=_scenario(), port=0) as simulator:
        for doc in of_kind(admission_guards, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            plural = "validatingadmissionpolicies" if doc["kind"].endswith("Policy") else "validatingadmissionpolicybindings"
            status, body = _request(simulator, "POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", doc)
            assert status == 201, body
        yield simulator


def _request(sim: Simulator, method: str, path: str, body: Any = None, *, user: str = ADMIN,
             content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection(sim.host, sim.port, timeout=10)
    headers = {"Accept": "application/json", "Content-Type": content_type}
    if user != ADMIN:
        headers["Impersonate-User"] = user
    try:
        payload = None if body is None else (body if isinstance(body, str) else json.dumps(body)).encode()
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def _client(sim: Simulator, user: str) -> KubernetesClusterClient:
    from kubernetes import config

    api_client = config.new_client_from_config_dict(sim.kubeconfig())
    api_client.set_default_header("Impersonate-User", user)
    return KubernetesClusterClient(api_client)


def _apply_namespace(sim: Simulator, user: str, metadata: dict[str, Any],
                     manager: str = FIELD_MANAGER) -> tuple[int, dict[str, Any]]:
    document = yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
    return _request(sim, "PATCH", f"/api/v1/namespaces/{metadata['name']}?fieldManager={manager}&force=true",
                    document, user=user, content_type="application/apply-patch+yaml")


@pytest.mark.parametrize("user", [WRITER, REMOTE_WRITER])
def test_the_writer_sets_and_removes_the_admin_access_label_through_the_portals_own_apply(
    sim: Simulator, user: str
) -> None:
    client = _client(sim, user)
    try:
        grant = client.apply({"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": "team-a", "labels": {ADMIN_LABEL: "true"}}},
                             field_manager=FIELD_MANAGER)
        assert grant.applied, grant.message
        assert grant.object["metadata"]["labels"][ADMIN_LABEL] == "true"
        end = client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
                           field_manager=FIELD_MANAGER)
        assert end.applied, end.message
        assert ADMIN_LABEL not in end.object["metadata"]["labels"]
        assert end.object["metadata"]["labels"]["portal.example.com/tenant"] == "ml"
    finally:
        client.close()


def test_every_document_the_enforcement_applies_passes_the_guards(
    sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = _client(sim, WRITER)
    try:
        for document in applied_documents(monkeypatch, "team-b"):
            if document["kind"] == "ClusterQueue":
                # no guard covers kueue.x-k8s.io (this cluster serves no Kueue); the portal's ClusterQueue applies
                # are tested against a Kueue-serving simulator in tests/portal/test_quota_kueue.py
                continue
            result = client.apply(document, field_manager=FIELD_MANAGER)
            assert result.applied, f"{document['kind']}: {result.message}"
    finally:
        client.close()


@pytest.mark.parametrize("user", [WRITER, REMOTE_WRITER])
@pytest.mark.parametrize("change", [
    {"labels": {"portal.example.com/tenant": "someone-else"}},
    {"labels": {"portal.example.com/tenant": "ml", "pod-security.kubernetes.io/enforce": "privileged"}},
    {"annotations": {"owner": "me"}},
], ids=["relabel-tenant", "add-label", "annotate"])
def test_the_writer_may_change_nothing_else_on_a_namespace(sim: Simulator, user: str, change: dict[str, Any]) -> None:
    status, body = _apply_namespace(sim, user, {"name": "team-b", **change}, manager="intruder")
    assert status == 403, body
    assert "the Accelerator Portal may" in body["message"]


def test_the_writer_may_not_remove_other_labels(sim: Simulator) -> None:
    namespace = _request(sim, "GET", "/api/v1/namespaces/team-b")[1]
    namespace["metadata"]["labels"] = {}
    status, body = _request(sim, "PUT", "/api/v1/namespaces/team-b", namespace, user=WRITER)
    assert status == 403, body
    assert "may only remove the label resource.kubernetes.io/admin-access" in body["message"]


def test_other_identities_are_not_restricted_by_the_guards(sim: Simulator) -> None:
    status, body = _apply_namespace(sim, ADMIN, {"name": "team-b", "annotations": {"owner": "platform"}}, "admin")
    assert status == 200, body
    status, _ = _request(sim, "POST", "/api/v1/namespaces/team-a/pods", _pod("by-admin"))
    assert status == 201


def _pod(name: str) -> Doc:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


def _claim(name: str) -> Doc:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}


@pytest.mark.parametrize("user", [WEB, REMOTE_WEB])
def test_the_web_identity_may_only_dry_run(sim: Simulator, user: str) -> None:
    client = _client(sim, user)
    try:
        for document in (_pod("validated"), _claim("validated")):
            result = client.create_dry_run(document)
            assert result.accepted, result.message
    finally:
        client.close()
    status, body = _request(sim, "POST", "/api/v1/namespaces/team-a/pods", _pod("real"), user=user)
    assert status == 403, body
    assert "may only create objects with dryRun=All" in body["message"]
    status, _ = _request(sim, "POST", "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims", _claim("real"),
                         user=user)
    assert status == 403
