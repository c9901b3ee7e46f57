from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "catalog"
    verbose_name = "Catalog"

    def ready(self) -> None:
        from inventory.signals import devices_changed

        devices_changed.connect(_on_devices_changed, dispatch_uid="catalog.capacity_refresh_soon")


def _on_devices_changed(sender: object, cluster_id: int, **kwargs: object) -> None:
    from catalog.tasks import capacity_refresh_soon

    capacity_refresh_soon(cluster_id)
