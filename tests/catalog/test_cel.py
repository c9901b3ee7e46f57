"""DRA CEL selectors (catalog/cel/): Kubernetes semantics, errors, limits. No database needed."""

from __future__ import annotations

import itertools
import random
import re
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from catalog.cel import (
    MAX_COST,
    MAX_EXPRESSION_LENGTH,
    CelCompileError,
    CelError,
    CelLimitError,
    CelRuntimeError,
    DeviceInput,
    compile_selector,
    device_input,
    match_devices,
    parse_quantity_strict,
    parse_semver,
)

EXAMPLES = Path("/work/shared/reference/dra-examples")
NV = "gpu.nvidia.com"


def gpu(
    *,
    memory: str = "48Gi",
    driver_version: str = "550.54.15",
    index: int = 0,
    product: str = "NVIDIA L40S",
    extra: dict[str, Any] | None = None,
    multi: bool = False,
) -> DeviceInput:
    return device_input(
        driver=NV,
        attributes={
            "type": {"string": "gpu"},
            "productName": {"string": product},
            "index": {"int": index},
            "driverVersion": {"version": driver_version},
            "cudaComputeCapability": {"version": "8.9.0"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
            **(extra or {}),
        },
        capacity={"memory": {"value": memory}},
        allow_multiple_allocations=multi,
    )


def matches(expression: str, device: DeviceInput | None = None) -> bool:
    return compile_selector(expression).evaluate(device or gpu())


# Quantity


@pytest.mark.parametrize(("memory", "expected"), [("48Gi", True), ("40Gi", True), ("24Gi", False), ("40959Mi", False)])
def test_capacity_compare_to_quantity(memory: str, expected: bool) -> None:
    selector = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
    assert matches(selector, gpu(memory=memory)) is expected


@pytest.mark.parametrize(
    "expression",
    [
        "quantity('1') == quantity('1000m')",
        "quantity('1Ki') == quantity('1024')",
        "quantity('1e3') == quantity('1k')",
        "quantity('0.5') == quantity('500m')",
        "quantity('1') != quantity('1001m')",
        "quantity('200M').compareTo(quantity('0.2G')) == 0",
        "quantity('50M').compareTo(quantity('50Mi')) == -1",
        "quantity('50Mi').compareTo(quantity('50M')) == 1",
        "[quantity('50M').compareTo(quantity('50Mi'))] == [-1]",  # not rewritten: the Python impl answers
        "quantity('150Mi').isGreaterThan(quantity('100Mi'))",
        "!quantity('50Mi').isGreaterThan(quantity('100Mi'))",
        "quantity('50M').isLessThan(quantity('100M'))",
        "quantity('-1').isLessThan(quantity('-500m')) && quantity('-2').isLessThan(quantity('1m'))",
        "quantity('50k').add(quantity('20k')) == quantity('70k')",
        "quantity('50k').add(20) == quantity('50020')",
        "quantity('50k').sub(quantity('20k')) == quantity('30k')",
        "quantity('50k').sub(20000) == quantity('30k')",
        "quantity('50k').add(20).sub(quantity('100k')).sub(-50000) == quantity('20')",
        "quantity('50k').asInteger() == 50000",
        "quantity('50k').sub(20000).asApproximateFloat() == 30000.0",
        "quantity('50000000G').isInteger() && !quantity('500m').isInteger()",
        "!quantity('9999999999999999999999999999999999999G').isInteger()",
        "quantity('-3').sign() == -1 && quantity('0').sign() == 0 && quantity('3m').sign() == 1",
        "isQuantity('1.3Gi') && isQuantity('10000k') && isQuantity('1e3')",
        "!isQuantity('1,3G') && !isQuantity('200K') && !isQuantity('Three') && !isQuantity('Mi') && !isQuantity(' 1')",
        "device.capacity['gpu.nvidia.com'].memory == quantity('48Gi')",
        "device.capacity['gpu.nvidia.com'].memory.add(quantity('2Gi')) == quantity('50Gi')",
    ],
)
def test_quantity_library(expression: str) -> None:
    assert matches(expression) is True


def test_invalid_quantity_is_a_runtime_error() -> None:
    with pytest.raises(CelRuntimeError, match=r'invalid quantity "bad"'):
        matches("quantity('bad').sign() == 1")


def test_as_integer_fails_for_fractions_and_overflow() -> None:
    with pytest.raises(CelRuntimeError, match="cannot convert value to integer"):
        matches("quantity('500m').asInteger() == 0")
    with pytest.raises(CelRuntimeError, match="cannot convert value to integer"):
        matches("quantity('9999999999999999999999999999999999999G').asInteger() == 0")


def test_quantity_parsing_is_exact_and_follows_the_go_grammar() -> None:
    assert parse_quantity_strict("9999999999999999999999999999999999999G") == Decimal(
        "9999999999999999999999999999999999999e9"
    )
    assert parse_quantity_strict("81559Mi") == 81559 * 2**20
    for bad in ("200K", "NaN", "1_000", " 1", "", "1.2.3", "Gi"):
        with pytest.raises(ValueError, match="invalid quantity"):
            parse_quantity_strict(bad)


def test_quantity_keys_order_like_the_numbers() -> None:
    """The native comparison rewrite relies on `qkey` sorting like the value; check it against Decimal order."""
    rng = random.Random(7)
    texts = ["0", "-0", "1", "-1", "1m", "-1m", "999m", "1001m", "1e3", "-1e-3", "0.1", "0.10001", "-0.5", "-0.51"]
    texts += [
        f"{rng.choice(['', '-'])}{rng.randint(0, 10**6)}{rng.choice(['', 'm', 'k', 'Mi', 'Gi', 'e-5', 'e7'])}"
        for _ in range(300)
    ]
    parsed = [(parse_quantity_strict(text), text) for text in texts]
    by_value = sorted(parsed, key=lambda pair: pair[0])
    for (smaller, small_text), (larger, large_text) in itertools.pairwise(by_value):
        expected = -1 if smaller < larger else 0
        assert matches(f"quantity('{small_text}').compareTo(quantity('{large_text}')) == {expected}")
        assert matches(f"[quantity('{small_text}').compareTo(quantity('{large_text}'))] == [{expected}]")
        assert matches(
            f"quantity('{large_text}').isGreaterThan(quantity('{small_text}')) == {str(expected == -1).lower()}"
        )


# Semver

PRECEDENCE = [  # semver.org §11 example, ascending
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1",
    "1.2.0",
    "2.0.0",
    "10.0.0",
]


@pytest.mark.parametrize(("lower", "higher"), list(itertools.pairwise(PRECEDENCE)))
def test_semver_precedence(lower: str, higher: str) -> None:
    assert matches(f"semver('{lower}').isLessThan(semver('{higher}'))")
    assert matches(f"semver('{higher}').isGreaterThan(semver('{lower}'))")
    assert matches(f"semver('{lower}').compareTo(semver('{higher}')) == -1")
    assert matches(f"[semver('{higher}').compareTo(semver('{lower}'))] == [1]")  # the Python impl path
    assert matches(f"semver('{lower}').compareTo(semver('{lower}')) == 0")


def test_semver_keys_order_like_precedence() -> None:
    keys = [parse_semver(text).vkey for text in PRECEDENCE]
    assert keys == sorted(keys)
    assert parse_semver("1.0.0+build.5") == parse_semver("1.0.0+other")  # build metadata has no precedence


@pytest.mark.parametrize(
    "expression",
    [
        "semver('1.2.3').major() == 1 && semver('1.2.3').minor() == 2 && semver('1.2.3').patch() == 3",
        "semver('1.2.3-rc.1+build').compareTo(semver('1.2.3-rc.1')) == 0",
        "isSemver('1.0.0') && isSemver('0.1.0-alpha.1') && !isSemver('hello') && !isSemver('v1.0') && !isSemver('1.0')",
        "!isSemver('01.0.0') && !isSemver('1.0.0-01')",
        "isSemver('v1.0', true) && isSemver('1', true) && !isSemver('1.0-rc', true)",
        "semver('v1.0.0', true) == semver('1.0.0')",
        "semver('1.0', true) == semver('1.0.0')",
        "semver('01.01.01', true).major() == 1",
        "semver('v2', true).compareTo(semver('2.0.0')) == 0",
    ],
)
def test_semver_library(expression: str) -> None:
    assert matches(expression) is True


def test_semver_without_normalize_rejects_v_prefix() -> None:
    with pytest.raises(CelRuntimeError, match=r'invalid semantic version "v1\.2"'):
        matches("semver('v1.2').major() == 1")


@pytest.mark.parametrize(("version", "expected"), [("550.54.15", True), ("535.104.5", False), ("550.0.0", False)])
def test_version_attribute_with_semver_methods(version: str, expected: bool) -> None:
    device = gpu(driver_version=version)
    assert (
        matches('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("550.0.0"))', device)
        is expected
    )
    assert matches('device.attributes["gpu.nvidia.com"].driverVersion.major() >= 550', device) is (version >= "550")


def test_comparing_a_string_attribute_with_a_semver_is_an_error() -> None:
    with pytest.raises(CelRuntimeError, match="no matching overload"):
        matches('device.attributes["gpu.nvidia.com"].productName.isGreaterThan(semver("1.0.0"))')
    with pytest.raises(CelRuntimeError, match="no matching overload"):
        matches('device.attributes["gpu.nvidia.com"].productName.compareTo(semver("1.0.0")) >= 0')


# Attribute lookup


def test_missing_domain_is_an_empty_map_but_a_missing_attribute_is_an_error() -> None:
    assert matches('has(device.attributes["other.example.com"].x)') is False
    assert matches('!("other.example.com" in device.attributes)') is True  # the empty map does not add a key
    with pytest.raises(CelRuntimeError, match='no such key: "x"'):
        matches('device.attributes["other.example.com"].x == 1')
    with pytest.raises(CelRuntimeError, match='no such key: "noSuchAttribute"'):
        matches('device.attributes["gpu.nvidia.com"].noSuchAttribute == "x"')
    assert matches('has(device.attributes["gpu.nvidia.com"].productName)') is True


def test_missing_capacity_domain_reads_as_empty() -> None:
    assert matches('!has(device.capacity["other.example.com"].memory)') is True


def test_match_devices_reports_runtime_errors_instead_of_non_matches() -> None:
    devices = [gpu(), gpu(extra={"model": {"string": "x"}}), gpu(memory="8Gi")]
    selector = compile_selector('device.attributes["gpu.nvidia.com"].model == "x"')
    result = match_devices([selector], devices)
    assert result.matched == [1]
    assert set(result.errors) == {0, 2}
    assert 'no such key: "model"' in result.errors[0]


def test_match_devices_ands_selectors_in_order_and_stops_at_the_first_false() -> None:
    devices = [gpu(memory="48Gi"), gpu(memory="8Gi"), gpu(memory="80Gi", index=3)]
    big = compile_selector('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0')
    broken = compile_selector('device.attributes["gpu.nvidia.com"].missing == 1')
    index_zero = compile_selector('device.attributes["gpu.nvidia.com"].index == 0')
    assert match_devices([big, index_zero], devices).matched == [0]
    result = match_devices([big, broken], devices)
    assert result.matched == []
    assert set(result.errors) == {0, 2}  # device 1 stopped at the first selector: its error is never reached


def test_memoized_matching_equals_evaluating_every_device() -> None:
    rng = random.Random(3)
    devices = [
        gpu(
            memory=rng.choice(["24Gi", "40Gi", "48Gi", "80Gi"]),
            driver_version=rng.choice(["535.104.5", "550.54.15", "570.124.6", "not-a-version"]),
            index=rng.randint(0, 7),
            product=rng.choice(["NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "NVIDIA H100 80GB HBM3"]),
            extra=rng.choice([{}, {"model": {"string": "x"}}, {"model": {"int": 1}}, {"model": {"bool": True}}]),
        )
        for _ in range(300)
    ]
    selectors = [
        compile_selector("device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('a100|h100')"),
        compile_selector("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('540.0.0'))"),
        compile_selector(
            "device.attributes['gpu.nvidia.com'].model == 1 || device.attributes['gpu.nvidia.com'].size() > 6"
        ),
        compile_selector("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"),
    ]
    for count in range(1, len(selectors) + 1):
        memoized = match_devices(selectors[:count], devices)
        direct = match_devices(selectors[:count], devices, memoize=False)
        assert (memoized.matched, memoized.errors) == (direct.matched, direct.errors)
        assert memoized.matched or memoized.errors


def test_name_without_domain_belongs_to_the_driver_domain() -> None:
    device = gpu()
    assert device.attributes[NV]["productName"] == "NVIDIA L40S"
    assert matches('device.attributes["gpu.nvidia.com"].productName == "NVIDIA L40S"', device)


def test_qualified_name_lands_in_its_own_domain() -> None:
    device = gpu()
    assert device.attributes["resource.kubernetes.io"] == {"pciBusID": "0000:18:00.0"}
    assert "pciBusID" not in device.attributes[NV]
    assert matches('device.attributes["resource.kubernetes.io"].pciBusID == "0000:18:00.0"', device)
    assert not matches('has(device.attributes["gpu.nvidia.com"].pciBusID)', device)


def test_driver_and_allow_multiple_allocations() -> None:
    assert matches("device.driver == 'gpu.nvidia.com'")
    assert not matches("device.driver.startsWith('gpu.example')")
    assert matches("device.allowMultipleAllocations", gpu(multi=True))
    assert not matches("device.allowMultipleAllocations", gpu(multi=False))


def test_cel_bind_with_domain_and_root_aliases() -> None:
    assert matches('cel.bind(g, device.attributes["gpu.nvidia.com"], g.type == "gpu" && g.index == 0)')
    assert matches('cel.bind(a, device.attributes, a["gpu.nvidia.com"].index == 0 && !has(a["x.example.com"].y))')
    assert matches("cel.bind(n, 40, device.attributes['gpu.nvidia.com'].index < n)")


def test_cel_bind_after_a_short_circuited_comprehension() -> None:
    """cel-cpp's lazily initialized cel.bind read the stale variable of a comprehension that stopped early and
    answered false (or failed); catalog.cel makes binds eager (see catalog/cel/rewrite.py _eager_binds)."""
    assert matches("['y', 'x'].exists(n, n == 'y') && cel.bind(g, 5, g == 5)")
    assert matches("!['y', 'x'].all(n, n != 'y') && cel.bind(g, {'a': 1}, g.a == 1)")
    assert matches(
        "['type', 'index'].exists(n, n == 'type') && cel.bind(g, device.attributes['gpu.nvidia.com'], g.type == 'gpu')"
    )


def test_list_attributes_and_includes() -> None:
    device = gpu(
        extra={
            "modes": {"strings": ["a", "b"]},
            "ids": {"ints": [1, 2, 3]},
            "versions": {"versions": ["1.0.0", "2.0.0"]},
        }
    )
    assert matches('device.attributes["gpu.nvidia.com"].ids.includes(2)', device)
    assert not matches('device.attributes["gpu.nvidia.com"].modes.includes("c")', device)
    assert matches('device.attributes["gpu.nvidia.com"].versions.includes(semver("2.0.0"))', device)
    assert matches('device.attributes["gpu.nvidia.com"].index.includes(0)', device)  # a scalar is a one-item list
    assert matches('device.attributes["gpu.nvidia.com"].ids.size() == 3', device)


def test_strings_extension() -> None:
    assert matches("device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^nvidia l40')")
    assert matches("device.attributes['gpu.nvidia.com'].productName.split(' ').size() == 2")
    assert matches("'a,b'.split(',').all(x, x.size() == 1) && 'x'.upperAscii() == 'X'")


# Malformed input from clusters


def test_device_input_tolerates_malformed_values() -> None:
    device = device_input(
        driver=NV,
        attributes={
            "good": {"string": "yes"},
            "badVersion": {"version": "not-a-version"},
            "weird": {"weird": 1},
            "notADict": "oops",
            "boolAsInt": {"int": True},
            "twoValues": {"int": 1, "string": "x"},
            "": {"string": "no name"},
            "/noDomain": {"string": "x"},
            "ints": {"ints": [1, "two"]},
            "future": {"string": "kept", "someNewField": 1},
        },
        capacity={"memory": {"value": "lots"}, "cores": {"value": "8"}, "legacy": "4Gi"},
    )
    assert device.attributes == {NV: {"good": "yes", "future": "kept"}}
    assert set(device.capacity[NV]) == {"cores", "legacy"}
    assert len(device.skipped) == 9
    assert any("badVersion" in reason and "invalid semantic version" in reason for reason in device.skipped)
    assert matches(
        "device.attributes['gpu.nvidia.com'].good == 'yes' && !has(device.attributes['gpu.nvidia.com'].badVersion)",
        device,
    )


@pytest.mark.parametrize("raw", [None, "text", 5, ["a"]])
def test_device_input_tolerates_non_mapping_sections(raw: Any) -> None:
    device = device_input(driver=NV, attributes=raw, capacity=raw)
    assert device.attributes == {}
    assert device.capacity == {}
    assert matches("device.driver == 'gpu.nvidia.com'", device)


# Compile errors and limits


def test_syntax_error_on_the_second_line_has_its_position() -> None:
    second = "  (device.attributes['gpu.nvidia.com'].index == "  # ends early: the error is at the end of line 2
    with pytest.raises(CelCompileError) as caught:
        compile_selector("device.driver == 'gpu.nvidia.com' &&\n" + second)
    error = caught.value
    assert (error.line, error.column) == (2, len(second) + 1)
    assert "Syntax error" in error.message
    assert "<input>" not in error.message
    assert "INVALID_ARGUMENT" not in error.message
    assert error.pointer() == second + "\n" + " " * len(second) + "^"
    assert str(error).startswith(f"line 2, column {len(second) + 1}: Syntax error")


def test_unknown_function_points_at_the_call() -> None:
    with pytest.raises(CelCompileError) as caught:
        compile_selector("device.driver == 'x' ||\n    frobnicate(device.driver)")
    error = caught.value
    assert (error.line, error.column) == (2, 15)
    assert error.message == "undeclared reference to 'frobnicate'"
    assert error.pointer().endswith("\n" + " " * 14 + "^")
    assert isinstance(error, ValueError)
    assert error.expression.startswith("device.driver")


def test_unknown_device_field_and_overload_errors() -> None:
    with pytest.raises(CelCompileError, match=r"undeclared reference to 'device\.drivr'"):
        compile_selector("device.drivr == 'x'")
    with pytest.raises(CelCompileError, match="found no matching overload for '_>=_'"):
        compile_selector("device.capacity['gpu.nvidia.com'].memory >= 5")


def test_has_on_device_fields_is_refused_with_a_position() -> None:
    with pytest.raises(CelCompileError) as caught:
        compile_selector("true && has(device.allowMultipleAllocations)")
    assert (caught.value.line, caught.value.column) == (1, 12)
    assert "has(device.allowMultipleAllocations)" in caught.value.message


@pytest.mark.parametrize("expression", ["device.driver", "1 + 2", "device.capacity['gpu.nvidia.com'].memory", "[true]"])
def test_non_bool_result_is_rejected_at_compile_time(expression: str) -> None:
    with pytest.raises(CelCompileError, match="must evaluate to bool, not "):
        compile_selector(expression)


def test_dyn_result_that_is_not_bool_fails_at_runtime() -> None:
    with pytest.raises(CelRuntimeError, match="evaluated to string, not bool"):
        matches("device.attributes['gpu.nvidia.com'].productName")


def test_message_construction_is_refused() -> None:
    with pytest.raises(CelCompileError, match=r"cannot construct kubernetes\.Quantity"):
        compile_selector("kubernetes.Quantity{value: '1e0'} == quantity('1')")


def test_expression_length_limit_is_checked_before_compiling() -> None:
    just_fits = "true" + " " * (MAX_EXPRESSION_LENGTH - 4)
    assert compile_selector(just_fits).evaluate(gpu())
    with pytest.raises(CelLimitError, match="10,241 bytes long; the limit is 10,240") as caught:
        compile_selector("(" * (MAX_EXPRESSION_LENGTH + 1))  # would be a syntax error if it were compiled
    assert caught.value.line is None
    assert str(caught.value) == caught.value.message


NESTED_ALL = (
    "device.attributes.all(d1, device.attributes[d1].all(n1, "
    "device.attributes.all(d2, device.attributes[d2].all(n2, n1 != n2))))"
)


def test_four_nested_comprehensions_exceed_the_cost_budget() -> None:
    with pytest.raises(CelLimitError, match="exceeds the limit of 1,000,000") as caught:
        compile_selector(NESTED_ALL)
    assert (caught.value.line, caught.value.column) == (1, 22)  # the outermost .all(


def test_costs_multiply_with_nesting_and_plain_selectors_are_cheap() -> None:
    one = compile_selector("device.attributes['gpu.nvidia.com'].all(n, n.size() > 1)").estimated_cost
    two = compile_selector(
        "device.attributes['gpu.nvidia.com'].all(n, device.attributes['gpu.nvidia.com'].all(m, n != m || true))"
    ).estimated_cost
    three = compile_selector(
        "device.attributes.all(d, device.attributes[d].all(n, device.attributes[d].all(m, n != m || true)))"
    ).estimated_cost
    assert 32 <= one < 1_000
    assert 32 * one <= two < 100_000
    assert 32 * two <= three < MAX_COST
    plain = compile_selector("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'")
    assert plain.estimated_cost < 100
    regex = compile_selector("device.attributes['gpu.nvidia.com'].productName.matches('^.*a100.*$')")
    assert (
        regex.estimated_cost > compile_selector("device.attributes['gpu.nvidia.com'].productName == 'a'").estimated_cost
    )


def test_errors_share_one_hierarchy() -> None:
    assert issubclass(CelCompileError, CelError)
    assert issubclass(CelLimitError, CelError)
    assert issubclass(CelRuntimeError, CelError)
    assert issubclass(CelError, ValueError)


def test_compiled_selectors_are_cached_and_report_domains() -> None:
    expression = "device.attributes['gpu.nvidia.com'].index == 0 && device.capacity['other.example.com'].x.sign() == 1"
    selector = compile_selector(expression)
    assert compile_selector(expression) is selector
    assert selector.domains == frozenset({NV, "other.example.com"})


def test_selectors_can_be_shared_between_threads() -> None:
    selector = compile_selector("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))")
    devices = [gpu(driver_version=f"{540 + i % 20}.0.0") for i in range(400)]
    expected = [selector.evaluate(device) for device in devices]
    results: list[list[bool]] = []

    def work() -> None:
        results.append([selector.evaluate(device) for device in devices])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 4


# The upstream examples (/work/shared/reference/dra-examples): parsed here, not copied.


def render_helm(text: str) -> str:
    """Just enough Helm for these two templates with their chart defaults (SOURCE.md): `if` blocks are on (GPUs
    enabled, API version v1), `with` blocks are off (optional values left unset), and two values are filled."""
    lines, active = [], [True]
    for line in text.splitlines():
        control = re.fullmatch(r"\s*\{\{-?\s*(\S+).*\}\}\s*", line)  # a line that is one action
        if control and control.group(1) in ("if", "with"):
            active.append(active[-1] and control.group(1) == "if")
        elif control and control.group(1) == "end":
            active.pop()
        elif not control and active[-1]:
            lines.append(line)

    def value(match: re.Match[str]) -> str:
        expression = match.group(1)
        if "driverName" in expression:
            return "gpu.example.com"  # values.yaml: deviceProfile gpu → <profile>.example.com
        if "ApiVersion" in expression:
            return "resource.k8s.io/v1"
        raise AssertionError(f"unexpected template expression {expression}")

    return re.sub(r"\{\{-?\s*(.*?)\s*-?\}\}", value, "\n".join(lines))


def documents(name: str) -> list[dict[str, Any]]:
    text = (EXAMPLES / name).read_text()
    if name.endswith("helm-template.yaml"):
        text = render_helm(text)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def objects_of_kind(kind: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in documents(path.name):
            for item in doc.get("items", [doc]):
                if item.get("kind") == kind:
                    found.append((path.name, item))
    return found


def device_class_selectors() -> dict[str, list[str]]:
    return {
        item["metadata"]["name"]: [selector["cel"]["expression"] for selector in item["spec"]["selectors"]]
        for _, item in objects_of_kind("DeviceClass")
    }


def request_selectors() -> list[tuple[str, str, list[str]]]:
    """(file, deviceClassName, selectors) of every request in the ResourceClaimTemplates."""
    found = []
    for name, item in objects_of_kind("ResourceClaimTemplate"):
        for request in item["spec"]["spec"]["devices"]["requests"]:
            exactly = request["exactly"]
            found.append(
                (name, exactly["deviceClassName"], [s["cel"]["expression"] for s in exactly.get("selectors", [])])
            )
    return found


def slice_devices() -> list[DeviceInput]:
    devices = []
    for _, item in objects_of_kind("ResourceSlice"):
        for device in item["spec"]["devices"]:
            body = device.get("basic", device)  # v1alpha3 wrapped device fields in `basic`
            devices.append(
                device_input(
                    driver=item["spec"]["driver"], attributes=body.get("attributes"), capacity=body.get("capacity")
                )
            )
    return devices


def test_examples_are_found() -> None:
    assert set(device_class_selectors()) == {"gpu.example.com", "gpu.nvidia.com"}
    assert len(request_selectors()) == 2
    assert len(slice_devices()) == 28  # 8 example GPUs and 20 IMEX channels


def test_example_device_classes_and_claims_compile_cheaply() -> None:
    expressions = [e for selectors in device_class_selectors().values() for e in selectors]
    expressions += [e for _, _, selectors in request_selectors() for e in selectors]
    for expression in expressions:
        assert compile_selector(expression).estimated_cost < 1_000


def test_example_driver_class_and_cel_selector_claim_match_its_gpus() -> None:
    classes = device_class_selectors()
    devices = slice_devices()
    example = [i for i, device in enumerate(devices) if device.driver == "gpu.example.com"]
    (claim,) = [selectors for name, _, selectors in request_selectors() if name.startswith("dra-example-driver")]
    selectors = [compile_selector(e) for e in classes["gpu.example.com"] + claim]
    result = match_devices(selectors, devices)
    assert result.matched == example
    assert len(example) == 8
    assert result.errors == {}  # the IMEX channels stop at the driver check


def test_example_nvidia_class_and_a100_claim() -> None:
    classes = device_class_selectors()
    (claim,) = [selectors for name, _, selectors in request_selectors() if name.startswith("nvidia")]
    a100 = [gpu(product="NVIDIA A100-SXM4-40GB", index=i) for i in range(8)]
    imex = [device for device in slice_devices() if device.driver == NV]
    selectors = [compile_selector(e) for e in classes[NV] + claim]
    result = match_devices(selectors, a100 + imex + [gpu(product="NVIDIA L40S", index=0)])
    assert result.matched == [0, 2, 4, 6]
    assert result.errors == {}
