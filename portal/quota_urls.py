from django.urls import path

from portal import quota_views

urlpatterns = [
    path("", quota_views.QuotaView.as_view(), name="quota"),
    path("requests/<int:pk>/", quota_views.QuotaRequestDetailView.as_view(), name="quota_request_detail"),
    path("queue/", quota_views.ApprovalQueueView.as_view(), name="quota_queue"),
    path("oversubscription/", quota_views.OversubscriptionView.as_view(), name="oversubscription"),
]
