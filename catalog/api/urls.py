from django.urls import path
from rest_framework.routers import DefaultRouter

from catalog.api.views import offerings

app_name = "catalog-api"
router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("offerings", offerings.OfferingViewSet, basename="offering")
urlpatterns = [
    *router.urls,
    path("compatibility/", offerings.CompatibilityView.as_view(), name="compatibility"),
    path("selector-check/", offerings.SelectorCheckView.as_view(), name="selector-check"),
]
