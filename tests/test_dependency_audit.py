"""scripts/dependency_audit.py without the internet: the pins it exports, the NOT RUN path when the advisory service
cannot be reached (or does not answer like OSV), and findings reported by a local stand-in for OSV's API that
pip-audit itself queries (`--osv-url`). The audit must never report a pass for something it did not check."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.slow  # runs the audit script in subprocesses

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "dependency_audit.py"
_spec = importlib.util.spec_from_file_location("dependency_audit", SCRIPT)
assert _spec is not None
assert _spec.loader is not None
audit = importlib.util.module_from_spec(_spec)
sys.modules["dependency_audit"] = audit
_spec.loader.exec_module(audit)

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DECLARED = [*PYPROJECT["dependencies"], *PYPROJECT["optional-dependencies"]["dev"]]
FAKE_ID = "GHSA-fake-0000-0001"


def _advisory(vuln_id: str, package: str, fixed: str, aliases: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"id": vuln_id, "aliases": list(aliases), "summary": f"test advisory for {package}",
            "affected": [{"package": {"name": package, "ecosystem": "PyPI"},
                          "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}]}]}


class FakeOsv(ThreadingHTTPServer):
    """POST /v1/query as api.osv.dev answers it: {"vulns": [...]} for an affected package version, {} otherwise."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _OsvHandler)
        self.advisories: dict[tuple[str, str], list[dict[str, Any]]] = {
            audit.CANARY: [_advisory("PYSEC-2019-0001", "django", "1.11.19", ("CVE-2019-6975",))]}
        self.failing: set[str] = set()  # package names answered with HTTP 500
        self.queries: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1/query"


