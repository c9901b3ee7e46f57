from django.urls import path

from inventory import views

app_name = "inventory"
urlpatterns = [
    path("clusters/", views.ClusterListView.as_view(), name="cluster_list"),
    path("clusters/<int:pk>/", views.ClusterDetailView.as_view(), name="cluster_detail"),
    path("clusters/<int:pk>/sync-state/", views.ClusterSyncStateView.as_view(), name="cluster_sync_state"),
    path("nodes/", views.NodeListView.as_view(), name="node_list"),
    path("nodes/<int:pk>/", views.NodeDetailView.as_view(), name="node_detail"),
]
