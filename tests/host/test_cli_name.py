"""The server's command is ``aviso-server``: ECMWF's client pyaviso installs ``aviso``, and the
two must install side by side."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path


def test_the_distribution_installs_aviso_server_and_no_aviso_script() -> None:
    scripts = {
        entry.name
        for entry in distribution("aviso-py").entry_points
        if entry.group == "console_scripts"
    }
    assert scripts == {"aviso-server"}


def test_the_installed_script_answers_with_its_own_name() -> None:
    # The script installed beside this interpreter (a virtualenv's is not on PATH unless
    # activated).
    beside = Path(sys.executable).with_name("aviso-server")
    script = str(beside) if beside.exists() else shutil.which("aviso-server")
    assert script is not None
    result = subprocess.run(
        [script, "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.startswith("Usage: aviso-server ")
    for command in ("serve", "plugins", "config", "load", "spark"):
        assert f"  {command} " in result.stdout
