"""The test settings' database backend: Django's PostgreSQL backend with a cheaper flush.

After every transactional test (`transactional_db`, `live_server`) Django empties the database with one TRUNCATE of
all ~120 tables, and PostgreSQL pays for each (a new file per table and index) whether it holds rows or not: about
half a second per test here. This flush truncates only the tables that hold rows (CASCADE, as Django's own does for
tables others reference), in one statement inside one DO block, so the database ends exactly as empty. When
sequences must be reset it is Django's full TRUNCATE ... RESTART IDENTITY, unchanged."""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql import base

# Table names arrive as a text[] of quoted literals; the DO block quotes each as an identifier (%I, quote_ident).
FLUSH = """DO $flush$
DECLARE
    name text;
    holding text[] := '{}';
    has_rows boolean;
BEGIN
    FOREACH name IN ARRAY ARRAY[%NAMES%]::text[] LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I)', name) INTO has_rows;
        IF has_rows THEN
            holding := holding || quote_ident(name);
        END IF;
    END LOOP;
    IF cardinality(holding) > 0 THEN
        EXECUTE 'TRUNCATE ' || array_to_string(holding, ', ') || ' CASCADE';
    END IF;
END
$flush$;"""


class DatabaseOperations(base.DatabaseOperations):
    def sql_flush(self, style: Any, tables: Any, *, reset_sequences: bool = False,
                  allow_cascade: bool = False) -> list[str]:
        if not tables or reset_sequences:
            return super().sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        names = ", ".join("'" + str(table).replace("'", "''") + "'" for table in tables)
        return [FLUSH.replace("%NAMES%", names)]


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
