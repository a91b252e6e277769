"""Notify's CPU at the ASGI level, in process: the app alone, without the server, the socket
or the load generator, beside the bare Starlette and raw ASGI endpoints.

  python -m benchmarks.notify_app [--requests N] [--rounds R] [--baseline CHECKOUT]
                                  [--results-dir DIR]

Each figure is measured in a fresh child process: the app is built (aviso: ``create_app``
on benchmarks.core's configuration, in-memory, started), warmed up with a tenth of the
requests, then called with ``N`` notifications (benchmarks.core's bodies, one ``http.request``
message each) one after the other; the figure is the child's CPU time per call (user +
system), which other load on the machine disturbs far less than wall-clock time. The apps
are rotated from round to round. ``--baseline CHECKOUT`` adds aviso from another source tree
(its packages first on the child's import path). What the server and the kernel add on top
is ``benchmarks.notify_path``'s to measure; the two together say where a notify's CPU goes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from benchmarks.results import (
    add_round_options,
    load_average,
    parse_rounds,
    ratio_spread,
    rotated,
    spread,
    write_results,
)

APPS = ("notify", "bare", "raw")
ROUNDS = 5
REQUESTS = 20_000
ROOT = Path(__file__).resolve().parents[1]

Asgi = Callable[..., Awaitable[None]]


async def call(app: Asgi, body: bytes) -> None:
    """One ``POST /api/v1/notification`` as uvicorn would hand it to the app."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/notification",
        "raw_path": b"/api/v1/notification",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"bench"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        return messages.pop()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    if status != [200]:
        raise RuntimeError(f"answered {status}")


async def child(name: str, requests: int) -> float:
    """CPU us per call of app ``name`` (this process's)."""
    from benchmarks.core import CONFIG, notification_body

    if name == "notify":
        import yaml

        from aviso_host.app import create_app
        from aviso_host.config import settings_from_document
        from aviso_host.plugins import discover

        registry = discover()
        aviso = create_app(settings_from_document(yaml.safe_load(CONFIG), registry), registry)
        await aviso.state.service.ensure_started()
        app: Asgi = aviso
    elif name == "bare":
        from aviso_loadtests.bare_app import app
    else:
        from aviso_loadtests.raw_app import app
    bodies = [json.dumps(notification_body("rps", n, {"n": n})).encode() for n in range(requests)]
    for body in bodies[: requests // 10]:  # warm-up: imports, caches, the allocator
        await call(app, body)
    start = time.process_time()
    for body in bodies:
        await call(app, body)
    return (time.process_time() - start) / requests * 1e6


def measure(name: str, requests: int, packages: Path | None) -> float:
    """One figure, from a fresh child process (``packages``: another tree's, first)."""
    env = dict(os.environ)
    if packages is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(packages), env.get("PYTHONPATH", "")])
    # Run from elsewhere than the checkout, whose aviso_plugins folder would come first on
    # the import path; this tree's benchmarks package is found at the path's end.
    start = f"import sys; sys.path.append({str(ROOT)!r}); from benchmarks.notify_app import main"
    done = subprocess.run(
        [sys.executable, "-c", f"{start}; main()", "--child", name, str(requests)],
        cwd=Path(tempfile.gettempdir()),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=REQUESTS, help="calls per figure")
    add_round_options(parser, ROUNDS, "rotated")
    parser.add_argument("--baseline", type=Path, help="checkout whose notify to compare with")
    parser.add_argument("--child", nargs=2, metavar=("APP", "REQUESTS"), help=argparse.SUPPRESS)
    args = parse_rounds(parser, argv)
    if args.child:
        name, requests = args.child
        import uvloop

        print(uvloop.run(child(name, int(requests))))
        return {}
    names = APPS + (("baseline",) if args.baseline else ())
    print(
        f"notify at the ASGI level: {args.rounds} rotated rounds of {args.requests} calls per "
        f"app, each in a fresh process; CPU us per call; load average {load_average()}",
        flush=True,
    )
    cpu: dict[str, list[float]] = {name: [] for name in names}
    rounds: list[dict[str, Any]] = []
    with TemporaryDirectory() as folder:
        packages = None
        if args.baseline:
            from benchmarks.watchers import import_path_of

            packages = import_path_of(args.baseline, Path(folder))
        for round_number in range(args.rounds):
            order = rotated(names, round_number)
            figure: dict[str, Any] = {"round": round_number + 1, "order": order}
            for name in order:
                app = "notify" if name == "baseline" else name
                value = measure(app, args.requests, packages if name == "baseline" else None)
                cpu[name].append(value)
                figure[name] = {"cpu_us_per_call": value}
            figure["load_average"] = os.getloadavg()
            rounds.append(figure)
            print(
                f"    round {round_number + 1}: "
                + "  ".join(f"{name} {cpu[name][-1]:5.1f} us" for name in names),
                flush=True,
            )
    summary: dict[str, Any] = {"calls_per_figure": args.requests}
    for name in names:
        summary[f"{name}_cpu_us"] = spread(cpu[name])
    for other in names[1:]:
        summary[f"notify_{other}_cpu_ratio"] = ratio_spread(cpu["notify"], cpu[other])
    path = write_results("notify_app", rounds, summary, args.results_dir)
    results = {key: value["median"] for key, value in summary.items() if isinstance(value, dict)}
    print(
        "    medians: "
        + "  ".join(f"{name} {results[f'{name}_cpu_us']:.1f} us" for name in names)
        + f"; notify/bare {results['notify_bare_cpu_ratio']:.2f}; rounds written to {path}"
    )
    print(json.dumps({key: round(value, 3) for key, value in results.items()}))
    return results


if __name__ == "__main__":
    main()
