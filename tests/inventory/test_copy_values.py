"""copy_upsert hands COPY, for every written field of every row the sync writes, what Django's own save path
(`pre_save` then `get_db_prep_save`, as bulk_create) would send: its shortcuts change no value."""

from __future__ import annotations

import datetime as dt
import enum
import json
from dataclasses import dataclass
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from core.db import _converters, _value, _written
from inventory.kinds import MODELS
from inventory.models import AllocationInterval, ClaimAllocation, Cluster, Device, Finding
from tests.inventory.conftest import _sync_once

WRITTEN_BY_COPY = (*MODELS.values(), Device, Finding, ClaimAllocation, AllocationInterval)


def _comparable(value: Any) -> Any:
    """A JSON value as what it says (Django hands psycopg a Jsonb, the shortcut its JSON text)."""
    if isinstance(value, Jsonb):
        return ("json", json.loads(json.dumps(value.obj)))
    if isinstance(value, str) and value[:1] in "{[" and value[-1:] in "}]":
        try:
            return ("json", json.loads(value))
        except ValueError:
            return value
    return value


def _now(field: Any) -> bool:
    """A field set to the time of the write (both paths set it; the two calls are microseconds apart)."""
    return bool(getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False))


def test_every_value_the_sync_writes_through_copy_is_what_django_would_send(cluster: Cluster) -> None:
    _sync_once(cluster)
    compared = 0
    for model in WRITTEN_BY_COPY:
        fields = _written(model)
        for row in model.objects.filter(cluster=cluster):
            expected = [_comparable(_value(f, row)) for f in fields if not _now(f)]
            got = [_comparable(convert(row)) for f, convert in zip(fields, _converters(model), strict=True)
                   if not _now(f)]
            assert got == expected, (model.__name__, row.pk)
            compared += 1
    assert compared > 100
    assert Device.objects.filter(cluster=cluster).exclude(attributes={}).exists()  # JSON went through the shortcut


class Colour(enum.StrEnum):
    RED = "red"


@dataclass
class Point:
    x: int


@pytest.mark.parametrize("value", [
    {"a": [1, 2.5, None, True, "é\t\\\"x"], "b": {}},
    [1, 2, 3],
    (1, 2),
    "plain",
    {"big": 2**70},  # beyond orjson's 64 bits
    {1: "non-str key"},
    {"colour": Colour.RED},  # a str subclass
    {"nan": float("nan")},  # json.dumps writes NaN (PostgreSQL refuses it), orjson would write null
    {"inf": [float("inf")]},
    {"when": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)},  # json.dumps refuses it
    {"point": Point(1)},
])
def test_json_goes_the_shortcut_only_where_it_writes_what_json_dumps_writes(value: Any) -> None:
    row = AllocationInterval(consumed_capacity=value)
    field = AllocationInterval._meta.get_field("consumed_capacity")
    convert = _converters(AllocationInterval)[_written(AllocationInterval).index(field)]
    try:
        expected = json.loads(json.dumps(_value(field, row).obj))
    except (TypeError, ValueError) as error:  # Django's path refuses it: so must the shortcut, the same way
        with pytest.raises(type(error)):
            json.dumps(convert(row).obj)
        return
    got = convert(row)
    got = json.loads(got) if isinstance(got, str) else json.loads(json.dumps(got.obj))
    assert got == expected or (got != got and expected != expected)


@pytest.mark.parametrize("value", [{"nan": float("nan")}, {"inf": [float("-inf")]}, {"ok": None}])
def test_a_float_json_cannot_write_keeps_djangos_path(value: Any) -> None:
    """json.dumps writes NaN and Infinity, which PostgreSQL refuses; orjson would quietly write null instead."""
    row = AllocationInterval(consumed_capacity=value)
    field = AllocationInterval._meta.get_field("consumed_capacity")
    converted = _converters(AllocationInterval)[_written(AllocationInterval).index(field)](row)
    assert isinstance(converted, Jsonb) == (value != {"ok": None})
