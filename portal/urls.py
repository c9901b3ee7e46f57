from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="catalog:offering_list", permanent=False), name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("inventory/", include("inventory.urls")),
    path("catalog/", include("catalog.urls")),
    path("", include("portal.tenant_urls")),
    path("api/v1/", include("portal.api_urls")),
    path("api/v1/catalog/", include("catalog.api.urls")),
    path("api/v1/", include("catalog.api.manifest_urls")),
    path("api/v1/", include("inventory.api.urls")),
    path("audit/", include("audit.urls")),
    path("api/v1/", include("audit.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
