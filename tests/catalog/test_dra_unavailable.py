"""Features that need DRA on the legacy clusters: unavailable with the reason where DRA is not served, working where it
is served as v1beta1 or v1beta2 (synced and converted), never an error page and never a silent empty list."""

from __future__ import annotations

import pytest
from django.urls import reverse

from inventory.models import Pod
from tests.catalog.factories import OfferingFactory
from tests.conftest import live_cluster, sync_once
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.django_db(transaction=True)

L40S = {"slug": "l40s", "name": "L40S", "unit_kind": "dra-device", "device_class_name": "gpu.nvidia.com",
        "lifecycle": "active"}
NO_DRA = "DRA not available on this cluster (Kubernetes 1.31)"
CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-gpu, namespace: ml-research}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com}
"""


def _generate(client, cluster):
    data = {"offering": "l40s", "cluster": cluster.pk, "namespace": "ml-research", "name": "train",
            "shape": "claim-template-job", "count": 1, "parallelism": 1, "image": "nvcr.io/nvidia/pytorch:25.01-py3",
            "command": "python train.py", "cpu": "8", "memory": "64Gi"}
    return client.post(reverse("catalog:generate"), data, headers={"HX-Request": "true"})


def _validate(client, cluster):
    return client.post(reverse("catalog:validate"), {"manifest": CLAIM, "cluster": cluster.pk},
                       headers={"HX-Request": "true"})


@pytest.mark.parametrize("scenario", ["legacy-no-dra"])
def test_dra_features_unavailable_without_dra(scenario, client, member):
    OfferingFactory(**L40S)
    with live_cluster(scenario, name=scenario) as (_, cluster):
        give_namespaces(member, cluster, "ml-research", tenant_slug="research")
        client.force_login(member)
        detail = client.get(reverse("catalog:offering_detail", args=["l40s"]))
        assert detail.status_code == 200
        assert f"Unavailable on cluster {scenario}: {NO_DRA}" in detail.content.decode()
        listing = client.get(reverse("catalog:offering_list")).content.decode()
        assert f"DRA offerings are unavailable on cluster {scenario}: {NO_DRA}" in listing
        generated = _generate(client, cluster)
        assert generated.status_code == 200
        body = generated.content.decode()
        assert f"DRA templates are unavailable on this cluster: {NO_DRA}" in body
        assert f"DRA is unavailable on this cluster: {NO_DRA}" in body  # the validator says why, not "no such class"
        assert "does not exist" not in body
        validated = _validate(client, cluster)
        assert validated.status_code == 200
        assert f"DRA is unavailable on this cluster: {NO_DRA}" in validated.content.decode()


@pytest.mark.slow  # one live legacy cluster per API profile (about 3 s each)
@pytest.mark.parametrize("scenario", ["legacy-dra-v1beta1", "legacy-dra-v1beta2", "legacy-no-events"])
def test_dra_features_work_on_beta_and_eventless_clusters(scenario, client, member):
    OfferingFactory(**L40S)
    with live_cluster(scenario, name=scenario) as (sim, cluster):
        give_namespaces(member, cluster, "ml-research", tenant_slug="research")
        client.force_login(member)
        detail = client.get(reverse("catalog:offering_detail", args=["l40s"])).content.decode()
        assert "Unavailable on cluster" not in detail
        assert "unavailable on cluster" not in client.get(reverse("catalog:offering_list")).content.decode()
        body = _generate(client, cluster).content.decode()
        assert f"apiVersion: resource.k8s.io/{sim.api.resource_versions[0]}" in body
        assert "schema-not-found" not in body  # written in the version the cluster serves
        assert "unavailable on this cluster" not in body
        assert "Will it schedule?" in body  # the explainer ran against the converted DRA objects
        assert "DeviceClass" not in body or "does not exist" not in body
        validated = _validate(client, cluster).content.decode()
        assert "unavailable" not in validated
        assert "does not exist" not in validated
        # a pod holding a claim is explained from the converted claims
        pod = Pod.objects.live().filter(cluster=cluster, namespace="ml-research").exclude(claim_names=[]).first()
        explained = client.get(reverse("catalog:pod_explain", args=[pod.pk]))
        assert explained.status_code == 200
        assert "unavailable" not in explained.content.decode()
        # the control plane loses DRA (downgrade): the same pod's claim explanation states why instead
        sim.serve_api("no-dra")
        sync_once(cluster)
        explained = client.get(reverse("catalog:pod_explain", args=[pod.pk])).content.decode()
        assert "Claim explanations are unavailable on this cluster: DRA not available on this cluster" in explained
