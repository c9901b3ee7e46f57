"""Dependency audit: the exact pins of pyproject.toml (runtime and dev) against the OSV advisory database.

    python scripts/dependency_audit.py [--installed] [--osv-url URL] [--ignore-file audit-ignore.txt]

1. Exports every dependency of [project].dependencies and [project.optional-dependencies].dev to a requirements
   file; each must be pinned with `==` (anything else stops the audit: an unpinned dependency cannot be audited).
   `--installed` adds every other distribution installed beside this interpreter (the transitive dependencies, as
   the virtualenv resolved them).
2. Asks the advisory service whether it answers like OSV: a known-vulnerable canary must come back with
   advisories. A service that cannot be reached, or answers without them (a captive proxy, a stub), means nothing
   can be checked.
3. Runs pip-audit against OSV (`--strict --no-deps --disable-pip`: the pins as they are, no resolution, no PyPI) and
   checks that every exported package was audited.

Never pip-audit's default "pypi" service: it reads https://pypi.org/pypi/<name>/<version>/json, and a proxy that
answers 404 there turns every package into "not found", reported as "no known vulnerabilities".

Exit codes: 0 every package audited, no known vulnerability (or only ignored ones); 1 findings, or the audit itself
failed; 2 bad input (a dependency not pinned with ==, a malformed ignore file, pip-audit missing); 3 NOT RUN, the
advisory service is unreachable — nothing was checked, and nothing is reported as passed.

audit-ignore.txt (optional): one vulnerability id (or alias) per line followed by a mandatory reason comment,
`GHSA-xxxx-xxxx-xxxx  # why it does not apply here`. Ignored findings are listed, ids that no longer match are
reported as stale.

Needs no Django: the standard library, `packaging` and pip-audit (dev dependencies).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OSV_URL = "https://api.osv.dev/v1/query"  # the endpoint pip-audit's OSV service posts each package to
# Django 1.11 has published advisories (e.g. CVE-2019-6975); a service reporting none for it is not a working OSV.
CANARY = ("django", "1.11")
GROUPS = ("dev",)  # optional-dependency groups audited with [project].dependencies

EXIT_OK, EXIT_FINDINGS, EXIT_INPUT, EXIT_NOT_RUN = 0, 1, 2, 3
NOT_RUN = "dependency audit NOT RUN: advisory service unreachable"


class AuditInputError(Exception):
    """The audit's input is unusable: a dependency not pinned exactly, a malformed ignore file."""


# ------------------------------------------------------------------------------------------------------- pins


def load_pins(pyproject: Path, groups: tuple[str, ...] = GROUPS) -> list[Requirement]:
    """Every requirement of [project].dependencies and the given optional groups; all must be `name==version`."""
    project = tomllib.loads(pyproject.read_text())["project"]
    lines = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for group in groups:
        if group not in optional:
            raise AuditInputError(f"{pyproject}: no optional-dependency group {group!r}")
        lines.extend(optional[group])
    pins, problems, seen = [], [], set()
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as error:
            problems.append(f"{line!r}: {error}")
            continue
        specifiers = list(requirement.specifier)
        if (requirement.url or len(specifiers) != 1 or specifiers[0].operator != "=="
                or specifiers[0].version.endswith(".*")):
            problems.append(f"{line!r} is not pinned exactly (name==version)")
            continue
        if canonicalize_name(requirement.name) in seen:
            problems.append(f"{line!r}: listed twice")
            continue
        seen.add(canonicalize_name(requirement.name))
        pins.append(requirement)
    if problems:
        raise AuditInputError(f"{pyproject}: cannot audit dependencies that are not pinned: " + "; ".join(problems))
    return pins


def installed_pins(pinned: list[Requirement], exclude: set[str]) -> list[Requirement]:
    """Every distribution installed beside this interpreter that is not pinned already (the transitive
    dependencies, at the versions this environment resolved), except the names in `exclude` (the project)."""
    known = {canonicalize_name(r.name) for r in pinned} | {canonicalize_name(n) for n in exclude}
    found: dict[str, Requirement] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name or canonicalize_name(name) in known or canonicalize_name(name) in found:
            continue
        found[canonicalize_name(name)] = Requirement(f"{canonicalize_name(name)}=={dist.version}")
    return [found[key] for key in sorted(found)]


def requirements_text(pins: list[Requirement]) -> str:
    return "".join(f"{pin}\n" for pin in pins)


