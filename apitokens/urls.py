from django.urls import path

from apitokens import views

app_name = "apitokens"
urlpatterns = [
    path("", views.ApiTokenListView.as_view(), name="token_list"),
    path("<int:pk>/revoke/", views.ApiTokenRevokeView.as_view(), name="token_revoke"),
]
