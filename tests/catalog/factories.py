"""factory_boy factories for the catalog."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import factory
from django.utils import timezone

from catalog.models import DEFAULT_ISOLATION, Lifecycle, Offering, OfferingPrice, UnitKind


class OfferingFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Offering

    slug = factory.Sequence(lambda n: f"offering-{n}")
    name = factory.LazyAttribute(lambda o: o.slug.replace("-", " ").title())
    unit_kind = UnitKind.WHOLE
    isolation = factory.LazyAttribute(lambda o: DEFAULT_ISOLATION[UnitKind(o.unit_kind)])
    resource_name = ""
    device_class_name = ""
    request_sizes = factory.LazyFunction(lambda: [1])
    lifecycle = Lifecycle.ACTIVE


class OfferingPriceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = OfferingPrice

    offering = factory.SubFactory(OfferingFactory, resource_name="nvidia.com/gpu")
    unit_price = Decimal("2.5000")
    currency = "EUR"
    effective_from = factory.LazyFunction(lambda: timezone.now() - dt.timedelta(days=30))
