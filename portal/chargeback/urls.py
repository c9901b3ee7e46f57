from django.urls import path

from portal.chargeback import views

urlpatterns = [
    path("", views.ChargebackView.as_view(), name="chargeback"),
]
