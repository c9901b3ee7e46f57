"""Richer events (actor kind, before/after, reason, request id, source address) under hash format version 2, and
append-only signed checkpoints.

Existing rows are not rewritten: the new columns are added with defaults by ALTER TABLE (no row UPDATE, so the
append-only trigger is not involved) and existing rows get hash_version 1, whose hash covers the original columns
only, so they keep verifying. New rows are written as version 2 by audit_record.
"""

from django.db import migrations, models

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger AS $$
BEGIN
  -- Same rule as audit_event_append_only (0001): TRUNCATE only where the connection sets the test-only option.
  IF TG_OP = 'TRUNCATE' AND current_setting('audit.allow_truncate', true) = 'on' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION '% is append-only (% refused)', TG_TABLE_NAME, TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_checkpoint_no_update BEFORE UPDATE OR DELETE ON audit_auditcheckpoint
  FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_checkpoint_no_truncate BEFORE TRUNCATE ON audit_auditcheckpoint
  FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
"""


def append_only(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ONLY, params=None)


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="auditevent",
            name="actor_kind",
            field=models.CharField(blank=True, choices=[("user", "User"), ("token", "API token"), ("system", "System")], default="", max_length=10),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="before",
            field=models.JSONField(blank=True, help_text="State before the change (null: not recorded).", null=True),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="after",
            field=models.JSONField(blank=True, help_text="State after the change (null: not recorded).", null=True),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="reason",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="request_id",
            field=models.CharField(blank=True, db_index=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="auditevent",
            name="source_address",
            field=models.CharField(blank=True, default="", help_text="Client IP address.", max_length=45),
        ),
        # Existing rows: version 1. Then the model default becomes 2 (Django keeps no column default, so this
        # second step changes nothing in the database).
        migrations.AddField(
            model_name="auditevent",
            name="hash_version",
            field=models.PositiveSmallIntegerField(default=1),
        ),
        migrations.AlterField(
            model_name="auditevent",
            name="hash_version",
            field=models.PositiveSmallIntegerField(default=2),
        ),
        migrations.CreateModel(
            name="AuditCheckpoint",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("created_at", models.DateTimeField()),
                ("last_event_id", models.BigIntegerField(blank=True, help_text="Null: the chain was empty.", null=True)),
                ("last_hash", models.CharField(max_length=64)),
                ("event_count", models.BigIntegerField()),
                ("signature", models.CharField(max_length=64)),
            ],
            options={"ordering": ["-id"]},
        ),
        migrations.RunPython(append_only, migrations.RunPython.noop),
    ]
