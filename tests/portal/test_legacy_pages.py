"""Every page on each legacy cluster (no DRA 1.31, DRA v1beta1 1.32, v1beta2 1.33, no events.k8s.io) renders: no
error page, and the cluster page states what the cluster serves."""

from __future__ import annotations

import pytest
from django.urls import reverse

from inventory.models import Node, Pod
from tests.catalog.factories import OfferingFactory
from tests.conftest import live_cluster
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.django_db(transaction=True)

PAGES = (
    "home", "inventory:overview", "inventory:capacity", "inventory:pending_pods", "inventory:findings",
    "inventory:cluster_list", "inventory:node_list", "catalog:offering_list", "catalog:generate", "catalog:validate",
    "portal:quota", "portal:access", "portal:access_queue", "portal:violations", "portal:chargeback",
    "portal:tenant_list",
)
STATED = {
    "legacy-no-dra": "DRA not available on this cluster (Kubernetes 1.31)",
    "legacy-dra-v1beta1": "ResourceSlice served as v1beta1",
    "legacy-dra-v1beta2": "ResourceSlice served as v1beta2",
    "legacy-no-events": "events.k8s.io not served on this cluster (Kubernetes 1.35)",
}


@pytest.mark.slow  # one live legacy cluster per API profile (about 3 s each)
@pytest.mark.parametrize("scenario", sorted(STATED))
def test_every_page_renders_on_legacy_clusters(scenario, client, platform_admin, member):
    OfferingFactory(slug="l40s", unit_kind="dra-device", device_class_name="gpu.nvidia.com")
    OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    with live_cluster(scenario, name=scenario) as (_, cluster):
        give_namespaces(member, cluster, "ml-research", tenant_slug="research")
        urls = [reverse(name) for name in PAGES]
        urls += [reverse("inventory:cluster_detail", args=[cluster.pk]),
                 reverse("inventory:node_detail", args=[Node.objects.filter(cluster=cluster).first().pk]),
                 reverse("catalog:offering_detail", args=["l40s"]), reverse("catalog:offering_detail", args=["h100"])]
        pending = Pod.objects.live().filter(cluster=cluster, node_name="").first()
        if pending is not None:
            urls.append(reverse("catalog:pod_explain", args=[pending.pk]))
        for user in (platform_admin, member):
            client.force_login(user)
            for url in urls:
                response = client.get(url, follow=True)  # home sends each role to its work
                allowed = {200} if user == platform_admin else {200, 403}  # a member may not open the approvers' queues
                assert response.status_code in allowed, (user.username, url, response.status_code)
        client.force_login(platform_admin)
        page = client.get(reverse("inventory:cluster_detail", args=[cluster.pk])).content.decode()
        assert STATED[scenario] in page
