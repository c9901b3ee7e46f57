from django.urls import path

from catalog import manifest_views, views

app_name = "catalog"
urlpatterns = [
    path("", views.OfferingListView.as_view(), name="offering_list"),
    path("compare/", views.OfferingCompareView.as_view(), name="offering_compare"),
    path("generate/", manifest_views.GenerateView.as_view(), name="generate"),
    path("validate/", manifest_views.ValidateView.as_view(), name="validate"),
    path("explain/pod/<int:pk>/", manifest_views.PodExplainView.as_view(), name="pod_explain"),
    path("new/", views.OfferingCreateView.as_view(), name="offering_create"),
    path("selector-check/", views.SelectorCheckView.as_view(), name="selector_check"),
    path("proposals/", views.ProposalListView.as_view(), name="proposals"),
    path("proposals/run/", views.DiscoveryRunView.as_view(), name="discovery_run"),
    path("proposals/<int:pk>/decide/", views.ProposalDecideView.as_view(), name="proposal_decide"),
    path("prices/<int:pk>/delete/", views.PriceDeleteView.as_view(), name="price_delete"),
    path("o/<slug:slug>/", views.OfferingDetailView.as_view(), name="offering_detail"),
    path("o/<slug:slug>/gang/", views.OfferingGangView.as_view(), name="offering_gang"),
    path("o/<slug:slug>/edit/", views.OfferingEditView.as_view(), name="offering_edit"),
    path("o/<slug:slug>/lifecycle/", views.OfferingLifecycleView.as_view(), name="offering_lifecycle"),
    path("o/<slug:slug>/prices/", views.OfferingPriceView.as_view(), name="offering_price"),
]
