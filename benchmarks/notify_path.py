"""What aviso's notify path costs over the framework: server CPU per request, in one run.

  python -m benchmarks.notify_path [--quick] [--requests N] [--rounds R] [--baseline CHECKOUT]
                                   [--results-dir DIR]

Three servers, each a child process on 127.0.0.1:

- notify: ``aviso-server serve`` on the in-memory backend, one process (benchmarks.core's
  configuration: metrics and auth as configured there, logging at ``warn``);
- bare: a bare Starlette JSON POST endpoint (``aviso_loadtests.bare_app``) on stock uvicorn
  (uvicorn's own httptools protocol; access log and proxy headers off, as aviso serves);
- raw: a raw ASGI app parsing the JSON body and answering JSON (``aviso_loadtests.raw_app``),
  served the same way.

Each round posts the same notifications (benchmarks.core's) to every server in turn over 32
keep-alive connections, the order rotating from round to round. The figure is the server
process's CPU time per request (user + system, from the kernel): on a small machine the load
generator shares the server's cores, so requests/s says more about the generator and the
other load than about the server (it is recorded beside, not compared). Medians and spreads
over the rounds, and the ratios notify/bare and notify/raw of CPU per request (goal:
notify/bare <= 1.0). Every round is written as JSON under ``benchmarks/results/``
(:mod:`benchmarks.results`).

``--baseline CHECKOUT`` (a source tree of another revision, e.g. from ``git archive``) adds a
fourth server, ``aviso-server serve`` running that tree's packages on the same
configuration, in the same rotation: its figures, and notify/baseline (this tree over that
one), compare two revisions under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, chdir, contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import psutil

from aviso_loadtests.servers import aviso_server, baseline_process
from benchmarks.core import CONFIG, requests_per_second
from benchmarks.results import (
    add_round_options,
    load_average,
    parse_rounds,
    ratio_spread,
    rotated,
    spread,
    write_results,
)
from benchmarks.watchers import import_path_of
from tests.support.process import aviso_process, with_pythonpath

SERVERS = ("notify", "bare", "raw")
BASELINES = {"bare": "aviso_loadtests.bare_app", "raw": "aviso_loadtests.raw_app"}
CONNECTIONS = 32
ROUNDS = 5
GOAL = 1.0
"""Most CPU per notify, as a multiple of the bare Starlette endpoint's."""


@contextmanager
def served(
    name: str, folder: Path, baseline: Path | None = None
) -> Iterator[tuple[int, psutil.Process]]:
    """One server: (port, its process). ``baseline``: the packages of the baseline server."""
    if name in ("notify", "baseline"):
        config = folder / "config.yaml"
        config.write_text(CONFIG)
        if name == "notify":
            server = aviso_server(config, folder / "aviso.log")
        else:
            assert baseline is not None
            server = aviso_process(config, folder / "baseline.log", with_pythonpath(baseline))
        with server as (url, process):
            yield int(url.rsplit(":", 1)[1]), psutil.Process(process.pid)
    else:
        with baseline_process(BASELINES[name]) as (port, process):
            yield port, psutil.Process(process.pid)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def measure(port: int, process: psutil.Process, requests: int) -> tuple[float, float]:
    """(requests/s, server CPU microseconds per request) of one round on one server."""
    before = cpu_seconds(process)
    rate = requests_per_second(port, requests, CONNECTIONS)
    return rate, (cpu_seconds(process) - before) / requests * 1e6


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--requests", type=int, help="POSTs per server and round")
    add_round_options(parser, ROUNDS, "rotated")
    parser.add_argument("--baseline", type=Path, help="checkout whose notify to compare with")
    args = parse_rounds(parser, argv)
    requests = args.requests or (5_000 if args.quick else 30_000)
    names = SERVERS + (("baseline",) if args.baseline else ())
    cpu: dict[str, list[float]] = {name: [] for name in names}
    rounds: list[dict[str, Any]] = []
    print(
        f"(a) notify path: {args.rounds} rotated rounds of {requests} POSTs over {CONNECTIONS} "
        f"keep-alive connections per server; server CPU us per request; "
        f"load average {load_average()}",
        flush=True,
    )
    # The servers start from the temporary folder: from the checkout, its aviso_plugins
    # folder would come first on a child's import path, ahead of the baseline's packages.
    with TemporaryDirectory() as folder, ExitStack() as stack, chdir(folder):
        baseline = import_path_of(args.baseline.resolve(), Path(folder)) if args.baseline else None
        servers = {
            name: stack.enter_context(served(name, Path(folder), baseline)) for name in names
        }
        for name in names:  # warm-up: imports, caches, the allocator
            requests_per_second(servers[name][0], requests // 10, CONNECTIONS)
        for round_number in range(args.rounds):
            order = rotated(names, round_number)
            figures: dict[str, Any] = {"round": round_number + 1, "order": order}
            for name in order:
                rate, cpu_us = measure(*servers[name], requests)
                cpu[name].append(cpu_us)
                figures[name] = {"cpu_us_per_request": cpu_us, "requests_per_s": rate}
            figures["notify_bare_cpu_ratio"] = (
                figures["notify"]["cpu_us_per_request"] / (figures["bare"]["cpu_us_per_request"])
            )
            figures["load_average"] = os.getloadavg()
            rounds.append(figures)
            print(
                f"    round {round_number + 1}: "
                + "  ".join(f"{name} {cpu[name][-1]:5.1f} us" for name in names)
                + f"  notify/bare {figures['notify_bare_cpu_ratio']:.2f}",
                flush=True,
            )
    summary: dict[str, Any] = {
        "requests_per_round": requests,
        "connections": CONNECTIONS,
        "goal_notify_bare_cpu_ratio_at_most": GOAL,
    }
    for name in names:
        summary[f"{name}_cpu_us"] = spread(cpu[name])
    for other in ("bare", "raw", *(("baseline",) if args.baseline else ())):
        summary[f"notify_{other}_cpu_ratio"] = ratio_spread(cpu["notify"], cpu[other])
    labels = [
        ("raw", "raw ASGI JSON POST"),
        ("bare", "bare Starlette JSON POST"),
        ("notify", "aviso notify (in-memory)"),
        *((("baseline", "baseline notify (in-memory)"),) if args.baseline else ()),
    ]
    for name, label in labels:
        figure = summary[f"{name}_cpu_us"]
        print(
            f"    {label:28} {figure['median']:6.1f} us server CPU/request (median;"
            f" {figure['min']:.1f}-{figure['max']:.1f})"
        )
    ratio = summary["notify_bare_cpu_ratio"]
    print(
        f"    notify/bare {ratio['median']:.2f} ({ratio['min']:.2f}-{ratio['max']:.2f};"
        f" goal <= {GOAL})   notify/raw {summary['notify_raw_cpu_ratio']['median']:.2f}"
        + (
            f"   notify/baseline {summary['notify_baseline_cpu_ratio']['median']:.2f}"
            if args.baseline
            else ""
        )
        + "   (ratios of CPU per request, round by round)"
    )
    path = write_results("notify_path", rounds, summary, args.results_dir)
    print(f"    load average at the end {load_average()}; rounds written to {path}")
    results = {f"{name}_cpu_us": summary[f"{name}_cpu_us"]["median"] for name in names}
    results.update(
        {
            key: value["median"]
            for key, value in summary.items()
            if key.endswith("_ratio") and isinstance(value, dict)
        }
    )
    print(json.dumps({key: round(value, 3) for key, value in results.items()}))
    return results


if __name__ == "__main__":
    main()
