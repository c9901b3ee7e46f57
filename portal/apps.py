from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Accelerator Portal"

    def ready(self) -> None:
        from django.contrib import admin

        from inventory.scoping import register_tenancy
        from portal import checks  # noqa: F401 - registers the system checks
        from portal.security import admin_has_permission, throttle_login_posts
        from portal.tenancy.selectors import namespace_scope, user_namespaces

        admin.site.has_permission = admin_has_permission  # the admin is for platform admins only
        # /admin/login/ takes passwords too: the same throttle as /login/ (portal/security.py).
        admin.site.login = throttle_login_posts(admin.site.login)  # type: ignore[method-assign]
        # Inventory and catalog scope namespaced rows and manifest targets through the tenancy (fails closed without).
        register_tenancy(scope=namespace_scope, targets=user_namespaces)
