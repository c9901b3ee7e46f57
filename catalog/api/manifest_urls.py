from django.urls import path

from catalog.api.views import manifests

app_name = "manifests-api"
urlpatterns = [
    path("manifests/validate/", manifests.ManifestValidateView.as_view(), name="validate"),
    path("manifests/generate/", manifests.ManifestGenerateView.as_view(), name="generate"),
    path("feasibility/", manifests.FeasibilityView.as_view(), name="feasibility"),
    path("feasibility/gang/", manifests.GangFeasibilityView.as_view(), name="feasibility-gang"),
]
