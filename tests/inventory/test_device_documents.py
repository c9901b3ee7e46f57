"""The devices list serves stored API documents; they must equal the serializer's representation, per role."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from inventory.models import Device
from portal.tenancy.roles import Role
from tests.conftest import make_user


@pytest.mark.parametrize("role", [Role.TENANT_MEMBER, Role.PLATFORM_ADMIN])
def test_list_items_equal_the_detail_representation(demo_cluster, role: Role) -> None:
    client = Client()
    client.force_login(make_user(f"user-{role.value}", role))
    listing = client.get(reverse("inventory-api:device-list"), {"limit": 500}).json()
    assert listing["count"] is None
    assert len(listing["results"]) == Device.objects.count() > 50
    for item in listing["results"]:
        detail = client.get(reverse("inventory-api:device-detail", kwargs={"pk": item["id"]})).json()
        assert item == detail
    uuids = [d.attributes["uuid"]["string"] for d in Device.objects.filter(path="dra")]
    body = client.get(reverse("inventory-api:device-list"), {"limit": 500}).content.decode()
    assert all((uuid in body) == (role == Role.PLATFORM_ADMIN) for uuid in uuids)


def test_pages_follow_next_links_without_counting(demo_cluster) -> None:
    client = Client()
    client.force_login(make_user("admin-pager", Role.PLATFORM_ADMIN))
    seen, url = [], reverse("inventory-api:device-list") + "?limit=7"
    while url:
        page = client.get(url).json()
        seen.extend(item["key"] for item in page["results"])
        url = page["next"]
    assert sorted(seen) == sorted(Device.objects.values_list("key", flat=True))
    assert len(seen) == len(set(seen))
