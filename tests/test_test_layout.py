"""The suite's own layout. Shared helpers live in a conftest.py (fixtures and helpers) or an app's factories.py
(builders), never in a test module that others import: such an import hides where a helper lives and ties one
test module's edits to another's. And the fast lane (`make test-fast`, -m "not slow ...") leaves out every test
that starts a process, kubectl or a browser because a collection hook marks them, not because someone remembered to."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.conftest import SLOW_FIXTURES, module_ruled_out, pytest_collection_modifyitems, slow_fixtures

TESTS = Path(__file__).resolve().parent
# The -m expression of `make test-fast`.
FAST_LANE = re.search(r'^test-fast:.*\n\t.* -m "([^"]+)"', (TESTS.parent / "Makefile").read_text(), re.M).group(1)


def _is_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def imports_of_test_modules(source: str, module: str) -> list[str]:
    """`module`'s imports (given its dotted name and source) of a test module of the suite, as "line: module"."""
    package = module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: {alias.name}" for alias in node.names
                      if alias.name.startswith("tests.") and _is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            if not base.startswith("tests"):
                continue
            if _is_test_module(base):
                found.append(f"{node.lineno}: {base}")
            else:  # `from tests.inventory import test_sync`
                found += [f"{node.lineno}: {base}.{alias.name}" for alias in node.names if _is_test_module(alias.name)]
    return found


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    offenders = {}
    for path in sorted(TESTS.rglob("*.py")):
        if found := imports_of_test_modules(path.read_text(), _dotted(path)):
            offenders[str(path.relative_to(TESTS.parent))] = found
    assert not offenders, f"move the shared helpers to a conftest.py or factories.py: {offenders}"


@pytest.mark.parametrize(("line", "expected"), [
    ("from tests.inventory.test_sync import _mutate", "1: tests.inventory.test_sync"),
    ("from tests.inventory import test_derive as base", "1: tests.inventory.test_derive"),
    ("import tests.portal.test_quota", "1: tests.portal.test_quota"),
    ("from .test_validation import pod", "1: tests.catalog.test_validation"),
    ("from . import test_validation", "1: tests.catalog.test_validation"),
    ("from ..inventory.test_derive import node", "1: tests.inventory.test_derive"),
])
def test_the_guard_finds_each_form_of_a_planted_import(line: str, expected: str) -> None:
    assert imports_of_test_modules(line, "tests.catalog.test_something") == [expected]


@pytest.mark.parametrize("line", [
    "from tests.inventory.factories import node",
    "from tests.conftest import make_user",
    "from .conftest import request",
    "from catalog.validation import validate_documents",
])
def test_the_guard_lets_helper_modules_and_the_application_through(line: str) -> None:
    assert imports_of_test_modules(line, "tests.catalog.test_something") == []


def test_the_guard_fails_on_a_copy_of_a_real_module_with_a_planted_import(tmp_path: Path) -> None:
    real = TESTS / "catalog" / "test_validation_quota.py"
    source = real.read_text()
    assert imports_of_test_modules(source, _dotted(real)) == []
    copy = tmp_path / real.name
    copy.write_text(source + "\nfrom tests.catalog.test_validation import run\n")
    line = len(copy.read_text().splitlines())
    assert imports_of_test_modules(copy.read_text(), _dotted(real)) == [f"{line}: tests.catalog.test_validation"]


@pytest.mark.parametrize("qualified", sorted(SLOW_FIXTURES))
def test_each_slow_fixture_is_still_defined_where_the_hook_looks(qualified: str) -> None:
    """A moved or renamed fixture would silently drop its tests back into the fast lane."""
    module, name = qualified.rsplit(".", 1)
    assert hasattr(importlib.import_module(module), name), f"{qualified} is gone: update SLOW_FIXTURES"


def _collect(request: pytest.FixtureRequest, path: Path) -> dict[str, pytest.Item]:
    """The test module's items as this session's collection makes them (the hook not yet applied), with its
    directory's conftest.py loaded as collection does when this file runs alone."""
    package = pytest.Package.from_parent(request.session, path=path.parent)
    request.config.hook.pytest_make_collect_report(collector=package)
    module = pytest.Module.from_parent(package, path=path)
    return {item.name: item for item in module.collect() if isinstance(item, pytest.Item)}


def test_the_hook_marks_a_test_that_needs_kubectl_through_a_fixture_and_only_that(
        request: pytest.FixtureRequest) -> None:
    items = _collect(request, TESTS / "kubesim" / "test_enforcement_kinds.py")
    kubectl, plain = items["test_kubectl_configmaps"], items["test_discovery_advertises_the_new_kinds"]
    assert kubectl.get_closest_marker("slow") is None, "marked by hand: pick a test only the hook marks"
    assert slow_fixtures(kubectl) == ["tests.kubesim.test_enforcement_kinds.kubectl",
                                      "tests.kubesim.test_enforcement_kinds.kubectl_installed"]
    assert slow_fixtures(plain) == []
    pytest_collection_modifyitems(request.config, [kubectl, plain])
    assert kubectl.get_closest_marker("slow") is not None
    assert plain.get_closest_marker("slow") is None


def test_the_fast_lane_leaves_out_slow_browser_and_chaos_tests() -> None:
    assert FAST_LANE == "not slow and not browser and not chaos"


@pytest.mark.parametrize(("module", "markexpr", "ignored"), [
    ("test_api_fuzz.py", FAST_LANE, True),  # pytestmark = [slow, django_db]: its schema is never built
    ("inventory/test_chaos.py", FAST_LANE, True),
    ("browser/test_catalog_pages.py", FAST_LANE, True),  # browser, and not slow
    ("catalog/test_validation.py", FAST_LANE, False),  # no module marks
    ("catalog/test_capacity_demo.py", FAST_LANE, False),  # only some of its tests are slow
    ("test_api_fuzz.py", "slow", False),
    ("inventory/test_chaos.py", "not chaos", True),
    ("inventory/test_chaos.py", "not chaos or timeout", False),  # its module marks satisfy `timeout`
    ("test_api_fuzz.py", "", False),
])
def test_a_module_ruled_out_as_a_whole_by_its_marks_is_not_imported(module: str, markexpr: str, ignored: bool) -> None:
    assert module_ruled_out(TESTS / module, markexpr) is ignored


def test_duplicate_node_ids_stop_the_run_and_schemathesis_items_get_their_operation() -> None:
    """pytest-xdist with --dist loadfile runs tests sharing a node id once: the collection hook refuses duplicates
    (here two fakes), and the API fuzzer's items each carry their operation in their id."""
    from types import SimpleNamespace

    from tests.conftest import unique_node_ids

    twins = [SimpleNamespace(nodeid="tests/test_x.py::test_a"), SimpleNamespace(nodeid="tests/test_x.py::test_a")]
    with pytest.raises(pytest.UsageError, match="not unique"):
        unique_node_ids(twins)  # type: ignore[arg-type]
    unique_node_ids([SimpleNamespace(nodeid="tests/test_x.py::test_a")])  # type: ignore[list-item]
