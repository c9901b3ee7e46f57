from django.urls import path

from portal.quota import views

urlpatterns = [
    path("", views.QuotaView.as_view(), name="quota"),
    path("requests/<int:pk>/", views.QuotaRequestDetailView.as_view(), name="quota_request_detail"),
    path("queue/", views.ApprovalQueueView.as_view(), name="quota_queue"),
    path("oversubscription/", views.OversubscriptionView.as_view(), name="oversubscription"),
]
