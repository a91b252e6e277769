"""Static checks that are part of the test suite, so CI fails on them like on any test: the
package boundaries (import-linter, contracts in pyproject.toml) and the types of the plugin API
(mypy, strict, over ``aviso_plugins``, which ships ``py.typed``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Installed name -> directory in this checkout (setup.cfg's package_dir).
PACKAGE_DIRS = {"aviso_host": "host"}
MYPY_TARGET = ("-p", "aviso_plugins")


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


def test_the_plugin_api_type_checks(tmp_path: Path) -> None:
    # mypy cannot see through the editable install's import hook, and the host's directory is
    # not named after its package: a directory of links under the installed names lets it
    # follow the testing kit's imports into the host.
    for package, directory in PACKAGE_DIRS.items():
        (tmp_path / package).symlink_to(ROOT / directory, target_is_directory=True)
    env = {**os.environ, "MYPYPATH": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), *MYPY_TARGET],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
