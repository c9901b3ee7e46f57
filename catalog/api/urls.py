from django.urls import path
from rest_framework.routers import DefaultRouter

from catalog.api import views

app_name = "catalog-api"
router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("offerings", views.OfferingViewSet, basename="offering")
urlpatterns = [
    *router.urls,
    path("compatibility/", views.CompatibilityView.as_view(), name="compatibility"),
    path("selector-check/", views.SelectorCheckView.as_view(), name="selector-check"),
]
