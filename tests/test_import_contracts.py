"""The import contracts can fail: each forbidden import, planted in a copy of the tree, breaks the contract named.

A contract that passes whatever is imported is not a contract; .importlinter once looked strict and let all three of
the issue's examples through. Each case below adds one line to a copy of the source and runs lint-imports on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "portal", "audit", "apitokens", "inventory", "catalog", "integrations", "kubesim")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

# (file to plant into, the line, contract that must break). A file that does not exist yet is created: a new module
# is covered by the contracts without anyone remembering to list it.
PLANTED = [
    ("inventory/selectors.py", "from portal.models import Tenant",
     "inventory knows nothing of the portal (tenancy, workflows), the catalog or the integrations"),
    ("inventory/selectors.py", "from portal.models import Tenant",
     "Dependencies point one way: portal (the whole package) -> catalog -> inventory -> audit"),
    ("catalog/selectors.py", "from portal.quota import FIELD_MANAGER",
     "Dependencies point one way: portal (the whole package) -> catalog -> inventory -> audit"),
    ("portal/quota.py", "import kubernetes",
     "Only inventory.k8s imports the kubernetes client (every other module of every app is refused, new ones too)"),
    ("inventory/brand_new_module.py", "import kubernetes",
     "Only inventory.k8s imports the kubernetes client (every other module of every app is refused, new ones too)"),
    ("catalog/models.py", "from catalog.services import offerings",
     "Models import no views, APIs, services or tasks, in every app"),
    ("portal/models.py", "from portal import quota_views",
     "Models import no views, APIs, services or tasks, in every app"),
    ("inventory/k8s/types.py", "from inventory import models",
     "The cluster adapter knows nothing about our models or the upper apps"),
    ("core/errors.py", "from inventory.errors import ClusterError",
     "core is shared glue every app may import; it imports no app of ours"),
    ("core/htmx.py", "import portal", "core is shared glue every app may import; it imports no app of ours"),
    ("kubesim/store.py", "import django", "The simulator is a standalone tool (no Django, no portal code)"),
    ("audit/chain.py", "import inventory", "The audit log depends on no app of ours (everyone may record events)"),
    ("catalog/selectors.py", "import integrations",
     "Nothing imports the integrations app (webhooks): settings and URLs name it by string"),
]


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the source packages and the contracts file."""
    copy = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "migrations", "fixtures", "templates", "static")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, copy / package, ignore=ignore)
    shutil.copy(ROOT / ".importlinter", copy / ".importlinter")
    return copy


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "400"}  # the copy first; wide lines keep names whole
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_copy_is_what_lint_imports_reads_and_it_passes(pristine: Path) -> None:
    result = _lint(pristine)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Analyzed" in result.stdout


@pytest.mark.parametrize(("target", "line", "contract"), PLANTED, ids=[f"{t}:{line}" for t, line, _ in PLANTED])
def test_each_planted_import_breaks_its_contract(pristine: Path, tmp_path: Path, target: str, line: str,
                                                 contract: str) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(pristine, tree)
    path = tree / target
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text(f"{existing}\n{line}  # planted by the test\n", encoding="utf-8")
    result = _lint(tree)
    assert result.returncode != 0, f"lint-imports accepted `{line}` in {target}:\n{result.stdout[-2000:]}"
    assert f"{contract} BROKEN" in result.stdout, result.stdout[-3000:]
