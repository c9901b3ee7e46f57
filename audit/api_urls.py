from rest_framework.routers import DefaultRouter

from audit.api import views

app_name = "audit-api"
router = DefaultRouter()
router.include_root_view = False
router.register("audit-events", views.AuditEventViewSet, basename="audit-event")
urlpatterns = router.urls
