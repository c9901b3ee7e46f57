from rest_framework.routers import DefaultRouter

from portal.api import TenantViewSet
from portal.quota_api import QuotaRequestViewSet, QuotaViewSet

app_name = "portal-api"
router = DefaultRouter()
router.include_root_view = False
router.register("tenants", TenantViewSet, basename="tenant")
router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")
router.register("quotas", QuotaViewSet, basename="quota")
urlpatterns = router.urls
