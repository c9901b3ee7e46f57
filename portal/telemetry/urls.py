from django.urls import path

from portal.telemetry import views

urlpatterns = [
    path("", views.MyGpusView.as_view(), name="utilization"),
    path("devices/<int:pk>/", views.DeviceUtilizationPage.as_view(), name="device_utilization"),
    path("offerings/<slug:slug>/", views.OfferingUtilizationPage.as_view(), name="offering_utilization"),
]
