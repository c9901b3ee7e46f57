from rest_framework.routers import DefaultRouter

from inventory.api import views

app_name = "inventory-api"
router = DefaultRouter()
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("nodes", views.NodeViewSet, basename="node")
urlpatterns = router.urls
