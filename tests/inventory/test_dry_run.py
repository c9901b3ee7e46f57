"""Server-side dry run through the official client against the simulator: admission runs, nothing is stored."""

from __future__ import annotations

import pytest

from inventory.errors import ClusterRequestError
from inventory.k8s.client import KubernetesClusterClient
from kubesim import Simulator

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "ml-research"},
       "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}
ADMIN = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "probe", "namespace": "ml-research"},
         "spec": {"spec": {"devices": {"requests": [
             {"name": "all", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All",
                                         "adminAccess": True}}]}}}}


@pytest.fixture(scope="module")
def client():
    with Simulator(scenario="demo", port=0) as sim:
        yield sim, KubernetesClusterClient.from_kubeconfig(sim.kubeconfig())


def test_accepted_object_is_not_stored(client) -> None:
    sim, api = client
    result = api.create_dry_run(POD)
    assert result.accepted
    assert result.status == 201
    assert sim.store.get_stored("pods", "ml-research", "probe") is None


def test_refusals_are_results_with_the_servers_message(client) -> None:
    _, api = client
    missing = api.create_dry_run({**POD, "metadata": {"name": "probe", "namespace": "nope"}})
    assert (missing.accepted, missing.status, missing.message) == (False, 404, 'namespaces "nope" not found')
    admin = api.create_dry_run(ADMIN)
    assert not admin.accepted
    assert admin.status == 422
    assert "requires the `resource.kubernetes.io/admin-access: true` label" in admin.message
    assert admin.causes[0].startswith("spec.spec.devices.requests[0].exactly.adminAccess")
    labelled = api.create_dry_run({**ADMIN, "metadata": {"name": "probe", "namespace": "gpu-admin"}})
    assert labelled.accepted


def test_unsupported_kind_is_refused_before_any_request(client) -> None:
    _, api = client
    with pytest.raises(ClusterRequestError):
        api.create_dry_run({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}})
