"""audit_record: the new fields, actor kinds, and all-or-nothing with the change it records."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser, Group
from django.db import transaction

from audit.chain import GENESIS, event_digest
from audit.context import audit_context
from audit.models import ActorKind, AuditEvent
from audit.services import audit_record, audit_verify
from tests.catalog.factories import OfferingFactory


class RenameFailedError(Exception):
    pass


@transaction.atomic(durable=True)
def group_rename(*, actor: Any, group_id: int, name: str, reason: str = "", fail: bool = False) -> Group:
    """A service shaped like ours: change, audit in the same transaction, then (optionally) fail."""
    group = Group.objects.select_for_update().get(pk=group_id)
    before = {"name": group.name}
    group.name = name
    group.save(update_fields=["name"])
    audit_record(actor=actor, verb="group.renamed", target=group, before=before, after={"name": name},
                 reason=reason)
    if fail:
        raise RenameFailedError("the change failed after it was audited")
    return group


@pytest.mark.django_db(transaction=True)
def test_a_failed_transaction_leaves_no_event_and_a_committed_one_always_has_it(finance) -> None:
    group = Group.objects.create(name="before")
    with pytest.raises(RenameFailedError):
        group_rename(actor=finance, group_id=group.pk, name="failed", fail=True)
    group.refresh_from_db()
    assert group.name == "before"
    assert not AuditEvent.objects.exists()

    group_rename(actor=finance, group_id=group.pk, name="after", reason="ticket OPS-1")
    group.refresh_from_db()
    event = AuditEvent.objects.get()
    assert group.name == "after"
    assert (event.verb, event.before, event.after, event.reason) == (
        "group.renamed", {"name": "before"}, {"name": "after"}, "ticket OPS-1")
    assert event.prev_hash == GENESIS  # the rolled-back event never joined the chain
    assert audit_verify().intact


@pytest.mark.django_db
def test_event_records_every_field_and_hashes_them(finance, target) -> None:
    with transaction.atomic(), audit_context(request_id="req-1", source_address="192.0.2.7"):
        event = audit_record(
            actor=finance, verb="thing.changed", target=target, data={"price": Decimal("1.50")},
            before={"when": dt.date(2030, 1, 2)}, after={"n": 1}, reason="because",
        )
    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.actor_id == finance.pk
    assert (stored.actor_name, stored.actor_kind) == ("finance", ActorKind.USER)
    assert (stored.target_type, stored.target_id, stored.target_repr) == ("auth.group", str(target.pk), target.name)
    assert stored.data == {"price": "1.50"}
    assert stored.before == {"when": "2030-01-02"}
    assert (stored.request_id, stored.source_address, stored.hash_version) == ("req-1", "192.0.2.7", 2)
    assert event_digest(stored) == stored.hash  # what was hashed is what the database hands back
    # Each new field is covered by the hash.
    for name, value in [("actor_kind", "token"), ("before", {"when": "x"}), ("after", None), ("reason", "other"),
                        ("request_id", "req-2"), ("source_address", "192.0.2.8"), ("hash_version", 1)]:
        setattr(stored, name, value)
        assert event_digest(stored) != stored.hash, name
        stored.refresh_from_db()


@pytest.mark.django_db
def test_system_events_without_a_request_have_empty_context(target) -> None:
    with transaction.atomic():
        first = audit_record(actor=None, verb="system.did", target=target)
        second = audit_record(actor=AnonymousUser(), verb="system.did", target=target)
    for event in (first, second):
        assert (event.actor_id, event.actor_name, event.actor_kind) == (None, "system", ActorKind.SYSTEM)
        assert (event.request_id, event.source_address, event.before, event.after, event.reason) == (
            "", "", None, None, "")


@pytest.mark.django_db
def test_token_authenticated_requests_record_a_token_actor(finance, target) -> None:
    # DRF sets request.auth to the token it authenticated with (None for session and basic auth).
    token = SimpleNamespace(name="siem-reader", key="secret-key-never-recorded")
    request = SimpleNamespace(user=finance, auth=token)
    with transaction.atomic(), audit_context(request_id="r", request=request):
        event = audit_record(actor=finance, verb="x", target=target)
    assert event.actor_kind == ActorKind.TOKEN
    assert event.actor_name == "finance (token siem-reader)"
    assert "secret-key" not in str(AuditEvent.objects.values().get(pk=event.pk))

    session_request = SimpleNamespace(user=finance, auth=None)
    with transaction.atomic(), audit_context(request=session_request):
        assert audit_record(actor=finance, verb="x", target=target).actor_kind == ActorKind.USER
    with transaction.atomic():
        explicit = audit_record(actor=None, verb="x", target=target, actor_kind="system")
        assert explicit.actor_kind == ActorKind.SYSTEM
        with pytest.raises(ValueError, match="actor_kind"):
            audit_record(actor=None, verb="x", target=target, actor_kind="robot")


@pytest.mark.django_db
def test_hostile_strings_are_stored_as_text(target) -> None:
    target.name = "evil\x00<script>alert(1)</script>"
    with transaction.atomic():
        event = audit_record(actor=None, verb="x", target=target, data={"k\x00": "v\x00"}, reason="r\x00",
                             after={1: "int keys become strings"})
    stored = AuditEvent.objects.get(pk=event.pk)
    assert stored.target_repr == "evil<script>alert(1)</script>"
    assert (stored.data, stored.reason, stored.after) == ({"k": "v"}, "r", {"1": "int keys become strings"})
    assert audit_verify().intact


@pytest.mark.django_db
def test_catalog_services_keep_recording(platform_admin) -> None:
    offering = OfferingFactory(resource_name="nvidia.com/gpu")
    from catalog.services.offerings import offering_update

    offering_update(actor=platform_admin, offering_id=offering.pk, data={"name": "Renamed"})
    event = AuditEvent.objects.get(verb="offering.updated")
    assert event.data["changes"]["name"]["to"] == "Renamed"
    assert (event.actor_kind, event.hash_version) == (ActorKind.USER, 2)
    assert audit_verify().intact
