from django.urls import path

from portal.tenancy import views

urlpatterns = [
    path("tenants/", views.TenantListView.as_view(), name="tenant_list"),
    path("tenants/<slug:slug>/", views.TenantDetailView.as_view(), name="tenant_detail"),
]
