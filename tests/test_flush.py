"""The test backend's flush (tests/postgresql) leaves every table as empty as Django's full TRUNCATE does, though it
truncates only the tables holding rows."""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection, transaction

from audit.services import audit_record
from inventory.models import Cluster


def _counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        counts = {}
        for table in connection.introspection.django_table_names(only_existing=True, include_views=False):
            cursor.execute(f"SELECT count(*) FROM {connection.ops.quote_name(table)}")  # noqa: S608 - Django's table names
            counts[table] = cursor.fetchone()[0]
    return counts


def test_the_backend_is_the_tests_own() -> None:
    assert connection.ops.__class__.__module__ == "tests.postgresql.base"


@pytest.mark.django_db(transaction=True)
def test_flush_empties_every_table_that_held_rows_including_referenced_and_audit_ones() -> None:
    user = User.objects.create_user("flushed")
    cluster = Cluster.objects.create(name="c1", kubeconfig="clusters: []")  # referenced by empty tables too
    with transaction.atomic():
        audit_record(actor=user, verb="test.flush", target=cluster, data={})
    held = {table for table, count in _counts().items() if count}
    assert {User._meta.db_table, Cluster._meta.db_table, "audit_auditevent"} <= held

    sql = connection.ops.sql_flush(None, sorted(held), allow_cascade=True)
    assert len(sql) == 1
    assert "DO $flush$" in sql[0]
    # as TransactionTestCase calls it after each test
    call_command("flush", interactive=False, inhibit_post_migrate=True, allow_cascade=True, reset_sequences=False,
                 verbosity=0)

    assert {table: count for table, count in _counts().items() if count} == {}
    assert apps.get_model("inventory", "Cluster").objects.count() == 0
