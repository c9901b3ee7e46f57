from django.urls import path
from rest_framework.routers import DefaultRouter

from portal.access.api import AccessRequestViewSet, GrantViewSet
from portal.chargeback.api import ChargebackView, FocusExportView
from portal.enforcement.api import ViolationViewSet
from portal.quota.api import QuotaNamespaceStateViewSet, QuotaRequestViewSet, QuotaViewSet
from portal.telemetry.api import DeviceUtilizationView, UtilizationView
from portal.tenancy.api import TenantViewSet

app_name = "portal-api"
router = DefaultRouter()
router.include_root_view = False
router.register("tenants", TenantViewSet, basename="tenant")
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("quota-states", QuotaNamespaceStateViewSet, basename="quota-state")
router.register("access-requests", AccessRequestViewSet, basename="access-request")
router.register("grants", GrantViewSet, basename="grant")
router.register("violations", ViolationViewSet, basename="violation")
urlpatterns = [
    path("chargeback/", ChargebackView.as_view(), name="chargeback"),
    path("chargeback/focus/", FocusExportView.as_view(), name="chargeback-focus"),
    path("utilization/", UtilizationView.as_view(), name="utilization"),
    path("devices/<int:pk>/utilization/", DeviceUtilizationView.as_view(), name="utilization-device"),
    *router.urls,
]
