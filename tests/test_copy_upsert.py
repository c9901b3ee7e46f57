"""core.db.copy_upsert (COPY into a staging table, one INSERT ... ON CONFLICT) writes exactly what bulk_create's
upsert writes: new rows, updated fields of existing ones, the others kept; JSON, floats, dates and NULLs intact; the
tables' statement triggers fire; a value the database refuses changes nothing."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import DatabaseError, transaction

from core.db import copy_from, copy_upsert
from inventory.models import AllocationInterval
from portal.models import ChargeRollupDirty
from tests.inventory.factories import ClusterFactory

UTC = dt.UTC
FIELDS = ["namespace", "name", "node_name", "quantity", "share", "consumed_capacity", "admin_access", "started_at",
          "ended_at", "updated_at"]
UNIQUE = ["cluster", "holder_kind", "holder_uid", "resource"]


def _rows(cluster, count: int, *, generation: int) -> list[AllocationInterval]:
    start = dt.datetime(2026, 11, 1, tzinfo=UTC)
    return [AllocationInterval(
        cluster=cluster, holder_kind="pod", holder_uid=f"uid-{i}", namespace=f"ns-{i % 3}", name=f"p{i}-{generation}",
        node_name="" if i % 4 else f"node-{i}", resource="nvidia.com/gpu", quantity=1 + i % 3 + generation,
        share=1.0 if i % 2 else 1 / 3, consumed_capacity={"memory": f"{i}Gi", "nested": {"g": generation}} if i % 5
        else {}, admin_access=i % 7 == 0, started_at=start + dt.timedelta(minutes=i),
        ended_at=None if i % 3 else start + dt.timedelta(hours=i, microseconds=generation))
        for i in range(count)]


def _table() -> list[tuple]:
    return sorted(AllocationInterval.objects.values_list(
        "cluster_id", "holder_kind", "holder_uid", "resource", *[f for f in FIELDS if f != "updated_at"]))


@pytest.mark.parametrize("count", [copy_from(AllocationInterval) + 30, 3])  # COPY, and bulk_create below
def test_copy_upsert_writes_what_bulk_create_writes(db, count: int) -> None:
    cluster = ClusterFactory(name="copy")
    expected = {}
    for upsert in ("bulk_create", "copy"):
        AllocationInterval.objects.all().delete()
        first, second = _rows(cluster, count, generation=0), _rows(cluster, count + 10, generation=1)[5:]
        for rows in (first, second):
            if upsert == "copy":
                copy_upsert(AllocationInterval, rows, unique_fields=UNIQUE, update_fields=FIELDS)
            else:
                AllocationInterval.objects.bulk_create(rows, update_conflicts=True, unique_fields=UNIQUE,
                                                       update_fields=FIELDS)
        expected[upsert] = _table()
    assert expected["copy"] == expected["bulk_create"]
    assert len(expected["copy"]) == len({*range(count), *range(5, count + 10)})
    assert AllocationInterval.objects.filter(consumed_capacity__nested__g=1).exists()
    assert AllocationInterval.objects.filter(updated_at__isnull=True).count() == 0  # auto_now, as bulk_create sets it


def test_the_tables_triggers_fire_and_a_refused_value_changes_nothing(db) -> None:
    cluster = ClusterFactory(name="copy")
    ChargeRollupDirty.objects.all().delete()
    copy_upsert(AllocationInterval, _rows(cluster, copy_from(AllocationInterval) + 5, generation=0), unique_fields=UNIQUE,
                update_fields=FIELDS)
    assert set(ChargeRollupDirty.objects.values_list("namespace", flat=True)) == {"ns-0", "ns-1", "ns-2"}
    before = _table()
    bad = _rows(cluster, copy_from(AllocationInterval) + 5, generation=2)
    bad[-1].name = "nul\x00byte"  # PostgreSQL text cannot hold it
    with pytest.raises(DatabaseError), transaction.atomic():  # Django's, as bulk_create raises it
        copy_upsert(AllocationInterval, bad, unique_fields=UNIQUE, update_fields=FIELDS)
    assert _table() == before
    # and the staging table of this session is empty again for the next call
    copy_upsert(AllocationInterval, _rows(cluster, copy_from(AllocationInterval) + 5, generation=3), unique_fields=UNIQUE,
                update_fields=FIELDS)
    assert AllocationInterval.objects.count() == copy_from(AllocationInterval) + 5


def test_a_watch_batchs_few_wide_rows_go_through_copy(db) -> None:
    """The threshold counts values, not rows: a batch's 20 intervals (15 columns) are past the point where
    bulk_create's statement costs more Python than COPY, though far from the 50 rows it once took."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    cluster = ClusterFactory(name="copy")
    assert 3 < copy_from(AllocationInterval) <= 20
    with CaptureQueriesContext(connection) as queries:
        copy_upsert(AllocationInterval, _rows(cluster, 20, generation=0), unique_fields=UNIQUE, update_fields=FIELDS)
    assert any("CREATE TEMP TABLE" in q["sql"] for q in queries.captured_queries)
    assert AllocationInterval.objects.count() == 20
