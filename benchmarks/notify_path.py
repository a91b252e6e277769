"""What aviso's notify path costs over the framework, measured in one run.

  python -m benchmarks.notify_path [--quick] [--requests N] [--rounds R] [--baseline CHECKOUT]

Three servers, each a child process served with aviso's uvicorn settings:

- notify: ``aviso-server serve`` on the in-memory backend (benchmarks.core's configuration);
- bare: the bare Starlette JSON POST endpoint (``aviso_loadtests.bare_app``);
- raw: a raw ASGI app parsing the JSON body and answering JSON (``aviso_loadtests.raw_app``).

Each round posts the same notifications (benchmarks.core's) to every server in turn over 32
keep-alive connections, the order rotating from round to round. Two figures per server and
round: requests/s, and the server process's CPU time per request (user + system, from the
kernel), which other load on the machine disturbs far less than wall-clock throughput.
Medians over the rounds, and the ratios notify/bare and notify/raw (goal: notify >= 0.8 of
bare in requests/s).

``--baseline CHECKOUT`` (a source tree of another revision, e.g. from ``git archive``) adds a
fourth server, ``aviso-server serve`` running that tree's packages on the same
configuration, in the same rotation: its figures, and notify/baseline (this tree over that
one), compare two revisions under the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

import psutil

from aviso_loadtests.servers import aviso_server, baseline_process
from benchmarks.core import CONFIG, requests_per_second
from benchmarks.watchers import import_path_of
from tests.support.process import aviso_process, with_pythonpath

SERVERS = ("notify", "bare", "raw")
BASELINES = {"bare": "aviso_loadtests.bare_app", "raw": "aviso_loadtests.raw_app"}
CONNECTIONS = 32
ROUNDS = 3
GOAL = 0.8


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


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--requests", type=int, help="POSTs per server and round")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rotated rounds")
    parser.add_argument("--baseline", type=Path, help="checkout whose notify to compare with")
    args = parser.parse_args(argv)
    requests = args.requests or (5_000 if args.quick else 30_000)
    names = SERVERS + (("baseline",) if args.baseline else ())
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    print(
        f"(a) notify path: {args.rounds} rotated rounds of {requests} POSTs over {CONNECTIONS} "
        f"keep-alive connections per server; load average {load_average()}",
        flush=True,
    )
    with TemporaryDirectory() as folder, ExitStack() as stack:
        baseline = import_path_of(args.baseline, Path(folder)) if args.baseline else None
        servers = {
            name: stack.enter_context(served(name, Path(folder), baseline)) for name in names
        }
        for name in names:  # warm-up: imports, caches, the allocator
            requests_per_second(servers[name][0], requests // 10, CONNECTIONS)
        for round_number in range(args.rounds):
            shift = round_number % len(names)
            order = names[shift:] + names[:shift]
            for name in order:
                rate, cpu_us = measure(*servers[name], requests)
                rates[name].append(rate)
                cpu[name].append(cpu_us)
            print(
                f"    round {round_number + 1}: "
                + "  ".join(
                    f"{name} {rates[name][-1]:6.0f} req/s {cpu[name][-1]:4.0f} us" for name in names
                ),
                flush=True,
            )
    results: dict[str, float] = {}
    labels = [
        ("raw", "raw ASGI JSON POST"),
        ("bare", "bare Starlette JSON POST"),
        ("notify", "aviso notify (in-memory)"),
    ]
    if args.baseline:
        labels.append(("baseline", "baseline notify (in-memory)"))
    for name, label in labels:
        results[f"{name}_rps"] = statistics.median(rates[name])
        results[f"{name}_cpu_us"] = statistics.median(cpu[name])
        print(
            f"    {label:26} {results[f'{name}_rps']:7.0f} req/s (median)"
            f"  {results[f'{name}_cpu_us']:5.0f} us server CPU/request"
        )
    for baseline in ("bare", "raw"):
        results[f"notify_{baseline}_ratio"] = results["notify_rps"] / results[f"{baseline}_rps"]
        results[f"notify_{baseline}_cpu_ratio"] = (
            results[f"{baseline}_cpu_us"] / results["notify_cpu_us"]
        )
    print(
        f"    notify/bare {results['notify_bare_ratio']:.2f} req/s"
        f" (goal >= {GOAL}), {results['notify_bare_cpu_ratio']:.2f} CPU"
        f"   notify/raw {results['notify_raw_ratio']:.2f} req/s,"
        f" {results['notify_raw_cpu_ratio']:.2f} CPU   (CPU: baseline us / notify us)"
    )
    if args.baseline:
        results["notify_baseline_ratio"] = results["notify_rps"] / results["baseline_rps"]
        results["notify_baseline_cpu_ratio"] = results["baseline_cpu_us"] / results["notify_cpu_us"]
        results["baseline_bare_ratio"] = results["baseline_rps"] / results["bare_rps"]
        print(
            f"    notify/baseline {results['notify_baseline_ratio']:.2f} req/s,"
            f" {results['notify_baseline_cpu_ratio']:.2f} CPU (baseline us / notify us);"
            f" baseline/bare {results['baseline_bare_ratio']:.2f} req/s"
        )
    print(f"    load average at the end {load_average()}")
    print(json.dumps({key: round(value, 2) for key, value in results.items()}))
    return results


if __name__ == "__main__":
    main()
