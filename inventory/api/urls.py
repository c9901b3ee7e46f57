from django.urls import path
from rest_framework import routers

from inventory.api import changes, cmdb
from inventory.api.views import accelerators, clusters


class APIRootView(routers.APIRootView):
    """The list of endpoints at /api/v1/."""

    token_scope = "*"  # noqa: S105 - any valid API token may list the endpoints


app_name = "inventory-api"
router = routers.DefaultRouter()
router.APIRootView = APIRootView
router.register("clusters", clusters.ClusterViewSet, basename="cluster")
router.register("nodes", clusters.NodeViewSet, basename="node")
router.register("devices", accelerators.DeviceViewSet, basename="device")
router.register("pods", accelerators.AcceleratorPodViewSet, basename="pod")
router.register("resource-slices", accelerators.ResourceSliceViewSet, basename="resource-slice")
router.register("device-classes", accelerators.DeviceClassViewSet, basename="device-class")
router.register("resource-claims", accelerators.ResourceClaimViewSet, basename="resource-claim")
router.register("findings", accelerators.FindingViewSet, basename="finding")
urlpatterns = [
    path("cmdb/clusters/", cmdb.CmdbClusterView.as_view(), name="cmdb-clusters"),
    path("cmdb/nodes/", cmdb.CmdbNodeView.as_view(), name="cmdb-nodes"),
    path("cmdb/cards/", cmdb.CmdbCardView.as_view(), name="cmdb-cards"),
    path("cmdb/slices/", cmdb.CmdbSliceView.as_view(), name="cmdb-slices"),
    path("changes/", changes.ChangeFeedView.as_view(), name="change-list"),
    *router.urls,
]
