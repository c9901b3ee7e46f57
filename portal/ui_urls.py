"""The portal's pages (namespace `portal`): each domain package brings its own urls module."""

from django.urls import include, path

from portal import telemetry_views

app_name = "portal"
urlpatterns = [
    path("", include("portal.tenancy.urls")),
    path("quota/", include("portal.quota.urls")),
    path("quota/", include("portal.notifications.urls")),  # the inbox (/quota/inbox/)
    path("access/", include("portal.access.urls")),
    path("access/", include("portal.enforcement.urls")),  # violations, policy manifests (/access/...)
    path("chargeback/", include("portal.chargeback.urls")),
    path("utilization/", telemetry_views.MyGpusView.as_view(), name="utilization"),
    path("utilization/devices/<int:pk>/", telemetry_views.DeviceUtilizationPage.as_view(),
         name="device_utilization"),
    path("utilization/offerings/<slug:slug>/", telemetry_views.OfferingUtilizationPage.as_view(),
         name="offering_utilization"),
]