# ------------------------------------------------------------------------------------------------ ignore file


def read_ignores(path: Path | None) -> dict[str, str]:
    """{vulnerability id: reason} from the ignore file; a missing file ignores nothing. Every entry needs a reason."""
    if path is None or not path.exists():
        return {}
    ignores: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        vuln_id, _, reason = line.partition("#")
        vuln_id, reason = vuln_id.strip(), reason.strip()
        if not reason:
            raise AuditInputError(f"{path}:{number}: {vuln_id!r} needs a reason (`ID  # why it does not apply`)")
        if len(vuln_id.split()) != 1:
            raise AuditInputError(f"{path}:{number}: one vulnerability id per line, got {vuln_id!r}")
        ignores[vuln_id] = reason
    return ignores


# ------------------------------------------------------------------------------------------------------ probe


def probe(osv_url: str, timeout: float) -> str | None:
    """None when `osv_url` answers like OSV (advisories for the canary); otherwise why it cannot be used."""
    if not osv_url.startswith(("https://", "http://")):
        return "not an http(s) URL"
    body = json.dumps({"package": {"name": CANARY[0], "ecosystem": "PyPI"}, "version": CANARY[1]}).encode()
    request = urllib.request.Request(osv_url, data=body, method="POST",  # noqa: S310 - scheme checked above
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - scheme checked above
            answer = json.loads(response.read())
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code} {error.reason}"
    except urllib.error.URLError as error:
        return str(error.reason)
    except (OSError, TimeoutError) as error:  # timeouts and resets while reading
        return str(error) or type(error).__name__
    except ValueError:
        return "the answer is not JSON"
    if not isinstance(answer, dict) or not answer.get("vulns"):
        return (f"it answered, but with no advisory for the canary {CANARY[0]}=={CANARY[1]}, which has some: "
                "not a working OSV endpoint")
    return None


# -------------------------------------------------------------------------------------------------- pip-audit


def run_pip_audit(requirements: Path, osv_url: str, timeout: float,
                  cache_dir: Path | None = None) -> tuple[int, dict[str, Any] | None, str]:
    """pip-audit on the exported pins against OSV: (exit code, its JSON report or None, its stderr)."""
    with tempfile.TemporaryDirectory(prefix="dependency-audit-") as tmp:
        report_path = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "pip_audit", "--vulnerability-service", "osv", "--osv-url", osv_url,
                   "--strict", "--requirement", str(requirements), "--no-deps", "--disable-pip",
                   "--format", "json", "--desc", "on", "--aliases", "on", "--output", str(report_path),
                   "--progress-spinner", "off", "--timeout", str(int(max(timeout, 1)))]
        if cache_dir is not None:
            command += ["--cache-dir", str(cache_dir)]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=max(600.0, timeout * 50))
        except subprocess.TimeoutExpired as error:
            return -1, None, f"pip-audit timed out after {error.timeout:.0f} s"
        report = None
        if report_path.exists():
            try:
                report = json.loads(report_path.read_text())
            except ValueError:
                report = None
        return result.returncode, report, result.stderr


@dataclass
class Verdict:
    code: int
    lines: list[str]


