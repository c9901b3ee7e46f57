from django.urls import path

from catalog.views import manifests, offerings

app_name = "catalog"
urlpatterns = [
    path("", offerings.OfferingListView.as_view(), name="offering_list"),
    path("compare/", offerings.OfferingCompareView.as_view(), name="offering_compare"),
    path("generate/", manifests.GenerateView.as_view(), name="generate"),
    path("validate/", manifests.ValidateView.as_view(), name="validate"),
    path("explain/pod/<int:pk>/", manifests.PodExplainView.as_view(), name="pod_explain"),
    path("new/", offerings.OfferingCreateView.as_view(), name="offering_create"),
    path("selector-check/", offerings.SelectorCheckView.as_view(), name="selector_check"),
    path("proposals/", offerings.ProposalListView.as_view(), name="proposals"),
    path("proposals/run/", offerings.DiscoveryRunView.as_view(), name="discovery_run"),
    path("proposals/<int:pk>/decide/", offerings.ProposalDecideView.as_view(), name="proposal_decide"),
    path("prices/<int:pk>/delete/", offerings.PriceDeleteView.as_view(), name="price_delete"),
    path("o/<slug:slug>/", offerings.OfferingDetailView.as_view(), name="offering_detail"),
    path("o/<slug:slug>/gang/", offerings.OfferingGangView.as_view(), name="offering_gang"),
    path("o/<slug:slug>/edit/", offerings.OfferingEditView.as_view(), name="offering_edit"),
    path("o/<slug:slug>/lifecycle/", offerings.OfferingLifecycleView.as_view(), name="offering_lifecycle"),
    path("o/<slug:slug>/prices/", offerings.OfferingPriceView.as_view(), name="offering_price"),
]
