from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from audit.signals import remember_reader_on_login

        user_logged_in.connect(remember_reader_on_login, dispatch_uid="audit.remember_reader_on_login")
