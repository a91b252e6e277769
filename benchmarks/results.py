"""Raw benchmark figures as JSON under ``benchmarks/results/``, so a second reader can
re-check what docs/performance.md quotes: every round of every point, the medians and spreads
computed from them, and the machine they ran on.

  path = write_results("notify_path", rounds, {"ratio": 0.93})

It also holds what the benchmarks that compare several things round by round share: the
``--rounds``/``--results-dir`` options, the rotated order, the ratios' spread and the load
average as printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RESULTS_DIR_VARIABLE = "AVISO_BENCHMARK_RESULTS"
"""Names another folder for the results (the benchmarks' smoke tests write to a temporary one)."""
PACKAGES = ("aviso-py", "uvicorn", "starlette", "uvloop", "httptools", "nats-py", "pyspark")


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, lowest and highest of one point's rounds."""
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "rounds": len(values),
    }


def ratio_spread(mine: Sequence[float], theirs: Sequence[float]) -> dict[str, float]:
    """The spread of ``mine / theirs``, round by round (each round's two figures together)."""
    return spread([one / other for one, other in zip(mine, theirs, strict=True)])


def rotated(names: Sequence[str], round_number: int) -> list[str]:
    """The order of round ``round_number`` (from 0): each round starts one name further on, so
    that no name is always measured first, on a machine still settling, or always last."""
    shift = round_number % len(names)
    return [*names[shift:], *names[:shift]]


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as the benchmarks print them."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def add_round_options(parser: argparse.ArgumentParser, rounds: int, order: str) -> None:
    """``--rounds`` (default ``rounds``; ``order``: how the things compared take turns) and
    ``--results-dir``; :func:`parse_rounds` refuses fewer than three rounds."""
    parser.add_argument("--rounds", type=int, default=rounds, help=f"{order} rounds (3 or more)")
    parser.add_argument(
        "--results-dir",
        type=Path,
        help=f"where the raw rounds are written (default: ${RESULTS_DIR_VARIABLE} or "
        "benchmarks/results)",
    )


def parse_rounds(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser``'s arguments; fewer than three rounds is a usage error (exit status 2): a
    median and a spread need three."""
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds: at least 3, for a median and a spread")
    return args


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "system": platform.platform(),
        "python": sys.version.split()[0],
        "load_average": os.getloadavg(),
        "packages": _versions(PACKAGES),
    }


def _versions(names: Iterable[str]) -> dict[str, str]:
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def write_results(
    benchmark: str,
    rounds: Sequence[Mapping[str, Any]],
    summary: Mapping[str, Any],
    directory: Path | None = None,
) -> Path:
    """Write one run's rounds and summary into ``directory`` (default: ``$AVISO_BENCHMARK_RESULTS``
    or ``benchmarks/results``); returns the file, named by benchmark and UTC time."""
    if directory is None:
        directory = Path(os.environ.get(RESULTS_DIR_VARIABLE) or RESULTS_DIR)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = directory / f"{benchmark}-{stamp}.json"
    document = {
        "benchmark": benchmark,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "measured_at": stamp,
        "machine": machine(),
        "rounds": list(rounds),
        "summary": dict(summary),
    }
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return path
