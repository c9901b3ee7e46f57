from django.urls import path

from portal.enforcement import views

urlpatterns = [
    path("violations/", views.ViolationListView.as_view(), name="violations"),
    path("policy/<str:name>.yaml", views.PolicyManifestView.as_view(), name="access_policy_manifest"),
]
