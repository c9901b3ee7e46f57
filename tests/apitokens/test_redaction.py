"""Hardware identifiers through a token: only with `inventory:sensitive`, and only if the user may see them at all
(inventory.redaction.can_see_sensitive is the one rule)."""

from __future__ import annotations

import pytest

from tests.apitokens.conftest import bearer, make_token
from tests.inventory.factories import GPU_UUID, PCI_BUS_ID, ClusterFactory, DraDeviceFactory, ResourceSliceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def device():
    cluster = ClusterFactory(name="redaction-lab")
    ResourceSliceFactory(cluster=cluster)
    return DraDeviceFactory(cluster=cluster)


def _bodies(client, device) -> str:
    """The list (stored documents), the detail (serializer) and a raw slice spec, as text."""
    listed = client.get("/api/v1/devices/")
    detail = client.get(f"/api/v1/devices/{device.pk}/")
    slices = client.get("/api/v1/resource-slices/")
    for response in (listed, detail, slices):
        assert response.status_code == 200
    assert detail.json()["attributes"]["uuid"] in ({"string": GPU_UUID}, "redacted")
    return listed.content.decode() + detail.content.decode() + slices.content.decode()


def test_platform_roles_need_the_sensitive_scope(platform_admin, device) -> None:
    plain = _bodies(bearer(make_token(platform_admin, "inventory:read", name="plain").plaintext), device)
    assert GPU_UUID not in plain
    assert PCI_BUS_ID not in plain
    assert '"uuid":"redacted"' in plain.replace(" ", "")

    sensitive = _bodies(bearer(make_token(platform_admin, "inventory:read", "inventory:sensitive",
                                          name="sensitive").plaintext), device)
    assert GPU_UUID in sensitive
    assert PCI_BUS_ID in sensitive


def test_the_scope_does_not_lift_redaction_for_tenant_roles(member, device) -> None:
    text = _bodies(bearer(make_token(member, "inventory:read", "inventory:sensitive").plaintext), device)
    assert GPU_UUID not in text
    assert PCI_BUS_ID not in text


def test_sessions_keep_the_role_rule(platform_admin, member, device) -> None:
    from rest_framework.test import APIClient

    admin, tenant = APIClient(), APIClient()
    admin.force_login(platform_admin)
    tenant.force_login(member)
    assert GPU_UUID in _bodies(admin, device)
    assert GPU_UUID not in _bodies(tenant, device)
