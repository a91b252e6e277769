"""Fan-out to many live watches, and what an idle watch costs the server.

  python -m benchmarks.watchers [--quick] [--rounds N] [--processes P] [--baseline CHECKOUT]

(b) ``W`` live watches of one stream (``W`` = 1,000 and 10,000), then notifications spaced
    apart whose payload carries the publisher's clock; latency is receive time minus that
    stamp, per delivery (p50/p99). The watches are held by ``P`` load-generator processes
    (default 4), each an asyncio loop of raw sockets with a protocol callback per socket (no
    task per watch), so that the generator's own cost per delivery stays small.
(c) The server's RSS before and after opening ``W`` idle watches (``W`` = 2,000 and 10,000,
    on run values nothing is published to), divided by ``W``.

Every round uses a fresh server (``aviso-server serve``, in-memory backend, 127.0.0.1). With
``--rounds`` > 1 each figure is the median over the rounds. The goals: p99 <=
500 ms to 10,000 watches, <= 16 KiB per idle watch.

``--baseline CHECKOUT`` (a source tree of another revision, e.g. from ``git worktree add``
or ``git archive``) also serves every figure from that tree's packages, alternating with
this one round by round (each order in turn), and prints this tree's medians over the
baseline's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection
from pathlib import Path
from tempfile import TemporaryDirectory

import psutil

from aviso_loadtests.report import percentile
from aviso_loadtests.servers import raw_post
from benchmarks.core import CONFIG, notification
from benchmarks.load_generators import OPEN_CONCURRENCY, Watch, WatchClient
from tests.support.process import aviso_process, with_pythonpath

OPEN_TIMEOUT = 120.0
DELIVERY_TIMEOUT = 180.0
SETTLE_SECONDS = 2.0
"""Pause before an RSS reading, so that the server has finished the openings' work."""
# 10,000 watches plus the publisher: over the default connection cap (10,000).
SERVER_CONFIG = CONFIG + "limits: {max_connections: 15000}\n"


async def _hold(port: int, run_values: list[str], notifications: int, pipe: Connection) -> None:
    loop = asyncio.get_running_loop()
    client = WatchClient(notifications * len(run_values), len(run_values))
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)
    watches: list[Watch] = []

    async def open_one(run: str) -> None:
        body = json.dumps({"event_type": "bench", "identifier": {"run": run}})
        async with gate:
            watch = Watch(raw_post("/api/v1/watch", body), client)
            await loop.create_connection(lambda: watch, "127.0.0.1", port)
            watches.append(watch)

    await asyncio.wait_for(asyncio.gather(*(open_one(run) for run in run_values)), OPEN_TIMEOUT)
    await asyncio.wait_for(client.all_open.wait(), OPEN_TIMEOUT)
    pipe.send("open")
    with suppress(TimeoutError):  # what did not arrive is reported as missing
        await asyncio.wait_for(client.done.wait(), DELIVERY_TIMEOUT + OPEN_TIMEOUT)
    pipe.send((client.latencies, client.lost))
    # Hold the watches (idle ones for the memory reading) until the coordinator is done.
    await loop.run_in_executor(None, pipe.recv)
    for watch in watches:
        if watch.transport is not None:
            watch.transport.close()


def _generator(port: int, run_values: list[str], notifications: int, pipe: Connection) -> None:
    """A load-generator process (its own event loop, uvloop when installed)."""
    try:
        import uvloop

        uvloop.run(_hold(port, run_values, notifications, pipe))
    except ImportError:
        asyncio.run(_hold(port, run_values, notifications, pipe))


