"""The consumable-capacity rules (inventory/k8s/consumable.py), case by case as upstream's allocator applies them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from inventory.k8s import consumable

GI = Fraction(2**30)
DRIVER = "gpu.example.com"


def caps(**entries):
    return consumable.device_capacities(DRIVER, entries)


MEMORY_RANGE = {"value": "80Gi", "requestPolicy": {"default": "10Gi",
                                                   "validRange": {"min": "10Gi", "max": "40Gi", "step": "10Gi"}}}
MEMORY_VALUES = {"value": "80Gi", "requestPolicy": {"default": "20Gi", "validValues": ["10Gi", "20Gi", "40Gi"]}}


@pytest.mark.parametrize(("requested", "consumed"), [
    (None, 10),          # no request: the policy's default
    ("1Gi", 10),         # below min: min
    ("10Gi", 10),
    ("11Gi", 20),        # rounded up to min + k*step
    ("30Gi", 30),
    ("40Gi", 40),
])
def test_valid_range_rounds_up_to_the_step_grid(requested, consumed) -> None:
    capacities = caps(memory=MEMORY_RANGE)
    result = consumable.consumption(DRIVER, {"memory": requested} if requested else {}, capacities)
    assert result.ok, result.reason
    assert result.amounts == {f"{DRIVER}/memory": consumed * GI}


def test_valid_range_above_max_is_refused_with_the_policy() -> None:
    result = consumable.consumption(DRIVER, {"memory": "41Gi"}, caps(memory=MEMORY_RANGE))
    assert not result.ok
    assert result.reason == ("capacity memory: requested 41Gi is not allowed by the request policy "
                             "(range 10Gi..40Gi in steps of 10Gi; default 10Gi)")


@pytest.mark.parametrize(("requested", "consumed"), [(None, 20), ("5Gi", 10), ("15Gi", 20), ("40Gi", 40)])
def test_valid_values_take_the_smallest_value_at_least_the_request(requested, consumed) -> None:
    result = consumable.consumption(DRIVER, {"memory": requested} if requested else {}, caps(memory=MEMORY_VALUES))
    assert result.amounts == {f"{DRIVER}/memory": consumed * GI}


def test_valid_values_above_every_value_are_refused() -> None:
    result = consumable.consumption(DRIVER, {"memory": "50Gi"}, caps(memory=MEMORY_VALUES))
    assert "requested 50Gi is not allowed" in result.reason


def test_no_policy_consumes_the_request_or_everything() -> None:
    capacities = caps(memory={"value": "80Gi"}, bandwidth={"value": "100G"})
    assert consumable.consumption(DRIVER, {"memory": "20Gi"}, capacities).amounts == {
        f"{DRIVER}/memory": 20 * GI, f"{DRIVER}/bandwidth": Fraction(100 * 10**9)}  # unrequested: the full value


def test_names_with_and_without_the_driver_domain_are_the_same_capacity() -> None:
    capacities = caps(**{"memory": {"value": "10Gi"}, f"{DRIVER}/memory": {"value": "80Gi"}})
    assert capacities[f"{DRIVER}/memory"].value == 80 * GI  # the qualified entry wins
    assert consumable.consumption(DRIVER, {f"{DRIVER}/memory": "1Gi"}, capacities).ok
    missing = consumable.consumption(DRIVER, {"other.com/memory": "1Gi"}, capacities)
    assert missing.reason == "no capacity other.com/memory"
    twice = consumable.consumption(DRIVER, {"memory": "1Gi", f"{DRIVER}/memory": "1Gi"}, caps(memory={"value": "8"}))
    assert "requested twice" in twice.reason


def test_shortfall_says_what_is_left() -> None:
    capacities = caps(memory=MEMORY_RANGE)
    consumed = {f"{DRIVER}/memory": 70 * GI}
    assert consumable.shortfall(DRIVER, {f"{DRIVER}/memory": 20 * GI}, consumed, capacities) == (
        "capacity memory: requested 20Gi, 10Gi left of 80Gi")
    assert consumable.shortfall(DRIVER, {f"{DRIVER}/memory": 10 * GI}, consumed, capacities) == ""


def test_room_share_and_summary() -> None:
    capacities = caps(memory=MEMORY_RANGE)
    consumed = consumable.total([consumable.consumed_amounts(DRIVER, {"memory": "20Gi"}),
                                 consumable.consumed_amounts(DRIVER, {f"{DRIVER}/memory": "40Gi"})])
    assert consumable.dominant_share(consumed, capacities) == 0.75
    assert consumable.room_left(consumed, capacities)  # 20Gi left >= min 10Gi
    assert not consumable.room_left({f"{DRIVER}/memory": 75 * GI}, capacities)  # 5Gi left < min
    assert consumable.summary(DRIVER, consumed, capacities) == {"memory": {
        "value": "80Gi", "consumed": "60Gi", "left": "20Gi",
        "request_policy": "range 10Gi..40Gi in steps of 10Gi; default 10Gi"}}


def test_malformed_capacities_are_left_out() -> None:
    problems: list[str] = []
    capacities = consumable.device_capacities(DRIVER, {"a": {"value": "x"}, "b": {"value": "-1"}, "c": "4"},
                                              problems)
    assert list(capacities) == [f"{DRIVER}/c"]
    assert len(problems) == 2


@pytest.mark.parametrize(("value", "binary", "text"), [
    (20 * GI, True, "20Gi"), (Fraction(1536), True, "1536"), (Fraction(3 * 2**10), True, "3Ki"),
    (Fraction(500 * 10**6), False, "500M"), (Fraction("1.5"), False, "1500m"), (Fraction(7), False, "7"),
])
def test_format_quantity(value, binary, text) -> None:
    assert consumable.Capacity("x/m", value, None, binary).format(value) == text
