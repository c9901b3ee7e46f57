import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$
BEGIN
  -- Test databases are emptied between tests with TRUNCATE; only a connection that sets this option (the test
  -- settings do) may do that. Production settings never set it.
  IF TG_OP = 'TRUNCATE' AND current_setting('audit.allow_truncate', true) = 'on' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'audit_auditevent is append-only (% refused)', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_event_no_update BEFORE UPDATE OR DELETE ON audit_auditevent
  FOR EACH ROW EXECUTE FUNCTION audit_event_append_only();
CREATE TRIGGER audit_event_no_truncate BEFORE TRUNCATE ON audit_auditevent
  FOR EACH STATEMENT EXECUTE FUNCTION audit_event_append_only();
"""


def append_only(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(APPEND_ONLY, params=None)


class Migration(migrations.Migration):
    initial = True
    dependencies = [migrations.swappable_dependency(settings.AUTH_USER_MODEL)]

    operations = [
        migrations.CreateModel(
            name="AuditEvent",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("occurred_at", models.DateTimeField(db_index=True)),
                ("actor_name", models.CharField(blank=True, help_text="Username at the time, or 'system'.", max_length=150)),
                ("verb", models.CharField(db_index=True, help_text="e.g. offering.created, price.changed", max_length=100)),
                ("target_type", models.CharField(help_text="app_label.model of the target", max_length=100)),
                ("target_id", models.CharField(max_length=64)),
                ("target_repr", models.CharField(blank=True, max_length=300)),
                ("data", models.JSONField(blank=True, default=dict)),
                ("prev_hash", models.CharField(max_length=64)),
                ("hash", models.CharField(max_length=64, unique=True)),
                ("actor", models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name="+", to=settings.AUTH_USER_MODEL)),
            ],
            options={"ordering": ["-id"], "indexes": [models.Index(fields=["target_type", "target_id"], name="audit_event_target")]},
        ),
        migrations.RunPython(append_only, migrations.RunPython.noop),
    ]
