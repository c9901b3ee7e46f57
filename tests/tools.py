"""System tools the suite needs beyond the virtualenv (Debian's Chromium, docker-compose, Prometheus, kubectl).

A test that needs a missing tool FAILS with the command that installs it: `make test` installs them first
(scripts/test-prereqs). A developer without them may opt out explicitly with PORTAL_TEST_SKIP_MISSING_TOOLS=1; such
tests are then skipped and counted loudly at the end of the run (tests/conftest.py). CI never sets it.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

SKIP_MISSING_TOOLS = os.environ.get("PORTAL_TEST_SKIP_MISSING_TOOLS") == "1"
SKIP_PREFIX = "missing tool"
CHROMIUM = os.environ.get("PORTAL_CHROMIUM", "/usr/bin/chromium")

INSTALL = {
    "chromium": "sudo apt-get install -y chromium",
    "docker-compose": "sudo apt-get install -y docker-compose",
    "prometheus": "sudo apt-get install -y prometheus",
    "kubectl": "install kubectl as https://kubernetes.io/docs/tasks/tools/ describes",
}


def require_tool(name: str) -> str:
    """The tool's path; fails the test (or, with the explicit opt-out, skips it) when it is not installed."""
    path = CHROMIUM if name == "chromium" else shutil.which(name)
    if path and os.access(path, os.X_OK):
        return path
    where = path or name
    message = f"{SKIP_PREFIX}: {where} is not installed. Install it with: {INSTALL[name]} (`make test` does)"
    if SKIP_MISSING_TOOLS:
        pytest.skip(f"{message}; skipped because PORTAL_TEST_SKIP_MISSING_TOOLS=1")
    pytest.fail(f"{message}, or set PORTAL_TEST_SKIP_MISSING_TOOLS=1 to skip such tests", pytrace=False)
    raise AssertionError("unreachable")  # pragma: no cover - pytest.fail raises


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Tests skipped for a missing system tool (only with PORTAL_TEST_SKIP_MISSING_TOOLS=1) are counted loudly."""
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if SKIP_PREFIX in str(getattr(report, "longrepr", ""))]
    if skipped:
        terminalreporter.write_sep("!", f"{len(skipped)} TESTS SKIPPED BECAUSE A SYSTEM TOOL IS MISSING "
                                        "(PORTAL_TEST_SKIP_MISSING_TOOLS=1); this run is NOT a full pass",
                                   red=True, bold=True)
        for report in skipped[:20]:
            terminalreporter.write_line(f"  {report.nodeid}")


def body(response: Any) -> bytes:
    """A test client response's body, streamed (StreamingHttpResponse: the FOCUS and audit exports) or not."""
    return b"".join(response.streaming_content) if getattr(response, "streaming", False) else response.content