def decide(returncode: int, report: dict[str, Any] | None, expected: set[str], ignores: dict[str, str],
           stderr: str = "") -> Verdict:
    """Whether the audit passed, from pip-audit's exit code and JSON report. It passes only when every expected
    package was audited and every finding is ignored; anything unexpected fails (never a pass by default)."""
    tail = "\n".join(f"  | {line}" for line in stderr.strip().splitlines()[-15:])
    if not isinstance(report, dict) or not isinstance(report.get("dependencies"), list):
        return Verdict(EXIT_FINDINGS, [f"dependency audit FAILED: pip-audit produced no report (exit {returncode})",
                                       *([tail] if tail else [])])
    findings, ignored, skipped, audited = [], [], [], set()
    used_ignores: set[str] = set()
    for dep in report["dependencies"]:
        name = canonicalize_name(str(dep.get("name", "?")))
        if "skip_reason" in dep:
            skipped.append(f"  {name}: {dep['skip_reason']}")
            continue
        audited.add(name)
        for vuln in dep.get("vulns", []):
            ids = [vuln["id"], *sorted(vuln.get("aliases", []))]
            matched = [i for i in ids if i in ignores]
            fixed = ", ".join(vuln.get("fix_versions", [])) or "no fixed version"
            line = f"  {name} {dep.get('version', '?')}: {' / '.join(ids)} (fixed in: {fixed})"
            if matched:
                used_ignores.update(matched)
                ignored.append(f"{line}, ignored: {ignores[matched[0]]}")
            else:
                description = " ".join(str(vuln.get("description") or "").split())
                findings.append(line + (f" — {description[:160]}" if description else ""))
    missing = sorted(expected - audited)
    stale = sorted(set(ignores) - used_ignores)
    problems: list[str] = []
    if findings:
        plural = "y" if len(findings) == 1 else "ies"
        problems.append(f"dependency audit FAILED: {len(findings)} known vulnerabilit{plural} "
                        f"({len(audited)} packages audited against OSV)")
        problems += findings
        problems.append("Upgrade the pin, or accept a finding in audit-ignore.txt: `ID  # why it does not apply`.")
    if not audited:
        problems.append("dependency audit FAILED: pip-audit audited nothing")
    if skipped or missing:
        problems.append("dependency audit FAILED: not every pinned package was audited")
        problems += skipped + [f"  {name}: missing from pip-audit's report" for name in missing]
    # pip-audit exits 1 when it found something (ignored findings included: the ignore list is applied here).
    if not problems and not (returncode == 0 or (returncode == 1 and ignored)):
        problems.append(f"dependency audit FAILED: pip-audit exited {returncode} without a finding to explain it")
        if tail:
            problems.append(tail)
    ignored_lines = [f"ignored ({len(ignored)}):", *ignored] if ignored else []
    if problems:
        return Verdict(EXIT_FINDINGS, problems + ignored_lines)
    return Verdict(EXIT_OK, [
        f"dependency audit passed: {len(audited)} packages audited against OSV, no known vulnerabilities"
        + (f" ({len(ignored)} ignored)" if ignored else ""),
        *ignored,
        *(f"  stale ignore (matches nothing any more, remove it): {vuln_id}" for vuln_id in stale),
    ])


# ------------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    parser.add_argument("--installed", action="store_true",
                        help="also audit every other distribution installed beside this interpreter (transitive)")
    parser.add_argument("--osv-url", default=os.environ.get("DEPENDENCY_AUDIT_OSV_URL", DEFAULT_OSV_URL))
    parser.add_argument("--probe-timeout", type=float, default=5.0, help="seconds for the reachability probe")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per advisory request of pip-audit")
    parser.add_argument("--ignore-file", type=Path, default=ROOT / "audit-ignore.txt")
    parser.add_argument("--requirements-out", type=Path, help="keep the exported requirements file here")
    parser.add_argument("--export-only", action="store_true", help="write the requirements file and stop")
    parser.add_argument("--cache-dir", type=Path, help="pip-audit's HTTP cache directory")
    args = parser.parse_args(argv)

    try:
        pins = load_pins(args.pyproject)
        ignores = read_ignores(args.ignore_file)
    except AuditInputError as error:
        print(f"dependency audit ERROR: {error}")
        return EXIT_INPUT
    if args.installed:
        project = tomllib.loads(args.pyproject.read_text())["project"]["name"]
        pins += installed_pins(pins, exclude={project})

    with tempfile.TemporaryDirectory(prefix="dependency-audit-") as tmp:
        requirements = args.requirements_out or Path(tmp) / "requirements-audit.txt"
        requirements.write_text(requirements_text(pins))
        print(f"dependency audit: {len(pins)} pinned packages exported to {requirements}")
        if args.export_only:
            return EXIT_OK
        if importlib.util.find_spec("pip_audit") is None:
            print(f"dependency audit ERROR: pip-audit is not installed for {sys.executable} (`make venv`)")
            return EXIT_INPUT
        reason = probe(args.osv_url, args.probe_timeout)
        if reason is not None:
            print(f"{NOT_RUN} ({args.osv_url}: {reason})")
            print("Nothing was checked; this is not a pass.")
            return EXIT_NOT_RUN
        returncode, report, stderr = run_pip_audit(requirements, args.osv_url, args.timeout, args.cache_dir)
    verdict = decide(returncode, report, {canonicalize_name(p.name) for p in pins}, ignores, stderr)
    print("\n".join(verdict.lines))
    return verdict.code


if __name__ == "__main__":
    sys.exit(main())
