"""`make test` on a fresh machine: scripts/test-prereqs installs or names what is missing, and a test that needs a
missing tool fails with the install command instead of being skipped (unless the developer opts out, loudly)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs scripts/test-prereqs and nested pytest sessions in subprocesses

ROOT = Path(__file__).resolve().parent.parent
PREREQS = ROOT / "scripts" / "test-prereqs"
NO_BROWSER = "/nonexistent/chromium"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PORTAL_TEST_SKIP_MISSING_TOOLS"}
    env.update(extra)
    return env


def _prereqs(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PREREQS), *args], capture_output=True, text=True, timeout=60, env=_env(**env))


def test_the_makefile_runs_the_prerequisites_before_the_suite() -> None:
    makefile = (ROOT / "Makefile").read_text()
    test_target = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "prereqs" in test_target.splitlines()[0]
    assert "scripts/test-prereqs" in makefile.split("\nprereqs:", 1)[1].split("\n\n", 1)[0]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    assert "apt-get" not in ci, ".ci/run only starts services and calls make test"
    assert "unset PORTAL_TEST_SKIP_MISSING_TOOLS" in ci


def test_without_chromium_the_check_stops_with_the_command_that_installs_it() -> None:
    result = _prereqs("--no-install", PORTAL_CHROMIUM=NO_BROWSER)
    assert result.returncode == 1
    assert f"{NO_BROWSER} is missing; it is needed by the browser tests" in result.stderr
    assert "Run:  sudo apt-get install -y chromium" in result.stderr
    assert "PORTAL_TEST_SKIP_MISSING_TOOLS=1" in result.stderr


def test_as_root_on_debian_the_check_installs_the_missing_packages(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not Path("/etc/debian_version").exists():  # a developer's laptop: the command instead
        result = _prereqs(PORTAL_CHROMIUM=NO_BROWSER)
        assert result.returncode == 1
        assert "sudo apt-get install -y chromium" in result.stderr
        return
    log = tmp_path / "apt.log"
    fake = tmp_path / "apt-get"
    fake.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    fake.chmod(0o755)
    result = _prereqs(PORTAL_CHROMIUM=NO_BROWSER, PORTAL_PREREQS_APT_GET=str(fake))
    assert result.returncode == 0, result.stderr
    assert "make test: installing Debian packages chromium (apt-get install)" in result.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "update -qq"
    assert calls[1].startswith("install -y -qq")
    assert calls[1].split()[-1] == "chromium"


def test_the_explicit_opt_out_goes_on_and_says_so() -> None:
    result = _prereqs("--no-install", PORTAL_CHROMIUM=NO_BROWSER, PORTAL_TEST_SKIP_MISSING_TOOLS="1")
    assert result.returncode == 0
    assert "the tests that need chromium will be SKIPPED" in result.stderr


def test_with_every_tool_present_the_check_is_silent() -> None:
    result = _prereqs("--no-install")
    assert (result.returncode, result.stderr) == (0, "")


@pytest.fixture
def browser_test(tmp_path: Path) -> Path:
    """A one-test project that uses the suite's real browser fixture and summary hook."""
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        from tests.browser.conftest import browser, playwright_instance  # noqa: F401
        from tests.tools import pytest_terminal_summary  # noqa: F401
    """))
    (tmp_path / "test_needs_browser.py").write_text("def test_opens(browser):\n    assert browser.is_connected()\n")
    return tmp_path


def _pytest(directory: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider", "-q", str(directory)],
        cwd=directory, capture_output=True, text=True, timeout=120,
        env=_env(PYTHONPATH=str(ROOT), **env),
    )


def test_a_browser_test_without_its_browser_fails_with_the_install_command(browser_test: Path) -> None:
    result = _pytest(browser_test, PORTAL_CHROMIUM=NO_BROWSER)
    assert result.returncode == 1, result.stdout
    assert "1 error" in result.stdout
    assert "skipped" not in result.stdout
    assert f"missing tool: {NO_BROWSER} is not installed. Install it with: sudo apt-get install -y chromium" in (
        result.stdout)


def test_opting_out_skips_and_counts_the_skipped_tests_loudly(browser_test: Path) -> None:
    result = _pytest(browser_test, PORTAL_CHROMIUM=NO_BROWSER, PORTAL_TEST_SKIP_MISSING_TOOLS="1")
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout
    assert "1 TESTS SKIPPED BECAUSE A SYSTEM TOOL IS MISSING" in result.stdout
    assert "test_needs_browser.py::test_opens" in result.stdout


def test_with_the_browser_the_same_test_passes(browser_test: Path) -> None:
    result = _pytest(browser_test)
    assert result.returncode == 0, result.stdout
    assert "1 passed" in result.stdout
    assert "SKIPPED" not in result.stdout
