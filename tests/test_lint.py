"""``ruff check`` is part of the test suite, so a lint failure fails CI like any test."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_is_clean() -> None:
    ruff = shutil.which("ruff")
    assert ruff is not None, "ruff is installed by the 'test' extra"
    result = subprocess.run(
        [ruff, "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
