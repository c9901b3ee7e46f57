"""Offering, price and lifecycle services: validation refuses bad input and changes nothing; every change audits."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from catalog.errors import CatalogError, OfferingValidationError
from catalog.models import Lifecycle, Offering, OfferingPrice
from catalog.services.offerings import (
    offering_create,
    offering_lifecycle_change,
    offering_update,
    offerings_retire_due,
    price_delete,
    price_set,
)
from tests.catalog.factories import OfferingFactory

pytestmark = pytest.mark.django_db

VALID = {
    "slug": "h100-whole", "name": "H100 80GB whole card", "unit_kind": "whole", "resource_name": "nvidia.com/gpu",
    "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "memory_mib": 81559,
    "cuda_min": "11.0", "cuda_max": "12.4", "compute_capability": "9.0", "architecture": "hopper",
}
DRA = {
    "slug": "l40s-dra", "name": "L40S (DRA)", "unit_kind": "dra-device", "device_class_name": "gpu.nvidia.com",
    "cel_selector": 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"',
}


def _errors(exc_info: pytest.ExceptionInfo[OfferingValidationError]) -> dict[str, list[str]]:
    return exc_info.value.errors


def test_create_fills_defaults_by_unit_kind_and_audits(platform_admin) -> None:
    offering = offering_create(actor=platform_admin, data=VALID)
    assert (offering.isolation, offering.request_sizes, offering.lifecycle) == ("exclusive", [1, 2, 4, 8], "active")
    shared = offering_create(actor=platform_admin, data={**VALID, "slug": "t4", "unit_kind": "time-slicing"})
    assert (shared.isolation, shared.request_sizes) == ("none", [1])
    event = AuditEvent.objects.get(verb="offering.created", target_id=str(offering.pk))
    assert event.actor_name == "admin"
    assert event.data["fields"]["resource_name"] == "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"unit_kind": "dra-device", "device_class_name": ""}, "device_class_name"),
        ({"resource_name": ""}, "resource_name"),
        ({"resource_name": "gpu"}, "resource_name"),
        ({"resource_name": "requests.nvidia.com/gpu"}, "resource_name"),
        ({"cel_selector": "device.driver == 'x'"}, "cel_selector"),  # CEL is for DRA offerings
        ({"cuda_min": "12.4", "cuda_max": "11.8"}, "cuda_max"),
        ({"driver_min": "five-fifty"}, "driver_min"),
        ({"compute_capability": "sm_80"}, "compute_capability"),
        ({"node_selector": ["not", "a", "map"]}, "node_selector"),
        ({"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}, "tolerations"),
        ({"tolerations": [{"key": "a", "effect": "Sometimes"}]}, "tolerations"),
        ({"request_sizes": [0, 2]}, "request_sizes"),
        ({"slug": "Not A Slug"}, "slug"),
    ],
)
def test_create_refuses_bad_input_and_writes_nothing(platform_admin, change, field) -> None:
    with pytest.raises(OfferingValidationError) as exc_info:
        offering_create(actor=platform_admin, data={**VALID, **change})
    assert field in _errors(exc_info)
    assert not Offering.objects.exists()
    assert not AuditEvent.objects.exists()


def test_invalid_cel_is_refused_with_its_position(platform_admin) -> None:
    with pytest.raises(OfferingValidationError) as exc_info:
        offering_create(actor=platform_admin, data={**DRA, "cel_selector": "device.driver == "})
    message = _errors(exc_info)["cel_selector"][0]
    assert "line 1, column 18" in message
    assert message.endswith("^")
    assert not Offering.objects.exists()


def test_duplicate_slug_is_a_field_error(platform_admin) -> None:
    offering_create(actor=platform_admin, data=VALID)
    with pytest.raises(OfferingValidationError) as exc_info:
        offering_create(actor=platform_admin, data={**VALID, "name": "Other"})
    assert "slug" in _errors(exc_info)


def test_update_records_the_changes_and_curates_a_proposal(platform_admin) -> None:
    offering = OfferingFactory(slug="p", unit_kind="whole", resource_name="nvidia.com/gpu",
                               lifecycle=Lifecycle.PROPOSED, curated=False, discovery_key="dp:x")
    offering_update(actor=platform_admin, offering_id=offering.pk, data={"memory_mib": 40960, "owner_team": "gpu"})
    offering.refresh_from_db()
    assert offering.curated
    assert offering.memory_mib == 40960
    event = AuditEvent.objects.get(verb="offering.updated")
    assert event.data["changes"]["memory_mib"] == {"from": None, "to": 40960}


def test_update_with_bad_input_changes_nothing(platform_admin) -> None:
    offering = offering_create(actor=platform_admin, data=DRA)
    with pytest.raises(OfferingValidationError):
        offering_update(actor=platform_admin, offering_id=offering.pk,
                        data={"cel_selector": "device.attributes[", "name": "renamed"})
    offering.refresh_from_db()
    assert offering.name == "L40S (DRA)"
    assert "productName" in offering.cel_selector
    assert AuditEvent.objects.filter(verb="offering.updated").count() == 0


# ------------------------------------------------------------------------------------------------ lifecycle


def test_deprecation_needs_a_replacement_that_is_not_retired(platform_admin) -> None:
    old = OfferingFactory(slug="old", resource_name="nvidia.com/gpu")
    retired = OfferingFactory(slug="gone", resource_name="nvidia.com/gpu", lifecycle=Lifecycle.RETIRED)
    with pytest.raises(OfferingValidationError) as exc_info:
        offering_lifecycle_change(actor=platform_admin, offering_id=old.pk, lifecycle="deprecated")
    assert "replacement" in _errors(exc_info)
    with pytest.raises(OfferingValidationError) as exc_info:
        offering_lifecycle_change(actor=platform_admin, offering_id=old.pk, lifecycle="deprecated",
                                  replacement_id=retired.pk)
    assert "retired" in _errors(exc_info)["replacement"][0]
    with pytest.raises(OfferingValidationError):
        offering_lifecycle_change(actor=platform_admin, offering_id=old.pk, lifecycle="deprecated",
                                  replacement_id=old.pk)
    old.refresh_from_db()
    assert old.lifecycle == Lifecycle.ACTIVE
    assert not AuditEvent.objects.exists()


def test_retirement_date_in_the_past_is_refused(platform_admin) -> None:
    old = OfferingFactory(slug="old", resource_name="nvidia.com/gpu")
    new = OfferingFactory(slug="new", resource_name="nvidia.com/gpu")
    with pytest.raises(OfferingValidationError) as exc_info:
        offering_lifecycle_change(actor=platform_admin, offering_id=old.pk, lifecycle="deprecated",
                                  replacement_id=new.pk, retire_on=timezone.localdate() - dt.timedelta(days=1))
    assert "past" in _errors(exc_info)["retire_on"][0]


def test_deprecated_offering_retires_on_its_date(platform_admin) -> None:
    old = OfferingFactory(slug="old", resource_name="nvidia.com/gpu")
    new = OfferingFactory(slug="new", resource_name="nvidia.com/gpu")
    retire_on = timezone.localdate() + dt.timedelta(days=30)
    offering_lifecycle_change(actor=platform_admin, offering_id=old.pk, lifecycle="deprecated",
                              replacement_id=new.pk, retire_on=retire_on)
    assert offerings_retire_due(today=retire_on - dt.timedelta(days=1)) == 0
    assert offerings_retire_due(today=retire_on) == 1
    assert offerings_retire_due(today=retire_on) == 0  # idempotent
    old.refresh_from_db()
    assert old.lifecycle == Lifecycle.RETIRED
    assert list(AuditEvent.objects.order_by("id").values_list("verb", flat=True)) == [
        "offering.lifecycle_changed", "offering.retired"]
    # Tenants no longer see it.
    assert not Offering.objects.browsable().filter(pk=old.pk).exists()


# ------------------------------------------------------------------------------------------------ prices


def test_price_change_closes_the_open_period_and_keeps_the_past(platform_admin) -> None:
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    first = price_set(actor=platform_admin, offering_id=offering.pk, unit_price="2.50", currency="EUR")
    change_at = timezone.now() + dt.timedelta(days=7)
    second = price_set(actor=platform_admin, offering_id=offering.pk, unit_price="3.10", currency="EUR",
                       effective_from=change_at)
    first.refresh_from_db()
    assert first.effective_to == change_at
    assert second.effective_to is None
    assert offering.price_at(timezone.now()).unit_price == Decimal("2.5000")
    assert offering.price_at(change_at + dt.timedelta(hours=1)).unit_price == Decimal("3.1000")
    assert AuditEvent.objects.filter(verb="price.set").count() == 2


def test_price_cannot_start_in_the_past(platform_admin) -> None:
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    with pytest.raises(OfferingValidationError) as exc_info:
        price_set(actor=platform_admin, offering_id=offering.pk, unit_price="1", currency="EUR",
                  effective_from=timezone.now() - dt.timedelta(days=1))
    assert "past" in _errors(exc_info)["effective_from"][0]
    assert not OfferingPrice.objects.exists()


def test_overlapping_price_periods_are_refused(platform_admin) -> None:
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    later = timezone.now() + dt.timedelta(days=10)
    price_set(actor=platform_admin, offering_id=offering.pk, unit_price="3", currency="EUR", effective_from=later)
    with pytest.raises(OfferingValidationError) as exc_info:  # open-ended, would run into the later one
        price_set(actor=platform_admin, offering_id=offering.pk, unit_price="2", currency="EUR",
                  effective_from=timezone.now() + dt.timedelta(days=1))
    assert "Overlaps" in _errors(exc_info)["effective_from"][0]
    # A bounded period that ends before the later one is fine.
    price_set(actor=platform_admin, offering_id=offering.pk, unit_price="2", currency="EUR",
              effective_from=timezone.now() + dt.timedelta(days=1), effective_to=later)
    assert OfferingPrice.objects.count() == 2


@pytest.mark.parametrize(("amount", "currency", "field"), [
    ("-1", "EUR", "unit_price"), ("1.23456", "EUR", "unit_price"), ("NaN", "EUR", "unit_price"),
    ("1", "euro", "currency"),
])
def test_bad_prices_are_refused(platform_admin, amount, currency, field) -> None:
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    with pytest.raises(OfferingValidationError) as exc_info:
        price_set(actor=platform_admin, offering_id=offering.pk, unit_price=amount, currency=currency)
    assert field in _errors(exc_info)
    assert not OfferingPrice.objects.exists()


def test_only_future_prices_can_be_deleted_and_the_cut_period_is_restored(platform_admin) -> None:
    offering = OfferingFactory(slug="h100", resource_name="nvidia.com/gpu")
    current = price_set(actor=platform_admin, offering_id=offering.pk, unit_price="2", currency="EUR")
    future = price_set(actor=platform_admin, offering_id=offering.pk, unit_price="3", currency="EUR",
                       effective_from=timezone.now() + dt.timedelta(days=3))
    with pytest.raises(CatalogError):
        price_delete(actor=platform_admin, price_id=current.pk)
    price_delete(actor=platform_admin, price_id=future.pk)
    current.refresh_from_db()
    assert current.effective_to is None
    assert list(OfferingPrice.objects.values_list("pk", flat=True)) == [current.pk]
