from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in
        from django.db.models.signals import post_migrate

        from audit import checks  # noqa: F401 - registers the system checks
        from audit.database import run_after_migrate
        from audit.signals import remember_reader_on_login

        user_logged_in.connect(remember_reader_on_login, dispatch_uid="audit.remember_reader_on_login")
        # After every migrate (all apps' migrations have run by then): the application role's privileges.
        post_migrate.connect(run_after_migrate, sender=self, dispatch_uid="audit.grant_app_role")
