"""What the limits at the HTTP edge cost on the notify path, against the same server without
them, both measured in this run.

  python -m benchmarks.limits [--quick]

"With": the app and protocol ``aviso-server serve`` runs: the body-limit middleware and
aviso's uvicorn protocol (head accounting, header/idle timers, connection cap, lingering
close, the 500 hook). "Without": the same app with the body-limit middleware removed, served
by uvicorn's stock httptools protocol. The JSON nesting check stays in both (it is part of
body parsing); its cost on the benchmark body is measured on its own and printed.

Both servers run as child processes on the same configuration; rounds alternate between
them, each round's two figures give one ratio, and the median ratio is reported (goal:
>= 0.97): the machine's load drifts between rounds, much less within one.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

import uvicorn
import yaml

from benchmarks.core import CONFIG, notification, requests_per_second, wait_until_healthy_post
from tests.support.process import free_port

MODES = ("with", "without")


def serve(mode: str, config: str, port: int) -> None:
    """The child process: one server, with or without the limits."""
    from aviso_host.app import create_app
    from aviso_host.body_limit import BodyLimitMiddleware
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
        app.user_middleware = [m for m in app.user_middleware if m.cls is not BodyLimitMiddleware]
    uvicorn.Server(server_config).run()


@contextmanager
def server(mode: str, config: Path) -> Iterator[int]:
    port = free_port()
    command = [sys.executable, "-m", "benchmarks.limits", "--serve", mode, str(config), str(port)]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    try:
        wait_until_healthy_post(port, process)
        yield port
    finally:
        process.terminate()
        process.wait(30)


def nesting_check_ns() -> float:
    from aviso_host.encoding import nesting_exceeds

    body = notification("rps", 1, {"n": 1}).partition(b"\r\n\r\n")[2]
    runs = 200_000
    return timeit.timeit(lambda: nesting_exceeds(body, 64), number=runs) / runs * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    parser.add_argument("--serve", nargs=3, metavar=("MODE", "CONFIG", "PORT"), help="internal")
    args = parser.parse_args()
    if args.serve:
        mode, config, port = args.serve
        serve(mode, config, int(port))
        return
    requests = 2_000 if args.quick else 10_000
    rounds = 3 if args.quick else 7
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    with TemporaryDirectory() as folder:
        config = Path(folder) / "config.yaml"
        config.write_text(CONFIG)
        print(
            f"notify throughput, {rounds} alternating rounds of {requests} requests over 32 "
            "keep-alive connections",
            flush=True,
        )
        with server("with", config) as with_port, server("without", config) as without_port:
            ports = {"with": with_port, "without": without_port}
            for mode in MODES:  # warm-up
                requests_per_second(ports[mode], requests // 4, 32)
            for round_number in range(rounds):
                order = MODES if round_number % 2 == 0 else MODES[::-1]
                for mode in order:
                    rates[mode].append(requests_per_second(ports[mode], requests, 32))
    with_rps = statistics.median(rates["with"])
    without_rps = statistics.median(rates["without"])
    ratios = [pair[0] / pair[1] for pair in zip(rates["with"], rates["without"], strict=True)]
    print(
        f"    without limits (stock protocol, no body-limit middleware): {without_rps:8.0f} req/s"
    )
    print(f"    with limits (aviso protocol + body-limit middleware):       {with_rps:8.0f} req/s")
    print(
        f"    ratio {statistics.median(ratios):.3f} (median of the rounds' ratios "
        f"{', '.join(f'{ratio:.3f}' for ratio in ratios)}; goal >= 0.97)"
    )
    print(f"    nesting check on the benchmark body (in both): {nesting_check_ns():.0f} ns")


if __name__ == "__main__":
    main()