class _OsvHandler(BaseHTTPRequestHandler):
    server: FakeOsv

    def do_POST(self) -> None:
        query = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        key = (query["package"]["name"], query["version"])
        self.server.queries.append(key)
        if self.path != "/v1/query" or key[0] in self.server.failing:
            self.send_error(500 if self.path == "/v1/query" else 404)
            return
        vulns = self.server.advisories.get(key)
        body = json.dumps({"vulns": vulns} if vulns else {}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def osv() -> Iterator[FakeOsv]:
    server = FakeOsv()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def run_script(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    env.pop("DEPENDENCY_AUDIT_OSV_URL", None)
    return subprocess.run([sys.executable, str(SCRIPT), "--cache-dir", str(tmp_path / "cache"),
                           "--ignore-file", str(tmp_path / "no-ignore-file"), *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)


# ------------------------------------------------------------------------------------------------ the pins


def test_every_declared_dependency_is_exported_with_its_exact_pin(tmp_path: Path) -> None:
    out = tmp_path / "requirements.txt"
    assert audit.main(["--export-only", "--requirements-out", str(out), "--ignore-file", str(tmp_path / "x")]) == 0
    exported = {canonicalize_name(r.name): r for r in map(Requirement, out.read_text().splitlines())}
    assert len(exported) == len(DECLARED)
    for line in DECLARED:
        declared = Requirement(line)
        pin = exported[canonicalize_name(declared.name)]
        assert [(s.operator, s.version) for s in pin.specifier] == [("==", next(iter(declared.specifier)).version)]
        assert pin.extras == declared.extras
    assert "pip-audit" in exported  # the auditor is a pinned dev dependency, installed by `make venv`


@pytest.mark.parametrize("bad", ["Django>=5.2", "Django~=5.2.0", "Django", "Django==5.*", "Django==5.2.19,<6",
                                 "Django @ https://example.com/Django-5.2.19.tar.gz", "Django==5.2.19; Django"])
def test_a_dependency_not_pinned_exactly_stops_the_audit(tmp_path: Path, bad: str, capsys) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[project]\nname = 'x'\ndependencies = ['PyYAML==6.0.4', " + json.dumps(bad) + "]\n"
        "[project.optional-dependencies]\ndev = ['pytest==9.2.0']\n")
    out = tmp_path / "requirements.txt"
    code = audit.main(["--pyproject", str(pyproject), "--requirements-out", str(out), "--ignore-file",
                       str(tmp_path / "x")])
    assert code == audit.EXIT_INPUT
    output = capsys.readouterr().out
    assert "dependency audit ERROR" in output
    assert repr(bad) in output
    assert "passed" not in output
    assert not out.exists()


def test_installed_adds_the_transitive_dependencies_but_not_the_project(tmp_path: Path) -> None:
    out = tmp_path / "requirements.txt"
    assert audit.main(["--export-only", "--installed", "--requirements-out", str(out),
                       "--ignore-file", str(tmp_path / "x")]) == 0
    names = [canonicalize_name(Requirement(line).name) for line in out.read_text().splitlines()]
    assert len(names) == len(set(names))
    assert {"asgiref", "urllib3", "packaging"} <= set(names)  # Django's, requests' and pip-audit's dependencies
    assert "accelerator-portal" not in names
    assert all("==" in line for line in out.read_text().splitlines())


def test_ignore_file_needs_a_reason_per_entry(tmp_path: Path) -> None:
    ignore = tmp_path / "audit-ignore.txt"
    ignore.write_text("# header\n\nGHSA-aaaa-bbbb-cccc  # not reachable: we never parse untrusted YAML tags\n")
    assert audit.read_ignores(ignore) == {"GHSA-aaaa-bbbb-cccc": "not reachable: we never parse untrusted YAML tags"}
    ignore.write_text("GHSA-aaaa-bbbb-cccc\n")
    with pytest.raises(audit.AuditInputError, match="needs a reason"):
        audit.read_ignores(ignore)
    ignore.write_text("GHSA-aaaa-bbbb-cccc   #   \n")
    with pytest.raises(audit.AuditInputError, match="needs a reason"):
        audit.read_ignores(ignore)
    assert audit.read_ignores(tmp_path / "absent.txt") == {}


# ---------------------------------------------------------------------------------- unreachable: NOT RUN


def test_unreachable_service_is_not_run_not_passed(tmp_path: Path) -> None:
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/v1/query"
        result = run_script("--osv-url", url, "--probe-timeout", "2", tmp_path=tmp_path)
    assert result.returncode == audit.EXIT_NOT_RUN == 3, result.stdout + result.stderr
    assert "dependency audit NOT RUN: advisory service unreachable" in result.stdout
    assert "passed" not in result.stdout
    assert "No known vulnerabilities" not in result.stdout + result.stderr  # pip-audit never ran


def test_a_service_that_answers_without_advisories_is_not_trusted(osv: FakeOsv, tmp_path: Path) -> None:
    osv.advisories.clear()  # e.g. a proxy answering 200 {} to everything: would look like "no vulnerabilities"
    result = run_script("--osv-url", osv.url, tmp_path=tmp_path)
    assert result.returncode == audit.EXIT_NOT_RUN, result.stdout + result.stderr
    assert "NOT RUN" in result.stdout
    assert "canary" in result.stdout
    assert osv.queries == [audit.CANARY]  # pip-audit was not started


# --------------------------------------------------------------------- pip-audit against a local OSV


def test_clean_pins_pass_and_every_pin_was_queried(osv: FakeOsv, tmp_path: Path) -> None:
    result = run_script("--osv-url", osv.url, tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"dependency audit passed: {len(DECLARED)} packages audited against OSV" in result.stdout
    queried = {name for name, _ in osv.queries[1:]}
    assert queried == {canonicalize_name(Requirement(line).name) for line in DECLARED}


def test_a_known_vulnerability_fails(osv: FakeOsv, tmp_path: Path) -> None:
    osv.advisories[("pyyaml", "6.0.4")] = [_advisory(FAKE_ID, "pyyaml", "6.0.5", ("CVE-2099-0001",))]
    result = run_script("--osv-url", osv.url, tmp_path=tmp_path)
    assert result.returncode == audit.EXIT_FINDINGS, result.stdout + result.stderr
    assert "dependency audit FAILED: 1 known vulnerability" in result.stdout
    # pip-audit makes a CVE or PYSEC id the primary one, the others aliases.
    assert f"pyyaml 6.0.4: CVE-2099-0001 / {FAKE_ID} (fixed in: 6.0.5) — test advisory for pyyaml" in result.stdout
    assert "passed" not in result.stdout


def test_an_ignored_vulnerability_passes_with_its_reason(osv: FakeOsv, tmp_path: Path) -> None:
    osv.advisories[("pyyaml", "6.0.4")] = [_advisory(FAKE_ID, "pyyaml", "6.0.5", ("CVE-2099-0001",))]
    ignore = tmp_path / "audit-ignore.txt"
    ignore.write_text("CVE-2099-0001  # only yaml.safe_load is used\nGHSA-gone-0000-0000  # fixed long ago\n")
    result = run_script("--osv-url", osv.url, "--ignore-file", str(ignore), tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no known vulnerabilities (1 ignored)" in result.stdout
    assert "ignored: only yaml.safe_load is used" in result.stdout
    assert "stale ignore (matches nothing any more, remove it): GHSA-gone-0000-0000" in result.stdout


def test_a_service_failing_during_the_audit_fails(osv: FakeOsv, tmp_path: Path) -> None:
    osv.failing.add("kombu")
    result = run_script("--osv-url", osv.url, tmp_path=tmp_path)
    assert result.returncode == audit.EXIT_FINDINGS, result.stdout + result.stderr
    assert "dependency audit FAILED" in result.stdout
    assert "passed" not in result.stdout


# ------------------------------------------------------------------------------- the decision itself


def _report(*deps: dict[str, Any]) -> dict[str, Any]:
    return {"dependencies": list(deps), "fixes": []}


CLEAN = {"name": "pyyaml", "version": "6.0.4", "vulns": []}


@pytest.mark.parametrize(("returncode", "report", "reason"), [
    (0, None, "no report"),
    (1, None, "no report"),
    (0, {"unexpected": True}, "no report"),
    (0, _report(), "audited nothing"),
    (0, _report(CLEAN), "django: missing from pip-audit's report"),
    (0, _report(CLEAN, {"name": "django", "skip_reason": "could not deduce package version"}), "not every pinned"),
    (1, _report(CLEAN, {"name": "django", "version": "5.2.19", "vulns": []}), "exited 1 without a finding"),
    (2, _report(CLEAN, {"name": "django", "version": "5.2.19", "vulns": []}), "exited 2"),
    (1, _report(CLEAN, {"name": "Django", "version": "5.2.19", "vulns": [{"id": "PYSEC-1", "fix_versions": []}]}),
     "django 5.2.19: PYSEC-1 (fixed in: no fixed version)"),
])
def test_decide_never_passes_what_it_did_not_check(returncode: int, report: dict[str, Any] | None,
                                                   reason: str) -> None:
    verdict = audit.decide(returncode, report, {"pyyaml", "django"}, {})
    assert verdict.code == audit.EXIT_FINDINGS
    assert reason in "\n".join(verdict.lines)
    assert not any("passed" in line for line in verdict.lines)


def test_decide_passes_a_complete_clean_report() -> None:
    verdict = audit.decide(0, _report(CLEAN, {"name": "django", "version": "5.2.19", "vulns": []}),
                           {"pyyaml", "django"}, {})
    assert verdict.code == 0
    assert verdict.lines[0].startswith("dependency audit passed: 2 packages")
