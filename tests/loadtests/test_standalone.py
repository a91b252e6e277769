"""The installed load-test package stands alone: a wheel built from this checkout, installed
(not editable) into a fresh virtualenv, runs ``aviso-server load run`` from an unrelated
directory and writes its results there.

The virtualenv sees the packages of the environment running this suite, after its own (for
locust, uvicorn and the rest: nothing is downloaded), whether that environment is a virtualenv
or the base interpreter; the wheel's own copy of aviso-py is what runs, the test checks that.
"""

from __future__ import annotations

import importlib.util
import json
import site
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.wheels import ROOT, build_wheel, run

# Bounded: about 25 s for the whole test (build, install, run) on a loaded 2-core machine.
# Seconds enough for the baseline to make a request on a loaded machine (1 s made none).
SHORT_RUN = ("--duration", "3", "--users", "4", "--baseline-duration", "5")


def test_the_packaged_schemas_are_the_shipped_ones() -> None:
    packaged = yaml.safe_load((ROOT / "loadtests" / "schemas.yaml").read_text())
    shipped = yaml.safe_load((ROOT / "configuration" / "config.yaml").read_text())
    assert packaged == {k: shipped["notification_schema"][k] for k in ("dissemination", "mars")}


def see_this_environment(venv: Path) -> None:
    """Make ``venv`` see this interpreter's site directories after its own.

    ``--system-site-packages`` would show the base interpreter's, which lack the test extra's
    packages when this suite itself runs in a virtualenv. ``site.addsitedir`` (not a plain path
    line) also runs their ``.pth`` files, as a site directory of the base interpreter would.
    """
    (own,) = (venv / "lib").glob("python*/site-packages")
    paths = site.getsitepackages()
    if site.ENABLE_USER_SITE:
        paths.append(site.getusersitepackages())
    lines = [f"import site; site.addsitedir({path!r})\n" for path in paths]
    (own / "running-environment.pth").write_text("".join(lines))


@pytest.mark.install
@pytest.mark.skipif(importlib.util.find_spec("locust") is None, reason="no 'load' extra")
def test_an_installed_wheel_runs_a_load_test_from_any_directory(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    venv = tmp_path / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    made = run(
        [base_python, "-m", "venv", "--without-pip", str(venv)],
        tmp_path,
        120,
    )
    assert made.returncode == 0, made.stderr
    see_this_environment(venv)
    python = venv / "bin" / "python"
    installed = run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        tmp_path,
        180,
    )
    assert installed.returncode == 0, installed.stderr
    where = run(
        [str(python), "-c", "import aviso_loadtests; print(aviso_loadtests.__file__)"], tmp_path, 60
    )
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run(
        [str(venv / "bin" / "aviso-server"), "load", "run", "notify", *SHORT_RUN],
        elsewhere,
        150,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (results,) = (elsewhere / "aviso-load-results").iterdir()
    summary = json.loads((results / "summary.json").read_text())
    assert summary["errors"] == 0 and summary["main_count"] > 0
    assert summary["figures"]["bare Starlette"]["notify"]["count"] > 0
    assert (results / "aviso_stats.csv").exists() and (results / "aviso.log").exists()
