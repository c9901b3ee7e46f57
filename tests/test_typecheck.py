"""Type checking holds: the strict set is clean, the guard can fail, and the baseline only shrinks.

`make typecheck` (part of `make test`) runs mypy on the tree. These tests show that configuration is a real guard: an
error planted in a strict module, or in a checked module outside the baseline, fails mypy; the same error in a
baseline module does not (that is what the baseline means, which is why it may only shrink).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "portal", "audit", "apitokens", "inventory", "catalog", "integrations", "kubesim")
BASELINE_SIZE_WHEN_INTRODUCED = 46  # lower this number whenever a module leaves the baseline; never raise it


def _overrides() -> tuple[list[str], list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    strict = next(o["module"] for o in config["overrides"] if o.get("strict"))
    baseline = next(o["module"] for o in config["overrides"] if o.get("ignore_errors"))
    return strict, baseline


def test_the_baseline_only_shrinks_and_never_covers_the_strict_set() -> None:
    strict, baseline = _overrides()
    assert len(baseline) <= BASELINE_SIZE_WHEN_INTRODUCED, "the mypy baseline grew: fix the new errors instead"
    prefixes = tuple(s.removesuffix("*") for s in strict)
    assert not [m for m in baseline if m in strict or m.startswith(prefixes)], "a strict module is in the baseline"
    for required in ("inventory.services.*", "inventory.k8s.*", "catalog.feasibility.*", "catalog.cel",
                     "inventory.selectors", "catalog.selectors", "catalog.services.*"):
        assert required in strict


@pytest.mark.slow
def test_planted_type_errors_fail_mypy_except_in_the_baseline(tmp_path: Path) -> None:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "templates",
                                                                                          "static", "fixtures"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    # django-stubs loads portal.settings.test, whose database ENGINE is the tests' own backend
    shutil.copytree(ROOT / "tests" / "postgresql", tmp_path / "tests" / "postgresql",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "tests" / "__init__.py", tmp_path / "tests" / "__init__.py")
    _, baseline = _overrides()
    planted = {
        "inventory/k8s/semantics/values.py": "def planted_untyped(x):\n    return x\n",  # strict: needs annotations
        "inventory/selectors.py": "def planted_strict() -> int:\n    return 'not an int'\n",
        "inventory/leases.py": "def planted_checked() -> int:\n    return 'not an int'\n",  # checked, not strict
        baseline[0].replace(".", "/") + ".py": "def planted_in_baseline() -> int:\n    return 'not an int'\n",
    }
    for path, code in planted.items():
        target = tmp_path / path
        target.write_text(target.read_text(encoding="utf-8") + "\n\n" + code, encoding="utf-8")
    if (ROOT / ".mypy_cache").is_dir():  # `make typecheck` ran first: start warm, so only the planted files and what
        # depends on them are checked again (mypy revalidates every cached module against its source's size and hash)
        shutil.copytree(ROOT / ".mypy_cache", tmp_path / ".mypy_cache")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "DJANGO_SECRET_KEY": "typecheck",
           "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal")}
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / ".mypy_cache")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    reported = {line.split(":")[0] for line in result.stdout.splitlines() if ": error:" in line}
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    assert reported == set(list(planted)[:3]), result.stdout[-3000:]
