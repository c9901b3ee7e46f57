from rest_framework.routers import DefaultRouter

from integrations.api import views

app_name = "integrations-api"
router = DefaultRouter()
router.include_root_view = False
router.register("webhooks", views.WebhookSubscriptionViewSet, basename="webhook")
urlpatterns = router.urls
