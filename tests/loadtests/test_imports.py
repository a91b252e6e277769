"""Import boundaries: the host never imports the load tests, only the locust child imports
locust (which monkey-patches the whole process for gevent), and the installed packages
import nothing from the source tree (tests/, benchmarks/) nor Spark from the load tests."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = """
import sys
import aviso_host.cli
assert "aviso_loadtests" not in sys.modules, "aviso_host.cli imported aviso_loadtests"
import aviso_loadtests.cli, aviso_loadtests.report, aviso_loadtests.run, aviso_loadtests.sse
import aviso_loadtests.bare_streams, aviso_loadtests.baselines, aviso_loadtests.identifiers
import aviso_loadtests.servers, aviso_loadtests.bare_app, aviso_loadtests.plugin
import aviso_loadtests.raw_app
leaked = sorted(name for name in ("gevent", "locust", "geventhttpclient") if name in sys.modules)
assert not leaked, leaked
"""


def test_only_the_locust_child_imports_locust() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHECK],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


ROOT = Path(__file__).resolve().parents[2]
# package folder -> top-level modules its code must never import
FORBIDDEN = {
    "loadtests": {"tests", "benchmarks", "aviso_spark"},
    "spark": {"tests", "benchmarks", "aviso_loadtests"},
    "host": {"tests", "benchmarks", "aviso_spark", "aviso_loadtests"},
    "aviso_plugins": {"tests", "benchmarks", "aviso_spark", "aviso_loadtests"},
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_installed_packages_do_not_import_the_source_tree(package: str) -> None:
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for name in imported_modules(path)
        if name.split(".")[0] in FORBIDDEN[package]
    ]
    assert not found
