from django.urls import path

from portal.access import views

urlpatterns = [
    path("", views.AccessView.as_view(), name="access"),
    path("requests/<int:pk>/", views.AccessRequestDetailView.as_view(), name="access_request_detail"),
    path("queue/", views.AccessQueueView.as_view(), name="access_queue"),
    path("break-glass/", views.BreakGlassView.as_view(), name="access_break_glass"),
]
