"""Bulk upserts through PostgreSQL's COPY: what `bulk_create(update_conflicts=True)` does, without composing an INSERT
of a thousand rows' placeholders in Python.

Profiling the initial sync of `large` (bench/sync_large.py --profile) showed most of its time in Django's SQL compiler
and psycopg's query conversion building those statements, not in PostgreSQL. Here the rows are streamed into a
per-session staging table with COPY (each value converted by its field, as `bulk_create` does) and written with one
`INSERT ... SELECT ... ON CONFLICT DO UPDATE`. Same rows, same triggers (statement-level ones fire once), same errors:
a value the database refuses fails the whole call, as a refused batch does.

Elsewhere than PostgreSQL (the demo's SQLite) it is `bulk_create`.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import orjson
from django.db import connection, models, transaction

# Values (rows times columns) below which bulk_create's one statement is as cheap as COPY's four. Above, its Python cost
# grows fast (each value bound in the statement's text): 20 Device rows (45 columns) cost 8.5 ms of CPU through
# bulk_create against 2.8 ms through COPY, 5 rows about the same. Watch batches write such rows all the time, under
# the cluster's change lock and the watch worker's interpreter lock.
SMALL_CELLS = 200


def copy_from(model: type[models.Model]) -> int:
    """How many rows of `model` copy_upsert writes through COPY, at least (PostgreSQL)."""
    return -(-SMALL_CELLS // len(_written(model)))


def _written(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    return [f for f in model._meta.concrete_fields if not f.primary_key]


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def copy_upsert(model: type[models.Model], rows: Sequence[models.Model], *, unique_fields: list[str],
                update_fields: list[str]) -> None:
    """Insert `rows`, or update `update_fields` of the rows whose `unique_fields` already exist."""
    if not rows:
        return
    if connection.vendor != "postgresql" or len(rows) < copy_from(model):
        model._default_manager.bulk_create(rows, batch_size=1000, update_conflicts=True, unique_fields=unique_fields,
                                  update_fields=update_fields)
        return
    meta = model._meta
    fields = _written(model)
    columns = ", ".join(_column(model, f.name) for f in fields)
    table = _quote(meta.db_table)
    # Named by its columns: a long-lived connection never writes into the shape of a table before a migration.
    stage = _quote(f"stage_{meta.db_table}_{zlib.crc32(columns.encode()):08x}")
    conflict = ", ".join(_column(model, name) for name in unique_fields)
    assignments = ", ".join(f"{_column(model, name)} = EXCLUDED.{_column(model, name)}" for name in update_fields)
    with transaction.atomic(), connection.cursor() as cursor:
        # The written columns only: no defaults (the target's id sequence), no constraints (the target checks).
        cursor.execute(f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS "  # noqa: S608 - names only
                       f"SELECT {columns} FROM {table} WITH NO DATA")
        # The driver's errors as Django's (DataError, IntegrityError ...), as cursor.execute raises them: callers that
        # retry a refused batch row by row catch those.
        values = _converters(model)
        with connection.wrap_database_errors, cursor.cursor.copy(f"COPY {stage} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([value(row) for value in values])
        cursor.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {stage} "  # noqa: S608 - names only
                       f"ON CONFLICT ({conflict}) DO UPDATE SET {assignments}")
        cursor.execute(f"TRUNCATE {stage}")  # the next call in this transaction starts empty


def column_name(model: type[models.Model], name: str) -> str:
    """The database column of the concrete field `name` (a TypeError for a reverse relation: a caller's mistake)."""
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or not field.column:
        raise TypeError(f"{name} is not a concrete column of {model.__name__}")
    return str(field.column)


def _column(model: type[models.Model], name: str) -> str:
    return _quote(column_name(model, name))


def _value(field: models.Field[Any, Any], row: models.Model) -> Any:
    return field.get_db_prep_save(field.pre_save(row, True), connection)


# What COPY is given for each written field of a row: `_value`, what `bulk_create` sends, without walking Django's
# pre_save / get_db_prep_save / get_db_prep_value chain where a field's class keeps the base behaviour of the first two
# (then the chain is get_prep_value of the attribute, with an integer's or a datetime's adapter for the third), and
# JSON written by orjson where it writes exactly what json.dumps would. A profile of the watch worker put 13 % of its
# time in that chain and json.dumps (docs/deploy.md, "Watch lag"); tests/inventory/test_copy_values.py holds the
# shortcuts to Django's values.
_JSON_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


@cache
def _converters(model: type[models.Model]) -> list[Callable[[models.Model], Any]]:
    return [_converter(field) for field in _written(model)]


_BASE_PRE_SAVE = {models.Field.pre_save, models.DateField.pre_save, models.DateTimeField.pre_save}


def _converter(field: models.Field[Any, Any]) -> Callable[[models.Model], Any]:
    kind = type(field)
    attname = field.attname
    # pre_save is the attribute: Field's, or a date field's when it is not set to the time of the write.
    plain_pre_save = kind.pre_save in _BASE_PRE_SAVE and not getattr(field, "auto_now", False) and not getattr(
        field, "auto_now_add", False)
    prep = field.get_prep_value
    if plain_pre_save and kind.get_db_prep_save is models.Field.get_db_prep_save:
        prep_value = kind.get_db_prep_value
        ops = connection.ops  # copy_upsert writes through the default connection; these adapters keep no state
        if prep_value is models.Field.get_db_prep_value:
            return lambda row: _prepared(prep, getattr(row, attname))
        if prep_value is models.IntegerField.get_db_prep_value:
            adapt_int, internal = ops.adapt_integerfield_value, field.get_internal_type()

            def integer(row: models.Model) -> Any:
                value = getattr(row, attname)
                return value if hasattr(value, "as_sql") else adapt_int(prep(value), internal)
            return integer
        if prep_value is models.DateTimeField.get_db_prep_value:
            adapt_datetime = ops.adapt_datetimefield_value

            def datetime(row: models.Model) -> Any:
                value = getattr(row, attname)
                return value if hasattr(value, "as_sql") else adapt_datetime(prep(value))
            return datetime
    if isinstance(field, models.JSONField) and field.encoder is None and kind.pre_save is models.Field.pre_save:
        return lambda row: _json(field, row, getattr(row, attname))
    return lambda row: _value(field, row)


def _prepared(prep: Callable[[Any], Any], value: Any) -> Any:
    return value if hasattr(value, "as_sql") else prep(value)


def _json(field: models.JSONField, row: models.Model, value: Any) -> Any:
    """JSON text for a JSONField, as json.dumps writes it; what orjson would write differently (a subclass of str, int,
    dict or list, a datetime, a dataclass, an integer beyond 64 bits, a float that is not finite, a non-str key) takes
    Django's own path, errors included."""
    if value is None or hasattr(value, "as_sql") or hasattr(value, "resolve_expression"):
        return _value(field, row)
    try:
        text = orjson.dumps(value, option=_JSON_STRICT)
    except orjson.JSONEncodeError:
        return _value(field, row)
    if b"null" in text and _has_non_finite(value):
        return _value(field, row)
    return text.decode()


def _has_non_finite(value: Any) -> bool:
    """A float json.dumps writes as NaN or Infinity (PostgreSQL refuses them), where orjson writes null."""
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_non_finite(v) for v in value)
    return False


def analyze(*models_: type[models.Model]) -> None:
    """Refresh the planner's statistics of these tables (PostgreSQL; a no-op elsewhere), as PostgreSQL advises after a
    bulk load. Until autovacuum's next pass (never, where it is off) the planner otherwise plans the first minutes of
    watch batches on a freshly listed cluster for empty tables: it scanned every device of the cluster for one pool's.
    ANALYZE reads a sample, takes no lock that blocks readers or writers, and may run inside a transaction. A role
    that does not own the tables (the application role of docs/deploy.md) gets a warning from PostgreSQL and nothing
    is analyzed: autovacuum, on by default, does it there a minute later."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for model in models_:
            cursor.execute(f"ANALYZE {_quote(model._meta.db_table)}")
