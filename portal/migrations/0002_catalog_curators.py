from django.db import migrations


def grant(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    ContentType = apps.get_model("contenttypes", "ContentType")
    content_type, _ = ContentType.objects.get_or_create(app_label="catalog", model="offering")
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename="curate_offering",
        defaults={"name": "Curate the catalog (offerings, prices, lifecycle, discovery)"},
    )
    group, _ = Group.objects.get_or_create(name="platform-admin")
    group.permissions.add(permission)


class Migration(migrations.Migration):
    dependencies = [("portal", "0001_roles"), ("catalog", "0001_initial"), ("contenttypes", "0002_remove_content_type_name")]
    operations = [migrations.RunPython(grant, migrations.RunPython.noop)]
