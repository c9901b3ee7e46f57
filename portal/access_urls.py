from django.urls import path

from portal import access_views

urlpatterns = [
    path("", access_views.AccessView.as_view(), name="access"),
    path("requests/<int:pk>/", access_views.AccessRequestDetailView.as_view(), name="access_request_detail"),
    path("queue/", access_views.AccessQueueView.as_view(), name="access_queue"),
    path("break-glass/", access_views.BreakGlassView.as_view(), name="access_break_glass"),
    path("violations/", access_views.ViolationListView.as_view(), name="violations"),
    path("policy/<str:name>.yaml", access_views.PolicyManifestView.as_view(), name="access_policy_manifest"),
]
