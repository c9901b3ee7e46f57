from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from portal import observability, views
from portal.security import ThrottledLoginView


class SchemaView(SpectacularAPIView):
    token_scope = "*"  # noqa: S105 - any valid API token may read the schema (docs/tokens.md)


class SwaggerView(SpectacularSwaggerSplitView):
    """Swagger UI whose initialisation script is a separate URL, so the page needs no inline script (CSP)."""

    token_scope = "*"  # noqa: S105
    template_name = "portal/api_docs.html"  # inside the portal's page: header, navigation and a way back


handler404 = "portal.views.not_found"  # JSON under /api/

urlpatterns = [
    path("metrics", observability.metrics_view, name="metrics"),
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon),
    path("login/", ThrottledLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("inventory/", include("inventory.urls")),
    path("catalog/", include("catalog.urls")),
    path("", include("portal.ui_urls")),
    path("api/v1/", include("portal.api_urls")),
    path("api/v1/catalog/", include("catalog.api.urls")),
    path("api/v1/", include("catalog.api.manifest_urls")),
    path("api/v1/", include("inventory.api.urls")),
    path("audit/", include("audit.urls")),
    path("account/tokens/", include("apitokens.urls")),
    path("api/v1/", include("audit.api_urls")),
    path("api/v1/", include("integrations.api.urls")),
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    path("api/docs/", SwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