@contextmanager
def watches_held(
    port: int, run_values: list[str], notifications: int, processes: int
) -> Iterator[list[Connection]]:
    """``run_values`` (one watch each) spread over ``processes`` generators, all open on
    entry; yields the pipes, on which each generator reports ``(latencies, lost)`` once it
    has received ``notifications`` per watch."""
    context = multiprocessing.get_context("spawn")
    pipes: list[Connection] = []
    children = []
    try:
        for index in range(processes):
            ours, theirs = context.Pipe()
            share = run_values[index::processes]
            child = context.Process(
                target=_generator, args=(port, share, notifications, theirs), daemon=True
            )
            child.start()
            pipes.append(ours)
            children.append(child)
        for pipe in pipes:
            if not pipe.poll(OPEN_TIMEOUT) or pipe.recv() != "open":
                raise RuntimeError("a load generator could not open its watches")
        yield pipes
    finally:
        for pipe in pipes:
            with suppress(OSError):
                pipe.send("close")
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join(10)


def stamped(step: int) -> dict[str, float]:
    """A payload carrying the publisher's clock, for latency per delivery."""
    return {"sent_at": time.time()}


def publish(
    port: int,
    notifications: int,
    gap: float,
    first: int = 0,
    payload: Callable[[int], object] = stamped,
) -> None:
    """``notifications`` to run ``live`` (steps from ``first``), ``gap`` seconds apart, each
    carrying ``payload(step)`` made as it is sent."""

    async def run() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for step in range(first, first + notifications):
                writer.write(notification("live", step, payload(step)))
                await writer.drain()
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                assert head.startswith(b"HTTP/1.1 200"), head
                await asyncio.wait_for(reader.readuntil(b"}"), 30)
                await asyncio.sleep(gap)
        finally:
            writer.close()

    asyncio.run(run())


PACKAGES = {
    "aviso_host": "host",
    "aviso_plugins": "aviso_plugins",
    "aviso_builtins": "plugins",
    "aviso_loadtests": "loadtests",
}
"""Import name -> folder of a checkout (setup.cfg's ``package_dir``)."""


def import_path_of(checkout: Path, folder: Path) -> Path:
    """A folder that imports ``checkout``'s packages under their installed names."""
    path = folder / "baseline-packages"
    path.mkdir(exist_ok=True)
    for name, source in PACKAGES.items():
        link = path / name
        if not link.exists():
            link.symlink_to(checkout.resolve() / source, target_is_directory=True)
    return path


@contextmanager
def server(folder: Path, code: Path | None) -> Iterator[tuple[int, psutil.Process]]:
    """A fresh server of this tree (``code`` None) or of the packages under ``code``."""
    config = folder / "config.yaml"
    config.write_text(SERVER_CONFIG)
    env = with_pythonpath(code) if code is not None else None
    with aviso_process(config, folder / "aviso.log", env) as (url, process):
        yield int(url.rsplit(":", 1)[1]), psutil.Process(process.pid)


