"""Wall time of the quick ``aviso-server`` commands, each a fresh process.

  python -m benchmarks.cli_startup [--runs 5]

Runs ``--version``, ``--help``, ``plugins`` and ``config check`` (in the current directory,
so with the configuration ``serve`` would read there) ``--runs`` times each, in turn, and
prints the median, fastest and slowest of each. Which modules the quick commands must not
import is a test (tests/host/test_cli_startup.py); this is the figure behind it.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from tests.support.process import CLI_TIMEOUT, aviso_command, clean_environment

COMMANDS = (("--version",), ("--help",), ("plugins",), ("config", "check"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    seconds: dict[tuple[str, ...], list[float]] = {command: [] for command in COMMANDS}
    environment = clean_environment()
    for _ in range(runs):  # round-robin, so that a burst of load is shared by every command
        for command in COMMANDS:
            started = time.perf_counter()
            subprocess.run(
                aviso_command(*command),
                capture_output=True,
                timeout=CLI_TIMEOUT,
                env=environment,
                check=False,
            )
            seconds[command].append(time.perf_counter() - started)
    print(f"{runs} runs each, Python {sys.version.split()[0]}")
    print(f"{'command':<14} {'median s':>9} {'min s':>7} {'max s':>7}")
    for command, times in seconds.items():
        print(
            f"{' '.join(command):<14} {statistics.median(times):>9.3f} "
            f"{min(times):>7.3f} {max(times):>7.3f}"
        )


if __name__ == "__main__":
    main()
