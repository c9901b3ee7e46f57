"""Pods and claims in the inventory pages and API are scoped to the user's tenants (platform roles see all)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from inventory.models import Pod, ResourceClaim
from tests.inventory.factories import ClusterFactory, PodFactory
from tests.portal.factories import give_namespaces

pytestmark = pytest.mark.django_db


@pytest.fixture
def pods(member):
    cluster = ClusterFactory(name="lab")
    give_namespaces(member, cluster, "mine", tenant_slug="mine")
    give_namespaces(User.objects.create_user("bob"), cluster, "theirs", tenant_slug="theirs")
    for ns in ("mine", "theirs", "unmapped"):
        PodFactory(cluster=cluster, namespace=ns, name=f"train-{ns}", stage="pending-unscheduled", accelerator=True,
                   phase="Pending", scheduled=False)
        ResourceClaim.objects.create(cluster=cluster, uid=f"c-{ns}", name=f"claim-{ns}", namespace=ns,
                                     resource_version="1", raw={})
    return cluster


@pytest.mark.parametrize(("who", "visible"), [
    ("member", {"mine"}), ("lead", set()), ("approver", {"mine", "theirs", "unmapped"}),
    ("platform_admin", {"mine", "theirs", "unmapped"}), ("finance", {"mine", "theirs", "unmapped"}),
])
def test_pods_and_claims_are_scoped(request, client, pods, who, visible) -> None:
    user = request.getfixturevalue(who)
    api = APIClient()
    api.force_authenticate(user)
    assert {p["namespace"] for p in api.get("/api/v1/pods/").json()["results"]} == visible
    assert {c["namespace"] for c in api.get("/api/v1/resource-claims/").json()["results"]} == visible
    client.force_login(user)
    page = client.get("/inventory/pending-pods/")
    assert {p.namespace for p in page.context["page_obj"]} == visible


def test_other_tenants_pod_answers_404(member, pods) -> None:
    api = APIClient()
    api.force_authenticate(member)
    theirs = Pod.objects.get(namespace="theirs")
    mine = Pod.objects.get(namespace="mine")
    assert api.get(f"/api/v1/pods/{theirs.pk}/").status_code == 404
    assert api.get(f"/api/v1/pods/{mine.pk}/").status_code == 200
    claim = ResourceClaim.objects.get(namespace="theirs")
    assert api.get(f"/api/v1/resource-claims/{claim.pk}/").status_code == 404