def fan_out(
    folder: Path, code: Path | None, watchers: int, notifications: int, gap: float, processes: int
) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, missing deliveries) for ``watchers`` live watches of one topic."""
    latencies: list[float] = []
    with (
        server(folder, code) as (port, _),
        watches_held(port, ["live"] * watchers, notifications, processes) as pipes,
    ):
        publish(port, notifications, gap)
        for pipe in pipes:
            if pipe.poll(DELIVERY_TIMEOUT):
                received, _ = pipe.recv()
                latencies.extend(received)
    missing = watchers * notifications - len(latencies)
    if not latencies:
        raise RuntimeError("no deliveries")
    return statistics.median(latencies) * 1000, percentile(latencies, 0.99) * 1000, missing


def idle_memory(folder: Path, code: Path | None, watchers: int, processes: int) -> float:
    """Server RSS growth per idle watch, in KiB."""
    with server(folder, code) as (port, process):
        # Warm-up: the first watch and notify import and cache what every later one shares.
        with watches_held(port, ["warm"] * 10, 0, 1):
            publish(port, 1, 0)
        time.sleep(SETTLE_SECONDS)
        before = process.memory_info().rss
        runs = [f"idle{n}" for n in range(watchers)]
        with watches_held(port, runs, 0, processes):
            time.sleep(SETTLE_SECONDS)
            after = process.memory_info().rss
    return (after - before) / watchers / 1024


def alternated(
    rounds: int, baseline: Path | None, measure: Callable[[Path | None], tuple[float, ...]]
) -> dict[str, list[tuple[float, ...]]]:
    """``measure`` per round for this tree, and for ``baseline`` when given, alternating
    which goes first; the figures by variant."""
    figures: dict[str, list[tuple[float, ...]]] = {"current": []}
    variants: list[tuple[str, Path | None]] = [("current", None)]
    if baseline is not None:
        figures["baseline"] = []
        variants.append(("baseline", baseline))
    for round_ in range(rounds):
        for name, code in variants if round_ % 2 == 0 else variants[::-1]:
            figures[name].append(measure(code))
            shown = ", ".join(f"{value:.1f}" for value in figures[name][-1])
            print(f"    round {round_ + 1} {name}: {shown}", flush=True)
    return figures


def _median(figures: list[tuple[float, ...]], index: int) -> float:
    return statistics.median(figure[index] for figure in figures)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer notifications, one round")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    parser.add_argument("--processes", type=int, default=4, help="load-generator processes")
    parser.add_argument("--baseline", type=Path, default=None, help="checkout to compare with")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    notifications = 5 if args.quick else 20
    results: dict[str, float] = {}
    print(f"load average at start: {psutil.getloadavg()}", flush=True)
    with TemporaryDirectory() as tmp:
        folder = Path(tmp)
        baseline = import_path_of(args.baseline, folder) if args.baseline else None
        for watchers, gap in ((1_000, 0.25), (10_000, 1.0)):
            print(
                f"(b) {notifications} notifications {gap} s apart to {watchers} live watches, "
                f"{args.processes} load-generator processes, {rounds} round(s); "
                "p50 ms, p99 ms, deliveries missing",
                flush=True,
            )
            figures = alternated(
                rounds,
                baseline,
                lambda code, w=watchers, g=gap: fan_out(
                    folder, code, w, notifications, g, args.processes
                ),
            )
            for name, measured in figures.items():
                prefix = f"fanout_{watchers}" + ("" if name == "current" else "_baseline")
                results[f"{prefix}_p50_ms"] = _median(measured, 0)
                results[f"{prefix}_p99_ms"] = _median(measured, 1)
            current = f"fanout_{watchers}"
            goal = " (goal p99 <= 500 ms)" if watchers == 10_000 else ""
            line = (
                f"    median: p50 {results[f'{current}_p50_ms']:.1f} ms, "
                f"p99 {results[f'{current}_p99_ms']:.1f} ms{goal}"
            )
            if baseline is not None:
                ratio = results[f"{current}_p99_ms"] / results[f"{current}_baseline_p99_ms"]
                results[f"{current}_p99_ratio"] = ratio
                line += (
                    f"; baseline p50 {results[f'{current}_baseline_p50_ms']:.1f} ms, "
                    f"p99 {results[f'{current}_baseline_p99_ms']:.1f} ms; p99 ratio {ratio:.2f}"
                )
            print(line, flush=True)
        for watchers in (2_000, 10_000):
            print(f"(c) server RSS growth per idle watch (KiB), {watchers} watches", flush=True)
            figures = alternated(
                rounds,
                baseline,
                lambda code, w=watchers: (idle_memory(folder, code, w, args.processes),),
            )
            current = f"idle_{watchers}_kib_per_watch"
            results[current] = _median(figures["current"], 0)
            line = f"    median {results[current]:.1f} KiB (goal <= 16 KiB)"
            if baseline is not None:
                results[f"{current}_baseline"] = _median(figures["baseline"], 0)
                ratio = results[current] / results[f"{current}_baseline"]
                results[f"idle_{watchers}_ratio"] = ratio
                line += f"; baseline {results[f'{current}_baseline']:.1f} KiB; ratio {ratio:.2f}"
            print(line, flush=True)
    print(f"load average at end: {psutil.getloadavg()}")
    print(json.dumps({key: round(value, 2) for key, value in results.items()}))
    return results


if __name__ == "__main__":
    main()
