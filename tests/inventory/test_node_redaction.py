"""PORTAL_REDACT_NODE_NAMES: node names become stable pseudonyms in every REST API answer to users who may not see
sensitive data (here: a platform admin's token without `inventory:sensitive`), and stay real for those who may."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import Node
from inventory.redaction import NodeNameRedactor, node_pseudonym
from portal.tenancy.roles import Role
from tests.apitokens.conftest import bearer, make_token
from tests.conftest import make_user
from tests.tools import body

TOKEN = re.compile(r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?")


def _window() -> str:
    today = timezone.now().date()
    return f"{today.replace(day=1).isoformat()},{(today + timedelta(days=1)).isoformat()}"


def _endpoints() -> list[str]:
    window = _window()
    return [
        "/api/v1/nodes/", "/api/v1/devices/?limit=500", "/api/v1/pods/?limit=500", "/api/v1/resource-slices/",
        "/api/v1/resource-claims/", "/api/v1/findings/", "/api/v1/cmdb/nodes/?limit=500",
        "/api/v1/cmdb/cards/?limit=500", "/api/v1/cmdb/slices/?limit=500", "/api/v1/changes/?limit=1000",
        "/api/v1/catalog/offerings/", f"/api/v1/chargeback/?window={window}&detail=intervals",
        f"/api/v1/chargeback/?window={window}&detail=intervals&format=csv", f"/api/v1/chargeback/focus/?window={window}",
    ]


def _names_in(text: str, names: set[str]) -> set[str]:
    return {token for token in TOKEN.findall(text) if token in names}


@pytest.mark.slow
def test_api_answers_carry_pseudonyms_not_node_names(live_demo, settings) -> None:
    settings.PORTAL_REDACT_NODE_NAMES = True
    names = set(Node.objects.values_list("name", flat=True))
    assert len(names) >= 10
    admin = make_user("cmdb-redacted", Role.PLATFORM_ADMIN)
    client = bearer(make_token(admin, "inventory:read", "chargeback:read").plaintext)

    for path in _endpoints():
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code, body(response)[:300])
        leaked = _names_in(body(response).decode(), names)
        assert not leaked, (path, sorted(leaked)[:5])

    # Stable pseudonyms that keep relations: every device's node is one of the nodes' pseudonyms, and the CMDB's
    # node items carry the same pseudonym as the nodes list.
    nodes = {n["name"] for n in client.get("/api/v1/nodes/?limit=1000").json()["results"]}
    assert nodes == {node_pseudonym(name) for name in names if Node.objects.filter(name=name, deleted_at=None)}
    devices = client.get("/api/v1/devices/?limit=1000").json()["results"]
    device_nodes = {d["node_name"] for d in devices if d["node_name"]}
    assert device_nodes
    assert device_nodes <= nodes
    again = {n["name"] for n in client.get("/api/v1/nodes/?limit=1000").json()["results"]}
    assert again == nodes


@pytest.mark.slow
def test_the_sensitive_scope_and_the_setting_show_real_names(live_demo, settings) -> None:
    names = set(Node.objects.values_list("name", flat=True))
    admin = make_user("cmdb-sensitive", Role.PLATFORM_ADMIN)
    sensitive = bearer(make_token(admin, "inventory:read", "inventory:sensitive").plaintext)
    plain = bearer(make_token(admin, "inventory:read", name="plain").plaintext)

    settings.PORTAL_REDACT_NODE_NAMES = True
    assert {n["name"] for n in sensitive.get("/api/v1/nodes/?limit=1000").json()["results"]} <= names
    assert not ({n["name"] for n in plain.get("/api/v1/nodes/?limit=1000").json()["results"]} & names)

    settings.PORTAL_REDACT_NODE_NAMES = False  # the default: nothing changes
    assert {n["name"] for n in plain.get("/api/v1/nodes/?limit=1000").json()["results"]} <= names


def test_the_redactor_replaces_whole_names_in_keys_values_and_text() -> None:
    redact = NodeNameRedactor(frozenset({"gpu-1", "a100-node.example.com"}))
    one, fqdn = node_pseudonym("gpu-1"), node_pseudonym("a100-node.example.com")
    data = {
        "node_name": "gpu-1",
        "free_by_node": {"gpu-1": 3, "gpu-10": 2},
        "key": "node/gpu-1/nvidia.com/gpu",
        "message": "0/3 nodes are available: 1 node(s) didn't match on a100-node.example.com, gpu-10 is busy",
        "items": ["gpu-1", 7, None, ("gpu-1",)],
    }
    assert redact(data) == {
        "node_name": one,
        "free_by_node": {one: 3, "gpu-10": 2},
        "key": f"node/{one}/nvidia.com/gpu",
        "message": f"0/3 nodes are available: 1 node(s) didn't match on {fqdn}, gpu-10 is busy",
        "items": [one, 7, None, [one]],
    }
    assert one.startswith("node-")
    assert len(one) == 17
    assert one != fqdn
    assert node_pseudonym("gpu-1") == one  # stable


@pytest.mark.slow
def test_the_audit_record_is_served_as_recorded(live_demo, settings) -> None:
    from django.db import transaction

    from audit.services import audit_record

    settings.PORTAL_REDACT_NODE_NAMES = True
    node = Node.objects.first()
    name = node.name
    auditor = make_user("auditor", Role.FINANCE)
    with transaction.atomic():
        audit_record(actor=None, verb="node.inspected", target=node, data={"node": name})
    client = bearer(make_token(auditor, "audit:read", "inventory:read").plaintext)
    listed = client.get("/api/v1/audit-events/?verb=node.inspected").json()["results"]
    assert [event["data"] for event in listed] == [{"node": name}]
    assert name in b"".join(client.get("/api/v1/audit-events/export/?verb=node.inspected").streaming_content).decode()
    # ...while the same user's inventory answers carry the pseudonym.
    nodes = {n["name"] for n in client.get("/api/v1/nodes/?limit=1000").json()["results"]}
    assert node_pseudonym(name) in nodes
    assert name not in nodes
