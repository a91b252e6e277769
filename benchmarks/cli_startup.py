"""Wall and CPU time of the quick ``aviso-server`` commands, each a fresh process.

  python -m benchmarks.cli_startup [--runs 5]

Runs ``--version``, ``--help``, ``plugins`` and ``config check`` (in the current directory,
so with the configuration ``serve`` would read there) ``--runs`` times each, in turn, and
prints the median, fastest and slowest of each; every round goes to
``benchmarks/results/cli_startup-*.json``. The CPU time (user + system of the command's
process) is the figure a loaded machine changes least: the wall time there is mostly waiting
for a core. Which modules the quick commands must not import is a test
(tests/host/test_cli_startup.py); this is the figure behind it.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from typing import Any

from benchmarks.results import spread, write_results
from tests.support.process import CLI_TIMEOUT, aviso_command, clean_environment

COMMANDS = (("--version",), ("--help",), ("plugins",), ("config", "check"))


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    rounds: list[dict[str, Any]] = []
    environment = clean_environment()
    for number in range(runs):  # round-robin, so that a burst of load is shared by every command
        for command in COMMANDS:
            cpu, started = _children_cpu(), time.perf_counter()
            subprocess.run(
                aviso_command(*command),
                capture_output=True,
                timeout=CLI_TIMEOUT,
                env=environment,
                check=False,
            )
            rounds.append(
                {
                    "command": " ".join(command),
                    "round": number,
                    "wall_s": time.perf_counter() - started,
                    "cpu_s": _children_cpu() - cpu,
                }
            )
    summary: dict[str, dict[str, dict[str, float]]] = {
        " ".join(command): {
            measure: spread([r[measure] for r in rounds if r["command"] == " ".join(command)])
            for measure in ("wall_s", "cpu_s")
        }
        for command in COMMANDS
    }
    path = write_results("cli_startup", rounds, summary)
    print(f"{runs} runs each, Python {sys.version.split()[0]}; rounds in {path}")
    print(f"{'command':<14} {'wall median':>11} {'min':>6} {'max':>6} {'cpu median':>11}")
    for name, figures in summary.items():
        wall, busy = figures["wall_s"], figures["cpu_s"]
        print(
            f"{name:<14} {wall['median']:>11.3f} {wall['min']:>6.3f} {wall['max']:>6.3f} "
            f"{busy['median']:>11.3f}"
        )


if __name__ == "__main__":
    main()
