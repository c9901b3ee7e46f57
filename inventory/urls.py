from django.urls import path

from inventory.views import accelerators, clusters

app_name = "inventory"
urlpatterns = [
    path("accelerators/", accelerators.OverviewView.as_view(), name="overview"),
    path("capacity/", accelerators.CapacityView.as_view(), name="capacity"),
    path("devices/<int:pk>/", accelerators.DeviceDetailView.as_view(), name="device_detail"),
    path("pending-pods/", accelerators.PendingPodsView.as_view(), name="pending_pods"),
    path("findings/", accelerators.FindingListView.as_view(), name="findings"),
    path("clusters/", clusters.ClusterListView.as_view(), name="cluster_list"),
    path("clusters/<int:pk>/", clusters.ClusterDetailView.as_view(), name="cluster_detail"),
    path("clusters/<int:pk>/sync-state/", clusters.ClusterSyncStateView.as_view(), name="cluster_sync_state"),
    path("nodes/", clusters.NodeListView.as_view(), name="node_list"),
    path("nodes/<int:pk>/", clusters.NodeDetailView.as_view(), name="node_detail"),
    path("nodes/<int:pk>/devices/", accelerators.NodeDevicesView.as_view(), name="node_devices"),
]
