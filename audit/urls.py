from django.urls import path

from audit import views

app_name = "audit"
urlpatterns = [
    path("", views.AuditEventListView.as_view(), name="event_list"),
    path("events/<int:pk>/", views.AuditEventDetailView.as_view(), name="event_detail"),
    path("verify/", views.AuditVerifyView.as_view(), name="verify"),
]
