from rest_framework.routers import DefaultRouter

from inventory.api import inventory_views, views

app_name = "inventory-api"
router = DefaultRouter()
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("devices", inventory_views.DeviceViewSet, basename="device")
router.register("pods", inventory_views.AcceleratorPodViewSet, basename="pod")
router.register("resource-slices", inventory_views.ResourceSliceViewSet, basename="resource-slice")
router.register("device-classes", inventory_views.DeviceClassViewSet, basename="device-class")
router.register("resource-claims", inventory_views.ResourceClaimViewSet, basename="resource-claim")
router.register("findings", inventory_views.FindingViewSet, basename="finding")
urlpatterns = router.urls
