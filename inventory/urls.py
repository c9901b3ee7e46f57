from django.urls import path

from inventory import inventory_views, views

app_name = "inventory"
urlpatterns = [
    path("accelerators/", inventory_views.OverviewView.as_view(), name="overview"),
    path("capacity/", inventory_views.CapacityView.as_view(), name="capacity"),
    path("devices/<int:pk>/", inventory_views.DeviceDetailView.as_view(), name="device_detail"),
    path("pending-pods/", inventory_views.PendingPodsView.as_view(), name="pending_pods"),
    path("findings/", inventory_views.FindingListView.as_view(), name="findings"),
    path("clusters/", views.ClusterListView.as_view(), name="cluster_list"),
    path("clusters/<int:pk>/", views.ClusterDetailView.as_view(), name="cluster_detail"),
    path("clusters/<int:pk>/sync-state/", views.ClusterSyncStateView.as_view(), name="cluster_sync_state"),
    path("nodes/", views.NodeListView.as_view(), name="node_list"),
    path("nodes/<int:pk>/", views.NodeDetailView.as_view(), name="node_detail"),
    path("nodes/<int:pk>/devices/", inventory_views.NodeDevicesView.as_view(), name="node_devices"),
]
