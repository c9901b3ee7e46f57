from django.apps import AppConfig


class ApiTokensConfig(AppConfig):
    name = "apitokens"
    verbose_name = "API tokens"

    def ready(self) -> None:
        from apitokens import schema  # noqa: F401 - registers the OpenAPI security scheme of TokenAuthentication
