"""aviso-py as a user installs it: a wheel built from this checkout, installed (not editable)
into a fresh virtualenv.

The virtualenv reaches the dependencies already installed for this suite (nothing is
downloaded): it sees the base interpreter's site-packages and, when the suite itself runs in
a virtualenv, that environment's too, after its own; the wheel's copy of aviso-py, installed
in the new environment, comes first.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the wheel is built from: the packages and the metadata, nothing of tests/ or benchmarks/.
SOURCES = ("aviso_plugins", "host", "plugins", "loadtests", "spark")
METADATA = ("setup.cfg", "pyproject.toml", "README.md")
PIP_TIMEOUT = 300.0


def run(
    command: list[str], cwd: Path, timeout: float = PIP_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """``command`` without this suite's ``PYTHONPATH`` (the checkout must not leak in)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def build_wheel(workdir: Path) -> Path:
    """aviso-py's wheel, built from a copy of the sources (no build folder left in the
    checkout); returns its path."""
    source = workdir / "source"
    for name in SOURCES:
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in METADATA:
        shutil.copy(ROOT / name, source / name)
    dist = workdir / "dist"
    built = run(
        [
            sys.executable,
            *("-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"),
            *("-w", str(dist), str(source)),
        ],
        workdir,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("aviso_py-*.whl")
    return wheel


def virtualenv_with(wheel: Path, directory: Path) -> Path:
    """A fresh virtualenv at ``directory`` with ``wheel`` installed; returns its python."""
    base_python = getattr(sys, "_base_executable", sys.executable)
    made = run(
        [base_python, "-m", "venv", "--system-site-packages", "--without-pip", str(directory)],
        directory.parent,
    )
    assert made.returncode == 0, made.stderr
    python = directory / "bin" / "python"
    if sys.prefix != sys.base_prefix:  # this suite runs in a virtualenv: reach its packages
        own = run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], directory)
        (Path(own.stdout.strip()) / "outer-environment.pth").write_text(
            "\n".join(site.getsitepackages()) + "\n"
        )
    installed = pip_install(python, str(wheel), "--no-deps")
    assert installed.returncode == 0, installed.stderr
    where = run([str(python), "-c", "import aviso_host; print(aviso_host.__file__)"], directory)
    assert where.stdout.startswith(str(directory)), where.stdout + where.stderr
    return python


def pip_install(python: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``pip install`` with no package index: only local paths and what is installed."""
    return run(
        [
            str(python),
            *("-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check"),
            *arguments,
        ],
        python.parent,
    )
