from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Accelerator Portal"

    def ready(self) -> None:
        from django.contrib import admin

        from portal.security import admin_has_permission, throttle_login_posts

        admin.site.has_permission = admin_has_permission  # the admin is for platform admins only
        # /admin/login/ takes passwords too: the same throttle as /login/ (portal/security.py).
        admin.site.login = throttle_login_posts(admin.site.login)  # type: ignore[method-assign]
