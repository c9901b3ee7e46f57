"""Lint runs in `make test` (not only in `make lint`): the style rules and the complexity ceiling hold in CI, and the
ceiling is shown to fail on a function above it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).with_name("ruff")


def _ceiling() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return int(config["tool"]["ruff"]["lint"]["mccabe"]["max-complexity"])


def test_the_tree_is_lint_clean() -> None:
    result = subprocess.run([str(RUFF), "check", "--output-format", "concise", "."], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]


def _branches(n: int) -> str:
    body = "".join(f"    if x == {i}:\n        y += {i}\n" for i in range(n))
    return f"def planted(x: int) -> int:\n    y = 0\n{body}    return y\n"


def test_a_function_above_the_complexity_ceiling_fails_lint(tmp_path: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    package = tmp_path / "inventory"
    package.mkdir()
    (package / "at_ceiling.py").write_text(_branches(_ceiling() - 1))  # complexity = branches + 1
    ok = subprocess.run([str(RUFF), "check", "--select", "C901", "."], cwd=tmp_path, capture_output=True, text=True,
                        check=False)
    assert ok.returncode == 0, ok.stdout
    (package / "planted.py").write_text(_branches(_ceiling()))
    result = subprocess.run([str(RUFF), "check", "--select", "C901", "--output-format", "concise", "."], cwd=tmp_path,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert f"`planted` is too complex ({_ceiling() + 1} > {_ceiling()})" in result.stdout
