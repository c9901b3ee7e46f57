"""The portal's pages (namespace `portal`): each domain package brings its own urls module."""

from django.urls import include, path

app_name = "portal"
urlpatterns = [
    path("", include("portal.tenancy.urls")),
    path("quota/", include("portal.quota.urls")),
    path("quota/", include("portal.notifications.urls")),  # the inbox (/quota/inbox/)
    path("access/", include("portal.access.urls")),
    path("access/", include("portal.enforcement.urls")),  # violations, policy manifests (/access/...)
    path("chargeback/", include("portal.chargeback.urls")),
    path("utilization/", include("portal.telemetry.urls")),
]
