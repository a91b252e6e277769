"""``ruff check`` and ``ruff format --check`` are part of the test suite, so a lint or
formatting failure (Python files and the Python blocks of the docs) fails CI like any test."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command", [("check", "."), ("format", "--check", ".")])
def test_ruff_is_clean(command: tuple[str, ...]) -> None:
    ruff = shutil.which("ruff")
    assert ruff is not None, "ruff is installed by the 'test' extra"
    result = subprocess.run([ruff, *command], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
