"""Query-count guards for the portal's list pages and list endpoints that had none: tenants, quota and access
requests, offerings, chargeback, the approvers' queues, pending pods and findings.

Each URL is read with a small world and again with a larger one; the number of queries must not grow with the rows
(an N+1 fails here, naming the URL and both counts). The inventory APIs, node/cluster lists, the catalog list and
the audit list have their own guards beside their tests. The last test shows the guard can fail.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from catalog.models import UnitKind
from inventory.models import AllocationInterval, Cluster
from portal.access.services import access_request_create
from portal.models import AccessKind, TenantMembership
from portal.quota.services import quota_request_create
from portal.tenancy.roles import Role
from tests.catalog.factories import OfferingFactory, OfferingPriceFactory
from tests.conftest import make_user
from tests.inventory.factories import ClusterFactory, NodeFactory, PodFactory
from tests.portal.factories import give_namespaces
from tests.tools import body

pytestmark = pytest.mark.django_db

_today = dt.date.today()  # noqa: DTZ011 - a window around now, whatever the zone
WINDOW = f"{_today - dt.timedelta(days=7)},{_today + dt.timedelta(days=1)}"

# (persona, URL): every list a user opens, HTML and JSON.
URLS = [
    ("ada", "/tenants/"),
    ("ada", "/api/v1/tenants/"),
    ("lena", "/api/v1/quota-requests/"),
    ("abe", "/quota/queue/"),
    ("lena", "/quota/"),
    ("mia", "/api/v1/access-requests/"),
    ("sol", "/access/queue/"),
    ("mia", "/access/"),
    ("sol", "/api/v1/grants/"),
    ("sol", "/api/v1/violations/"),
    ("mia", "/api/v1/catalog/offerings/"),
    ("fay", f"/api/v1/chargeback/?window={WINDOW}&aggregate=tenant,offering"),
    ("fay", f"/api/v1/chargeback/?window={WINDOW}&aggregate=tenant&format=csv"),
    ("fay", f"/api/v1/chargeback/focus/?window={WINDOW}"),
    ("fay", "/chargeback/"),
    ("ada", "/inventory/pending-pods/"),
    ("ada", "/inventory/findings/"),
    ("ada", "/inventory/accelerators/"),
]


class World:
    """Users once; then `grow(n)` adds n of everything a list shows."""

    def __init__(self) -> None:
        self.cluster: Cluster = ClusterFactory(name="qc")
        self.users = {
            "ada": make_user("ada", Role.PLATFORM_ADMIN, superuser=True),
            "lena": make_user("lena", Role.TENANT_LEAD),
            "mia": make_user("mia", Role.TENANT_MEMBER),
            "abe": make_user("abe", Role.APPROVER),
            "sol": make_user("sol", Role.SECURITY_APPROVER),
            "fay": make_user("fay", Role.FINANCE),
        }
        self.size = 0

    def grow(self, count: int) -> None:
        now = timezone.now()
        lena, mia = self.users["lena"], self.users["mia"]
        for i in range(self.size, self.size + count):
            namespace = f"ns-{i}"
            tenant = give_namespaces(lena, self.cluster, namespace, tenant_slug=f"team-{i}", role="lead")
            TenantMembership.objects.get_or_create(tenant=tenant, user=mia, defaults={"role": "member"})
            offering = OfferingFactory(slug=f"gpu-{i}", unit_kind=UnitKind.WHOLE, resource_name="nvidia.com/gpu")
            OfferingPriceFactory(offering=offering)
            node = NodeFactory(cluster=self.cluster, name=f"gpu-node-{i:03d}")
            pod = PodFactory(cluster=self.cluster, namespace=namespace, node_name=node.name)
            AllocationInterval.objects.create(
                cluster=self.cluster, holder_kind=AllocationInterval.HolderKind.POD, holder_uid=pod.uid,
                namespace=namespace, name=pod.name, node_name=node.name, resource="nvidia.com/gpu", quantity=2,
                started_at=now - dt.timedelta(days=3), ended_at=None)
            quota_request_create(actor=lena, cluster_id=self.cluster.pk, namespace=namespace, offering_id=offering.pk,
                                 units=1, justification=f"training run {i}")
            access_request_create(actor=mia, kind=AccessKind.ADMIN_ACCESS, cluster_id=self.cluster.pk,
                                  namespace=namespace, reason=f"debugging {i}", ticket_ref=f"OPS-{i}",
                                  window=dt.timedelta(hours=2))
        self.size += count


@pytest.fixture
def world() -> World:
    return World()


def _queries(world: World, persona: str, url: str) -> int:
    client = Client()
    client.force_login(world.users[persona])
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
        body(response)  # a streamed answer runs its queries while it is read
    assert response.status_code == 200, f"{persona} {url}: HTTP {response.status_code}"
    return len(captured.captured_queries)


def _growth(world: World, persona: str, url: str) -> tuple[int, int]:
    counts = []
    for rows in (2, 6):
        world.grow(rows)
        _queries(world, persona, url)  # the first read fills caches (content types, chargeback's offering mapping)
        counts.append(_queries(world, persona, url))
    return counts[0], counts[1]


@pytest.mark.parametrize(("persona", "url"), URLS, ids=[f"{p}:{u}" for p, u in URLS])
def test_list_query_count_does_not_grow_with_rows(world: World, persona: str, url: str) -> None:
    small, large = _growth(world, persona, url)
    assert large <= small, f"{persona} {url}: {small} queries with 2 of everything, {large} with 8 (an N+1)"


def test_the_guard_catches_an_n_plus_one(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A serializer that reads a relation per row (the classic N+1) makes the guard fail."""
    from portal.access.api import AccessRequestSerializer

    original: Callable[..., Any] = AccessRequestSerializer.to_representation

    def per_row_query(self: Any, instance: Any) -> Any:
        data = original(self, instance)
        data["requester"] = User.objects.get(pk=instance.requested_by_id).username  # one query per row
        return data

    clean = _growth(world, "mia", "/api/v1/access-requests/")
    assert clean[1] <= clean[0]  # the endpoint is clean before the N+1 is planted
    monkeypatch.setattr(AccessRequestSerializer, "to_representation", per_row_query)
    world.grow(2)
    small = _queries(world, "mia", "/api/v1/access-requests/")
    world.grow(6)
    assert _queries(world, "mia", "/api/v1/access-requests/") > small
