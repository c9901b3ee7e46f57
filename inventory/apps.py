from django.apps import AppConfig


class InventoryConfig(AppConfig):
    name = "inventory"

    def ready(self) -> None:
        from inventory import checks, scoping  # noqa: F401 - register the system checks (keys, tenancy scoping)
