"""CMDB API on the synced demo: stable identities and relations, cursor pagination that loses and repeats nothing,
brief mode, search, ETag / If-None-Match, and hardware identifiers only for those who may see them."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from inventory.api.cmdb import ci_id, decode_cursor, encode_cursor
from inventory.models import Device
from portal.tenancy.roles import Role
from tests.conftest import make_user
from tests.conftest import sync_once as _sync

pytestmark = pytest.mark.slow


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _walk(api: APIClient, path: str, **params) -> list[dict]:
    items, url, pages = [], path, 0
    response = api.get(url, params)
    while True:
        assert response.status_code == 200, response.content
        body = response.json()
        items.extend(body["results"])
        pages += 1
        if not body["next"]:
            return items
        response = api.get(body["next"])


def test_identities_relations_pagination_and_stability(live_demo) -> None:
    sim, cluster = live_demo
    admin = _api(make_user("platform", Role.PLATFORM_ADMIN))
    whole = _walk(admin, "/api/v1/cmdb/cards/", limit=1000)
    paged = _walk(admin, "/api/v1/cmdb/cards/", limit=7)
    assert [c["id"] for c in paged] == [c["id"] for c in whole]  # no loss, no repeat across pages
    assert len({c["id"] for c in whole}) == len(whole)
    keys = {c["source_native_key"] for c in whole}
    assert any(k.startswith("gpu-uuid/") for k in keys)  # DRA cards by their published uuid
    assert any(k.startswith("gpu-slot/demo/") for k in keys)  # device-plugin cards by node, resource and index
    for card in whole:
        assert card["id"] == ci_id(card["source_native_key"])
        assert card["cluster"]["id"] == ci_id("k8s-cluster/demo")
        assert card["node"]["id"] == ci_id(f"k8s-node/demo/{card['node']['name']}")
    # Whole cards of the device plugin: as many as the inventory counts for them.
    plugin_cards = sum(round(d.cards) for d in Device.objects.filter(path="device-plugin").exclude(mode="mig"))
    assert len([k for k in keys if k.startswith("gpu-slot/")]) >= plugin_cards

    slices = _walk(admin, "/api/v1/cmdb/slices/")
    assert slices
    partitions = [s for s in slices if s["source_native_key"].startswith("gpu-partition/")]
    mig_slots = [s for s in slices if s["source_native_key"].startswith("mig-slot/")]
    assert partitions or mig_slots
    card_ids = {c["id"] for c in whole}
    for partition in partitions:
        if partition["parent"]:
            assert partition["parent"]["id"] in card_ids  # slice → its parent card
    nodes = _walk(admin, "/api/v1/cmdb/nodes/", brief=1)
    assert set(nodes[0]) == {"id", "type", "name", "source_native_key"}
    assert {n["source_native_key"] for n in nodes} >= {f"k8s-node/demo/{c['node']['name']}" for c in whole}
    assert _walk(admin, "/api/v1/cmdb/clusters/")[0]["source_native_key"] == "k8s-cluster/demo"

    _sync(cluster)  # a relist and a simulator restart change no identity
    sim.restart(compact=True)
    _sync(cluster)
    assert [c["id"] for c in _walk(admin, "/api/v1/cmdb/cards/", limit=1000)] == [c["id"] for c in whole]


def test_search_etag_redaction_and_bad_cursors(live_demo) -> None:
    admin = _api(make_user("platform", Role.PLATFORM_ADMIN))
    cards = _walk(admin, "/api/v1/cmdb/cards/", limit=1000)
    node = cards[0]["node"]["name"]
    found = _walk(admin, "/api/v1/cmdb/cards/", q=node, limit=1000)
    assert found
    assert all(c["node"]["name"] == node for c in found)
    assert _walk(admin, "/api/v1/cmdb/cards/", q="no-such-thing") == []

    first = admin.get("/api/v1/cmdb/nodes/")
    assert first.has_header("ETag")
    again = admin.get("/api/v1/cmdb/nodes/", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304
    assert admin.get("/api/v1/cmdb/nodes/", HTTP_IF_NONE_MATCH='"stale"').status_code == 200

    tenant = _api(make_user("member", Role.TENANT_MEMBER))
    hidden = {c["id"]: c["source_native_key"] for c in _walk(tenant, "/api/v1/cmdb/cards/", limit=1000)}
    for card in cards:
        if card["source_native_key"].startswith(("gpu-uuid/", "gpu-pci/")):
            assert hidden[card["id"]] == "redacted"  # same stable id, no hardware identifier
        else:
            assert hidden[card["id"]] == card["source_native_key"]

    assert decode_cursor(encode_cursor(12, 3)) == (12, 3)
    for bad in ("x", "e30", encode_cursor(1, 2)[:-2] + "!!"):
        assert admin.get("/api/v1/cmdb/cards/", {"cursor": bad}).status_code == 400
    assert admin.get("/api/v1/cmdb/cards/", {"limit": "many"}).status_code == 400
