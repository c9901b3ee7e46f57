"""The compatibility check: which offerings qualify for an image requirement, and why the others do not."""

from __future__ import annotations

import pytest

from catalog.models import Offering
from catalog.services.compatibility import RequirementError, offering_check, offerings_check, parse_requirement


def _offering(**fields) -> Offering:
    base = {"slug": "x", "name": "x", "unit_kind": "whole", "resource_name": "nvidia.com/gpu"}
    return Offering(**{**base, **fields})


H100 = _offering(name="H100", cuda_max="12.4", compute_capability="9.0", architecture="hopper",
                 driver_min="550.54.15", memory_mib=81559, cpu_architectures=["amd64"])
A100 = _offering(name="A100", cuda_max="12.2", compute_capability="8.0", architecture="ampere",
                 driver_min="535.183.06", memory_mib=40960, cpu_architectures=["amd64"])
T4 = _offering(name="T4", unit_kind="time-slicing", cuda_max="12.2", compute_capability="7.5",
               architecture="turing", memory_mib=15360)
UNKNOWN = _offering(name="Undeclared")


def test_cuda_and_sm_requirement_explains_each_refusal() -> None:
    req, verdicts = offerings_check([T4, A100, H100, UNKNOWN], "CUDA 12.4, sm_80+")
    by_name = {v.offering.name: v for v in verdicts}
    assert by_name["H100"].qualifies
    assert by_name["H100"].reasons == []
    assert not by_name["A100"].qualifies
    assert by_name["A100"].reasons == ["driver supports CUDA up to 12.2, the image needs 12.4"]
    assert "compute capability 7.5 is below 8.0" in by_name["T4"].reasons
    assert any("does not declare" in r for r in by_name["Undeclared"].reasons)
    assert next(v.offering.name for v in verdicts) == "H100"  # qualifying first
    assert req.describe() == "CUDA ≥ 12.4, compute capability 8.0+"


def test_sm_without_plus_means_same_major() -> None:
    req = parse_requirement("sm_80")
    assert offering_check(A100, req).qualifies
    verdict = offering_check(H100, req)
    assert not verdict.qualifies
    assert "cannot run sm_80 cubins" in verdict.reasons[0]


@pytest.mark.parametrize(("text", "qualifies"), [
    ("hopper", {"H100"}), ("arch=ampere", {"A100"}), ("memory>=40Gi", {"H100", "A100"}),
    ("driver>=550", {"H100"}), ("arm64", set()), ("amd64", {"H100", "A100"}), ("cuda>=12.2", {"H100", "A100", "T4"}),
])
def test_single_terms(text, qualifies) -> None:
    _, verdicts = offerings_check([H100, A100, T4], text)
    assert {v.offering.name for v in verdicts if v.qualifies} == qualifies


def test_time_slice_memory_reason_mentions_sharing() -> None:
    verdict = offering_check(T4, parse_requirement("memory>=16Gi"))
    assert "share the card's memory" in verdict.reasons[0]


@pytest.mark.parametrize("text", ["cuda twelve", "sm_8", "fast please", "cuda", "memory>=lots"])
def test_bad_requirements_are_clear_errors(text) -> None:
    with pytest.raises(RequirementError) as exc_info:
        parse_requirement(text)
    assert str(exc_info.value)
