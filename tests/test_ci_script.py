"""``.ci/run`` runs the README's test command (the fast tier), then the heavy tier, so CI runs
every test not marked ``slow``; its exit status is non-zero when either tier fails.

The script runs for real, with ``pip`` and ``python`` on its ``PATH`` replaced by recorders
that exit with the status a case asks for (nothing is installed, no test runs).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CI_RUN = ROOT / ".ci" / "run"
RECORDER = """#!/bin/sh
echo "$(basename "$0") $*${PYTEST_ADDOPTS:+ | $PYTEST_ADDOPTS}" >> "$CALLS"
case "$(basename "$0") $*" in
    pip*) exit "${PIP_EXIT:-0}" ;;
    *"not heavy"*) exit "${FAST_EXIT:-0}" ;;
    *) exit "${HEAVY_EXIT:-0}" ;;
esac
"""


def readme_test_command() -> str:
    (line,) = [
        line.strip()
        for line in (ROOT / "README.md").read_text().splitlines()[:12]
        if line.strip().startswith("pip install -e '.[test]' && python -m pytest")
    ]
    return line


def marker_expression(command: str) -> str:
    (expression,) = re.findall(r'-m "([^"]+)"', command)
    return expression


def selects(expression: str, **markers: bool) -> bool:
    # The tiers' expressions use only marker names, "and", "or", "not" and parentheses,
    # which read the same in Python.
    assert re.fullmatch(r"[a-z_ ()]+", expression), expression
    return bool(eval(expression, {"__builtins__": {}}, markers))


def run_ci(tmp_path: Path, *args: str, **exits: int) -> tuple[int, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("pip", "python"):
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls"
    calls.unlink(missing_ok=True)
    env = {
        "PATH": os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"]),
        "CALLS": str(calls),
        **{f"{name.upper()}_EXIT": str(code) for name, code in exits.items()},
    }
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, str(CI_RUN), *args], env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode, calls.read_text().splitlines()


def test_the_readme_command_is_what_ci_runs_first() -> None:
    command = readme_test_command()
    lines = [line.strip() for line in CI_RUN.read_text().splitlines()]
    (first,) = [line for line in lines if line.startswith(command)]
    assert first == f"{command} || fast=$?"
    assert "-n logical" in command  # the fast tier runs in parallel


def test_the_two_tiers_together_run_every_test_not_marked_slow() -> None:
    fast = marker_expression(readme_test_command())
    (heavy_line,) = [
        line for line in CI_RUN.read_text().splitlines() if line.startswith("python -m pytest")
    ]
    heavy = marker_expression(heavy_line)
    for slow, heavy_mark, install in itertools.product([False, True], repeat=3):
        markers = {"slow": slow, "heavy": heavy_mark, "install": install}
        runs = selects(fast, **markers) + selects(heavy, **markers)
        assert runs == (0 if slow else 1), markers


def test_both_tiers_run_in_order_and_a_clean_run_exits_0(tmp_path: Path) -> None:
    status, calls = run_ci(tmp_path)
    assert status == 0
    assert [call.split()[0] for call in calls] == ["pip", "python", "python"]
    assert "not heavy" in calls[1] and "not heavy" not in calls[2]


@pytest.mark.parametrize(
    ("exits", "expected"),
    [
        ({"fast": 1}, 1),
        ({"heavy": 1}, 1),
        ({"fast": 1, "heavy": 2}, 1),
        ({"pip": 1}, 1),
        ({"fast": 5}, 5),  # the whole suite's fast tier collected nothing: broken
        ({"heavy": 5}, 5),
    ],
)
def test_a_failing_tier_fails_ci_and_the_other_still_runs(
    tmp_path: Path, exits: dict[str, int], expected: int
) -> None:
    status, calls = run_ci(tmp_path, **exits)
    assert status == expected
    assert sum(call.startswith("python -m pytest") for call in calls) == 1 + ("pip" not in exits)


@pytest.mark.parametrize(
    ("exits", "expected"),
    [({"fast": 5}, 0), ({"heavy": 5}, 0), ({"fast": 5, "heavy": 5}, 5), ({"heavy": 1}, 1)],
)
def test_a_selection_may_leave_one_tier_empty_but_not_both(
    tmp_path: Path, exits: dict[str, int], expected: int
) -> None:
    status, calls = run_ci(tmp_path, "tests/spark", **exits)
    assert status == expected
    assert all(call.endswith("tests/spark") for call in calls if call.startswith("python"))


def test_the_heavy_tier_is_the_readmes_heavy_command() -> None:
    (heavy_line,) = [
        line for line in CI_RUN.read_text().splitlines() if line.startswith("python -m pytest")
    ]
    command = heavy_line.removesuffix(" || heavy=$?")
    assert command != heavy_line
    assert f"`{command}`" in (ROOT / "README.md").read_text()


def test_arguments_reach_pytest_as_given(tmp_path: Path) -> None:
    status, calls = run_ci(tmp_path, "tests/spark", "-k", "read and not stream")
    assert status == 0
    runs = [call for call in calls if call.startswith("python")]
    assert len(runs) == 2
    for run in runs:
        # The recorder writes PYTEST_ADDOPTS after " | "; pytest splits it as shlex does.
        addopts = run.split(" | ", 1)[1]
        assert shlex.split(addopts) == ["tests/spark", "-k", "read and not stream"]
