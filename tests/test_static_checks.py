"""Static checks that are part of the test suite, so CI fails on them like on any test: the
package boundaries (import-linter, contracts in pyproject.toml) and the types of every package
(mypy, strict, configured in pyproject.toml): the plugin API, which ships ``py.typed``, the
host, the built-in plugins, Spark and the load tests."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def package_dirs() -> dict[str, str]:
    """setup.cfg's ``package_dir``: installed name -> directory in this checkout."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    pairs = (line.split("=") for line in setup["options"]["package_dir"].strip().splitlines())
    return {name.strip(): folder.strip() for name, folder in pairs}


PACKAGE_DIRS = package_dirs()


def test_the_package_boundaries_hold() -> None:
    # The interpreter's own environment first: another lint-imports on PATH would analyse
    # whatever checkout its environment has installed.
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    lint_imports = lint_imports or shutil.which("lint-imports")
    assert lint_imports is not None, "import-linter is installed by the 'test' extra"
    result = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout, result.stdout


MYPY_STATE = ROOT / ".mypy_cache" / "suite"
"""mypy's incremental cache and the directory of package links, kept between runs (ignored
by git): a run after a change re-checks what the change affects, not all five packages.
The links' paths must not change between runs, or every cached module would be stale."""


def _link(link: Path, target: Path) -> None:
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    link.unlink(missing_ok=True)
    link.symlink_to(target, target_is_directory=True)


def test_every_package_type_checks_strictly() -> None:
    # mypy cannot see through the editable install's import hook, and most directories are
    # not named after their package: a directory of links under the installed names lets it
    # find each package and follow the imports between them.
    assert set(PACKAGE_DIRS) >= {"aviso_plugins", "aviso_host", "aviso_builtins"}
    links = MYPY_STATE / "packages"
    links.mkdir(parents=True, exist_ok=True)
    targets: list[str] = []
    for package, directory in sorted(PACKAGE_DIRS.items()):
        targets += ["-p", package]
        if package != directory:
            _link(links / package, ROOT / directory)
    env = {**os.environ, "MYPYPATH": str(links)}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(MYPY_STATE / "cache"), *targets],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
