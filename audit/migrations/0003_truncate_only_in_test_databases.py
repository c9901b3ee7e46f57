"""The TRUNCATE escape hatch of the append-only tables opens only in test databases.

0001 and 0002 let any session that sets `audit.allow_truncate=on` truncate the audit tables, and any session may set
a custom option. From here the option is honoured only in a database whose name starts with `test_`: the names
Django's test runner gives the databases it creates (pytest-django and xdist append suffixes, never another prefix).
Renaming a database needs its owner or a superuser, who can disable the triggers anyway, so the application's role
gains nothing from knowing the rule; `check --deploy` warns when the configured database itself is named `test_…`
(audit.W003). UPDATE and DELETE stay refused everywhere, test databases included.
"""

from django.db import migrations

TEST_ONLY = """
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
  -- Test databases (named test_*) are emptied between tests with TRUNCATE when the connection sets
  -- audit.allow_truncate=on (portal/settings/test.py). Anywhere else the option does nothing.
  IF TG_OP = 'TRUNCATE' AND starts_with(current_database(), 'test_')
     AND current_setting('audit.allow_truncate', true) = 'on' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'audit_auditevent is append-only (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger AS $$
BEGIN
  -- Same rule as audit_event_append_only.
  IF TG_OP = 'TRUNCATE' AND starts_with(current_database(), 'test_')
     AND current_setting('audit.allow_truncate', true) = 'on' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION '% is append-only (% refused)', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""

# The functions as 0001 and 0002 left them (any session could open the hatch), for migrating backwards.
ANY_DATABASE = """
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' AND current_setting('audit.allow_truncate', true) = 'on' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'audit_auditevent is append-only (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'TRUNCATE' AND current_setting('audit.allow_truncate', true) = 'on' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION '% is append-only (% refused)', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
"""


def test_databases_only(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TEST_ONLY, params=None)


def any_database(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ANY_DATABASE, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_event_context_and_checkpoints")]

    operations = [migrations.RunPython(test_databases_only, any_database)]
