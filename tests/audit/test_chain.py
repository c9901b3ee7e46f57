"""The audit log: written only inside the change's transaction, append-only in PostgreSQL, hash-chained."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AuditCheckpoint, AuditEvent
from audit.services import audit_record, audit_verify
from tests.audit.conftest import record, tampering
from tests.catalog.factories import OfferingFactory

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)
def test_record_outside_a_transaction_is_refused(platform_admin) -> None:
    offering = OfferingFactory(resource_name="nvidia.com/gpu")
    with pytest.raises(RuntimeError, match="inside the transaction"):
        audit_record(actor=platform_admin, verb="x", target=offering)
    assert not AuditEvent.objects.exists()


def test_chain_verifies_and_detects_tampering(platform_admin) -> None:
    offering = OfferingFactory(resource_name="nvidia.com/gpu")
    with transaction.atomic():
        for n in range(3):
            audit_record(actor=platform_admin, verb=f"test.{n}", target=offering, data={"n": n})
    report = audit_verify()
    assert report.intact
    assert report.checked == 3
    events = list(AuditEvent.objects.order_by("id"))
    assert events[1].prev_hash == events[0].hash
    # Tamper behind the application's back (the trigger must be bypassed to do so).
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE audit_auditevent DISABLE TRIGGER audit_event_no_update")
        cursor.execute("UPDATE audit_auditevent SET data = '{\"n\": 99}' WHERE id = %s", [events[1].id])
        cursor.execute("ALTER TABLE audit_auditevent ENABLE TRIGGER audit_event_no_update")
    report = audit_verify()
    assert not report.intact
    assert report.first_bad_id == events[1].id


@pytest.mark.parametrize("statement", [
    "UPDATE audit_auditevent SET verb = 'forged'",
    "UPDATE audit_auditevent SET reason = 'forged'",
    "UPDATE audit_auditevent SET hash_version = 1",
    "DELETE FROM audit_auditevent",
])
def test_database_refuses_update_and_delete(platform_admin, statement) -> None:
    offering = OfferingFactory(resource_name="nvidia.com/gpu")
    with transaction.atomic():
        audit_record(actor=platform_admin, verb="test", target=offering)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)
    assert AuditEvent.objects.get().verb == "test"


def test_truncate_is_refused_without_the_test_only_setting(platform_admin) -> None:
    offering = OfferingFactory(resource_name="nvidia.com/gpu")
    with transaction.atomic():
        audit_record(actor=platform_admin, verb="test", target=offering)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL audit.allow_truncate = 'off'")
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            cursor.execute("TRUNCATE audit_auditevent")
    assert AuditEvent.objects.count() == 1


def test_the_test_database_may_truncate_with_the_test_only_setting(platform_admin) -> None:
    """The escape hatch the test runner's flush relies on: in a database named test_* (this one), a session with
    audit.allow_truncate=on may TRUNCATE. Elsewhere it may not (tests/audit/test_database_roles.py)."""
    offering = OfferingFactory(resource_name="nvidia.com/gpu")
    with transaction.atomic():
        audit_record(actor=platform_admin, verb="test", target=offering)
    assert connection.settings_dict["NAME"].startswith("test_")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL audit.allow_truncate = 'on'")
        cursor.execute("TRUNCATE audit_auditevent")
        assert not AuditEvent.objects.exists()
        transaction.set_rollback(True)
    assert AuditEvent.objects.count() == 1


def _checkpoint() -> AuditCheckpoint:
    from audit.checkpoints import checkpoint_create

    return checkpoint_create()


@pytest.mark.parametrize("statement", [
    "UPDATE audit_auditcheckpoint SET last_hash = repeat('0', 64)",
    "UPDATE audit_auditcheckpoint SET signature = 'forged'",
    "DELETE FROM audit_auditcheckpoint",
])
def test_database_refuses_update_and_delete_of_checkpoints(checkpoint_key, statement) -> None:
    record(2)
    checkpoint = _checkpoint()
    with pytest.raises(DatabaseError, match="audit_auditcheckpoint is append-only"), transaction.atomic(), \
            connection.cursor() as cursor:
        cursor.execute(statement)
    assert AuditCheckpoint.objects.get().signature == checkpoint.signature


def test_checkpoint_truncate_is_refused_without_the_test_only_setting(checkpoint_key) -> None:
    _checkpoint()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL audit.allow_truncate = 'off'")
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            cursor.execute("TRUNCATE audit_auditcheckpoint")
    assert AuditCheckpoint.objects.count() == 1


def test_tampering_helper_restores_the_trigger() -> None:
    record(1)
    with tampering() as cursor:
        cursor.execute("UPDATE audit_auditevent SET reason = 'x'")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditevent SET reason = 'y'")
