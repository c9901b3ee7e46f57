from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"

    def ready(self) -> None:
        from inventory import scoping  # noqa: F401 - registers the system check that tenancy scoping is installed
