"""What the limits at the HTTP edge cost on the notify path, against the same server without
them, both measured in this run.

  python -m benchmarks.limits [--quick]

"With": the app and protocol ``aviso-server serve`` runs: the body limit (a step of aviso's
edge middleware) and aviso's uvicorn protocol (head and trailer accounting, header/idle
timers, connection cap, lingering close, the disconnect callback). "Without": the same app
with the body limit switched off (``AvisoApp.body_limit = None``), served by uvicorn's stock
httptools protocol writing through aviso's connection transport (how a response is written
is the same in both: one write per answer of known length). The JSON nesting check stays in
both (it is part of body parsing); its cost on the benchmark body is measured on its own and
printed.

Both servers run as child processes on the same configuration; rounds alternate between
them. A server process's own speed varies by several percent from one start to the next
(memory layout, hash seed, which core): far more than the limits cost. So the rounds are
spread over several fresh pairs of servers, each start order serving half of them. Two
figures per server:
requests/s, and the server process's CPU time per request (user + system, from the kernel),
which other load on the machine disturbs far less than wall-clock throughput. Each round's
pair gives a ratio; the medians are reported (goal: >= 0.97, "with" doing at least 97 %
of the work per second / per CPU second of "without"), and the limits' own CPU per request.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

import psutil
import uvicorn
import yaml
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from aviso_host.http_protocol import ConnectionTransport
from aviso_loadtests.pipelined import post_many
from aviso_loadtests.servers import free_port, wait_until
from benchmarks.core import CONFIG, notification, requests_per_second

MODES = ("with", "without")


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's stock protocol writing through aviso's connection transport, and nothing
    else of aviso's protocol."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.raw = transport
        super().connection_made(ConnectionTransport(transport, self))  # type: ignore[arg-type]

    def close_connection(self) -> None:
        self.raw.close()


def serve(mode: str, config: str, port: int) -> None:
    """The child process: one server, with or without the limits."""
    from aviso_host.app import create_app
    from aviso_host.config import settings_from_document
    from aviso_host.plugins import discover
    from aviso_host.server import install_limits, uvicorn_config

    registry = discover()
    settings = settings_from_document(yaml.safe_load(Path(config).read_text()), registry)
    app = create_app(settings, registry)
    server_config = uvicorn_config(app, "127.0.0.1", port)
    if mode == "with":
        install_limits(server_config, settings.limits)
    else:
        app.body_limit = None
        # How a response is written (one write per answer of known length) is not a limit:
        # uvicorn's stock protocol writes through aviso's transport too, so only limits differ.
        server_config.http = OneWriteProtocol  # type: ignore[assignment]
    uvicorn.Server(server_config).run()


@contextmanager
def server(mode: str, config: Path) -> Iterator[tuple[int, psutil.Process]]:
    port = free_port()
    command = [sys.executable, "-m", "benchmarks.limits", "--serve", mode, str(config), str(port)]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        warm = notification("warm", 0, None)
        wait_until(
            lambda: asyncio.run(post_many(port, 1, lambda n: warm, 1)) == {200: 1},
            process,
            f"the {mode!r} server",
        )
        yield port, psutil.Process(process.pid)
    finally:
        process.terminate()
        process.wait(30)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


def measure(port: int, process: psutil.Process, requests: int) -> tuple[float, float]:
    """(requests/s, server CPU microseconds per request) of one round."""
    cpu_before = cpu_seconds(process)
    rate = requests_per_second(port, requests, 32)
    return rate, (cpu_seconds(process) - cpu_before) / requests * 1e6


def nesting_check_ns() -> float:
    from aviso_plugins._shared.json_depth import exceeds_json_depth

    body = notification("rps", 1, {"n": 1}).partition(b"\r\n\r\n")[2]
    runs = 200_000
    return timeit.timeit(lambda: exceeds_json_depth(body, 64), number=runs) / runs * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--serve", nargs=3, metavar=("MODE", "CONFIG", "PORT"), help="internal")
    args = parser.parse_args()
    if args.serve:
        mode, config, port = args.serve
        serve(mode, config, int(port))
        return
    requests = 2_000 if args.quick else 5_000
    pairs = 2 if args.quick else 8
    rounds_per_pair = 2
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    with TemporaryDirectory() as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(CONFIG)
        print(
            f"notify, {pairs} pairs of servers x {rounds_per_pair} alternating rounds of"
            f" {requests} requests over 32 keep-alive connections",
            flush=True,
        )
        for pair in range(pairs):
            first, second = MODES if pair % 2 == 0 else MODES[::-1]
            with server(first, config) as first_server, server(second, config) as second_server:
                servers = {first: first_server, second: second_server}
                for mode in MODES:  # warm-up
                    requests_per_second(servers[mode][0], requests // 4, 32)
                for round_number in range(rounds_per_pair):
                    order = MODES if round_number % 2 == 0 else MODES[::-1]
                    for mode in order:
                        rate, cpu_us = measure(*servers[mode], requests)
                        rates[mode].append(rate)
                        cpu[mode].append(cpu_us)
    rate_ratios = [w / wo for w, wo in zip(rates["with"], rates["without"], strict=True)]
    cpu_ratios = [wo / w for w, wo in zip(cpu["with"], cpu["without"], strict=True)]
    for mode, label in (
        ("without", "without limits (stock protocol, no body limit)"),
        ("with", "with limits (aviso protocol + body limit)"),
    ):
        print(
            f"    {label:58} {statistics.median(rates[mode]):7.0f} req/s"
            f"  {statistics.median(cpu[mode]):6.0f} us CPU/request"
        )
    print(
        f"    throughput ratio {statistics.median(rate_ratios):.3f}"
        f" (rounds: {' '.join(f'{r:.2f}' for r in rate_ratios)})"
    )
    print(
        f"    CPU ratio (without/with per request) {statistics.median(cpu_ratios):.3f}"
        f" (rounds: {' '.join(f'{r:.2f}' for r in cpu_ratios)}); goal >= 0.97"
    )
    cost = [w - wo for w, wo in zip(cpu["with"], cpu["without"], strict=True)]
    print(
        f"    the limits' CPU per request (with - without, median of rounds):"
        f" {statistics.median(cost):.1f} us"
    )
    print(f"    nesting check on the benchmark body (in both): {nesting_check_ns():.0f} ns")


if __name__ == "__main__":
    main()
