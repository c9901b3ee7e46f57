"""Device.selector_hash: the digest of what a CEL selector reads, so the catalog's capacity recomputation evaluates
selectors only for devices whose attributes changed. Existing rows are filled here (the derivation writes it from
now on; a row it does not rewrite would otherwise keep an empty digest and be evaluated on every recomputation)."""

from django.db import migrations, models

BATCH = 2000


def fill(apps, schema_editor):
    from types import SimpleNamespace

    from inventory.representations import device_selector_hash  # the derivation's own digest, so the two agree

    device_model = apps.get_model("inventory", "Device")
    rows = device_model.objects.order_by("pk").values_list(
        "pk", "driver", "allow_multiple_allocations", "attributes", "capacities")
    table = schema_editor.quote_name(device_model._meta.db_table)
    batch = []
    with schema_editor.connection.cursor() as cursor:
        for pk, driver, multiple, attributes, capacities in rows.iterator(chunk_size=BATCH):
            device = SimpleNamespace(driver=driver, allow_multiple_allocations=multiple, attributes=attributes,
                                     capacities=capacities)
            batch.append((device_selector_hash(device), pk))
            if len(batch) >= BATCH:
                cursor.executemany(f"UPDATE {table} SET selector_hash = %s WHERE id = %s", batch)
                batch = []
        if batch:
            cursor.executemany(f"UPDATE {table} SET selector_hash = %s WHERE id = %s", batch)


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0018_device_overview_index'),
    ]

    operations = [
        migrations.AddField(
            model_name='device',
            name='selector_hash',
            field=models.CharField(blank=True, editable=False, max_length=32),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
    ]
