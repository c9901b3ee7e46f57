from django.urls import path

from catalog.api import manifest_views

app_name = "manifests-api"
urlpatterns = [
    path("manifests/validate/", manifest_views.ManifestValidateView.as_view(), name="validate"),
    path("manifests/generate/", manifest_views.ManifestGenerateView.as_view(), name="generate"),
    path("feasibility/", manifest_views.FeasibilityView.as_view(), name="feasibility"),
    path("feasibility/gang/", manifest_views.GangFeasibilityView.as_view(), name="feasibility-gang"),
]
