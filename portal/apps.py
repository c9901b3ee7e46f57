from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Accelerator Portal"

    def ready(self) -> None:
        from django.contrib import admin

        from portal.security import admin_has_permission

        admin.site.has_permission = admin_has_permission  # the admin is for platform admins only
