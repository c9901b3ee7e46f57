from django.urls import path

from portal.notifications import views

urlpatterns = [
    path("inbox/", views.InboxView.as_view(), name="inbox"),
    path("inbox/unread/", views.InboxUnreadView.as_view(), name="inbox_unread"),
]
