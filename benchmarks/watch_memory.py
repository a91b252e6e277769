"""Memory per idle watch, by backend and process layout, with what each watch holds.

  python -m benchmarks.watch_memory [--watches 2000,10000]
      [--cases in_memory,jetstream,jetstream_w2] [--rounds 3] [--env NAME=VALUE ...]
      [--code CHECKOUT] [--label WORD] [--trace WATCHES]

Cases, each a fresh service per round and size, on 127.0.0.1:

- ``in_memory``: ``aviso-server serve``, in-memory backend, one process;
- ``jetstream``: ``aviso-server serve`` on JetStream (a nats-server of its own), one process;
- ``jetstream_w2``: ``aviso-server serve --workers 2 --embedded-nats`` (what
  ``benchmarks.scale_out`` measures): supervisor and two workers.

Each opens ``WATCHES`` idle watches of one stream (the body ``benchmarks.scale_out`` uses), held
by load-generator processes of their own (:func:`benchmarks.load_generators.watch_generator`),
after a warm-up (4 watches per worker and one notify delivered to them, which import and cache
what every later watch shares) and 2 s of settling, and again 2 s after opening. Per watch:
the RSS growth of every aviso process (nats-server excluded), and the kernel's share: the
server sockets' buffers (``ss -tm``) plus half the connection objects the opening added
(``/proc/slabinfo``, both ends are on this machine). Rounds rotate the cases' order.

``--env NAME=VALUE`` runs the servers with that environment (e.g. ``MALLOC_ARENA_MAX=2``,
``PYTHONMALLOC=malloc``), to tell objects from allocator fragmentation. ``--code CHECKOUT``
serves the packages of another source tree (e.g. ``git archive`` of an earlier commit), for a
before/after comparison.

``--trace WATCHES`` instead runs each case once under ``tracemalloc`` (25 frames) and prints,
per watch, the bytes still allocated after opening ``WATCHES`` watches beyond the warm-up,
grouped by the line that allocated them (aviso's, uvicorn's, the standard library's...) and by
the innermost line of aviso's own code on the way there.

The raw rounds go to ``benchmarks/results/watch_memory-*.json``
(:func:`benchmarks.results.write_results`).
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import signal
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import psutil

from benchmarks.core import CONFIG
from benchmarks.fanout_cpu import slab_bytes, socket_buffers
from benchmarks.load_generators import (
    generator_processes,
    receive,
    source_address,
    watch_generator,
)
from benchmarks.results import (
    add_round_options,
    load_average,
    parse_rounds,
    rotated,
    spread,
    write_results,
)
from benchmarks.scale_out import (
    DELIVERY_TIMEOUT,
    MAX_CONNECTIONS,
    SETTLE_SECONDS,
    WARM_WATCHES_PER_WORKER,
    WATCH_BODY,
    WATCHES_PER_GENERATOR,
    Service,
    processes_service,
    publish_paced,
    workers_service,
)
from benchmarks.watchers import import_path_of
from tests.support.process import aviso_process

CASES = ("in_memory", "jetstream", "jetstream_w2")
TRACE_FRAMES = 25
TRACE_SIGNAL = signal.SIGUSR2
TRACE_HOOK = '''
"""Benchmark hook (benchmarks.watch_memory): the first SIGUSR2 starts tracemalloc (from the
start, a server takes minutes to import), each later one dumps a snapshot."""
import os, signal, time, tracemalloc

def _on_signal(signum, frame):
    if not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ["AVISO_TRACE_FRAMES"]))
        return
    path = os.path.join(os.environ["AVISO_TRACE_DIR"], f"{os.getpid()}-{time.time_ns()}.snap")
    tracemalloc.take_snapshot().dump(path)

signal.signal(signal.SIGUSR2, _on_signal)
'''


@contextmanager
def in_memory_service(folder: Path, run: int) -> Iterator[Service]:
    config = folder / f"aviso-{run}.yaml"
    config.write_text(CONFIG + f"limits: {{max_connections: {MAX_CONNECTIONS}}}\n")
    with aviso_process(config, folder / f"aviso-{run}.log") as (url, process):
        supervisor = psutil.Process(process.pid)
        yield Service([int(url.rsplit(":", 1)[1])], 1, lambda: [supervisor])


def service(case: str, folder: Path, run: int) -> Any:
    if case == "in_memory":
        return in_memory_service(folder, run)
    if case == "jetstream":
        return processes_service(folder, 1, run)
    return workers_service(folder, 2, run)


def open_watches(pipes: list[Connection], total: int) -> None:
    shares = [total // len(pipes) + (n < total % len(pipes)) for n in range(len(pipes))]
    for pipe, share in zip(pipes, shares, strict=True):
        pipe.send(("open", share))
    refused = sum(receive(pipe, 180.0)[1] for pipe in pipes)
    if refused:
        raise RuntimeError(f"{refused} of {total} watches refused or closed before opening")


def warm_up(pipes: list[Connection], service: Service) -> None:
    """The first watches and notify of a worker import and cache what every later one
    shares, which is no watch's own memory."""
    open_watches(pipes, WARM_WATCHES_PER_WORKER * service.workers)
    publish_paced(service.ports, 0, 1, 1.0)
    for pipe in pipes:
        pipe.send(("collect", (1, DELIVERY_TIMEOUT)))
    missing = sum(receive(pipe, DELIVERY_TIMEOUT + 60)[3] for pipe in pipes)
    if missing:
        raise RuntimeError(f"{missing} warm-up deliveries missing")
    time.sleep(SETTLE_SECONDS)


def kernel_bytes(service: Service) -> tuple[int, int]:
    """(server sockets, bytes of their buffers)."""
    sockets = buffers = 0
    for port in service.ports:
        port_sockets, port_buffers = socket_buffers(port)
        sockets += port_sockets
        buffers += port_buffers
    return sockets, buffers


def measure(case: str, watches: int, folder: Path, run: int) -> dict[str, float]:
    """One case at one size on a fresh service: KiB per idle watch."""
    with service(case, folder, run) as served:
        generators = max(1, math.ceil(watches / WATCHES_PER_GENERATOR))
        arguments = [(served.ports, source_address(run, n), WATCH_BODY) for n in range(generators)]
        with generator_processes(watch_generator, arguments) as pipes:
            try:
                warm_up(pipes, served)
                per_process = {p.pid: p.memory_info().rss for p in served.processes()}
                rss, slabs = served.rss(), slab_bytes()
                opened = watches - WARM_WATCHES_PER_WORKER * served.workers
                open_watches(pipes, opened)
                time.sleep(SETTLE_SECONDS)
                rss_after, slabs_after = served.rss(), slab_bytes()
                grown = {
                    p.pid: p.memory_info().rss - per_process.get(p.pid, 0)
                    for p in served.processes()
                }
                sockets, buffers = kernel_bytes(served)
            finally:
                for pipe in pipes:
                    pipe.send(("close", None))
    figures = {
        "rss_kib": (rss_after - rss) / opened / 1024,
        "socket_buffers_kib": buffers / max(1, sockets) / 1024,
        "largest_process_share": max(grown.values()) / max(1, sum(grown.values())),
    }
    kernel = figures["socket_buffers_kib"]
    if slabs is not None and slabs_after is not None:
        figures["socket_objects_kib"] = (slabs_after - slabs) / 2 / opened / 1024
        kernel += figures["socket_objects_kib"]
    figures["kernel_kib"] = kernel
    figures["total_kib"] = figures["rss_kib"] + kernel
    return figures


# -- tracemalloc -------------------------------------------------------------------------------


def snapshots(folder: Path, pids: list[int]) -> dict[int, tracemalloc.Snapshot]:
    """A fresh snapshot of each of ``pids`` (the hook writes them), by pid."""
    before = set(folder.glob("*.snap"))
    for pid in pids:
        os.kill(pid, TRACE_SIGNAL)
    found: dict[int, tracemalloc.Snapshot] = {}
    deadline = time.monotonic() + 300
    while len(found) < len(pids) and time.monotonic() < deadline:
        for path in set(folder.glob("*.snap")) - before:
            pid = int(path.name.split("-", 1)[0])
            if pid in found:
                continue
            try:
                found[pid] = tracemalloc.Snapshot.load(str(path))
            except (EOFError, pickle.UnpicklingError):
                continue  # still being written
        time.sleep(0.5)
    if len(found) < len(pids):
        raise RuntimeError("a server process wrote no tracemalloc snapshot")
    return found


def _where(frame: tracemalloc.Frame) -> str:
    name = frame.filename
    for marker in ("site-packages/", "/lib/python3.", "/watchmem/"):
        if marker in name:
            name = name.split(marker, 1)[1]
    return f"{name}:{frame.lineno}"


OWN_CODE = ("/host/", "/plugins/", "/aviso_plugins/")


def _sites(trace: tracemalloc.Traceback) -> tuple[str, str]:
    """(the allocating line, the innermost line of aviso's own code on the way to it)."""
    own = next((f for f in reversed(trace) if any(d in f.filename for d in OWN_CODE)), None)
    return _where(trace[-1]), "(none)" if own is None else _where(own)


def traced(case: str, watches: int, folder: Path, run: int, top: int) -> dict[str, Any]:
    """Bytes per watch still allocated after opening, by allocating line and by file."""
    trace_dir = folder / f"trace-{run}"
    trace_dir.mkdir()
    (trace_dir / "sitecustomize.py").write_text(TRACE_HOOK)
    saved = dict(os.environ)
    os.environ.update(
        {
            "AVISO_TRACE_FRAMES": str(TRACE_FRAMES),
            "AVISO_TRACE_DIR": str(trace_dir),
            "PYTHONPATH": os.pathsep.join([str(trace_dir), saved.get("PYTHONPATH", "")]),
        }
    )
    try:
        with service(case, folder, run) as served:
            generators = max(1, math.ceil(watches / WATCHES_PER_GENERATOR))
            arguments = [
                (served.ports, source_address(run, n), WATCH_BODY) for n in range(generators)
            ]
            with generator_processes(watch_generator, arguments) as pipes:
                try:
                    warm_up(pipes, served)
                    pids = [p.pid for p in served.processes() if p.pid != _tracker(served)]
                    for pid in pids:
                        os.kill(pid, TRACE_SIGNAL)
                    time.sleep(SETTLE_SECONDS)
                    before = snapshots(trace_dir, pids)
                    opened = watches - WARM_WATCHES_PER_WORKER * served.workers
                    open_watches(pipes, opened)
                    time.sleep(SETTLE_SECONDS)
                    after = snapshots(trace_dir, pids)
                finally:
                    for pipe in pipes:
                        pipe.send(("close", None))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    by_line: dict[str, int] = defaultdict(int)
    by_own: dict[str, int] = defaultdict(int)
    by_trace: dict[str, int] = defaultdict(int)
    blocks = 0
    for pid in pids:
        for diff in after[pid].compare_to(before[pid], "traceback"):
            line, own = _sites(diff.traceback)
            by_line[line] += diff.size_diff
            by_own[own] += diff.size_diff
            by_trace[" < ".join(_where(f) for f in reversed(diff.traceback))] += diff.size_diff
            blocks += diff.count_diff
    total = sum(by_line.values())

    def largest(sizes: dict[str, int]) -> dict[str, float]:
        ordered = sorted(sizes.items(), key=lambda item: -item[1])[:top]
        return {site: size / opened for site, size in ordered}

    return {
        "traced_bytes_per_watch": total / opened,
        "blocks_per_watch": blocks / opened,
        "by_line": largest(by_line),
        "by_own_line": largest(by_own),
        "by_traceback": largest(by_trace),
    }


def _tracker(served: Service) -> int | None:
    """The supervisor's multiprocessing resource tracker (no aviso code, no hook)."""
    for process in served.processes():
        try:
            if "resource_tracker" in " ".join(process.cmdline()):
                return int(process.pid)
        except psutil.Error:
            continue
    return None


# -- the run -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--watches", type=lambda t: [int(n) for n in t.split(",")], default=[2_000, 10_000]
    )
    parser.add_argument("--cases", type=lambda t: t.split(","), default=list(CASES))
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the servers")
    parser.add_argument("--code", type=Path, help="serve the packages of this source tree")
    parser.add_argument("--trace", type=int, help="tracemalloc the cases at this many watches")
    parser.add_argument("--top", type=int, default=40, help="lines shown per traced case")
    parser.add_argument("--label", default="", help="a word for the results file's name")
    add_round_options(parser, 3, "the cases take turns, rotated,")
    args = parse_rounds(parser, argv)
    for case in args.cases:
        if case not in CASES:
            parser.error(f"--cases: {case!r} is not one of {', '.join(CASES)}")
    os.environ.update(item.split("=", 1) for item in args.env)
    print(f"load average at start: {load_average()}; server environment: {args.env}", flush=True)
    runs = 0
    rounds: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"environment": args.env, "code": str(args.code or "this tree")}
    with TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.code is not None:
            path = import_path_of(args.code, folder)
            os.environ["PYTHONPATH"] = os.pathsep.join(
                [str(path), os.environ.get("PYTHONPATH", "")]
            )
        if args.trace:
            for case in args.cases:
                runs += 1
                found = traced(case, args.trace, folder, runs, args.top)
                summary[f"trace_{case}"] = found
                print(
                    f"{case}, {args.trace} watches: {found['traced_bytes_per_watch']:.0f} B traced"
                    f" per watch in {found['blocks_per_watch']:.1f} blocks",
                    flush=True,
                )
                for site, size in found["by_line"].items():
                    print(f"    {size:8.1f}  {site}", flush=True)
                print("  by the innermost line of aviso's code that led there:", flush=True)
                for name, size in found["by_own_line"].items():
                    print(f"    {size:8.1f}  {name}", flush=True)
                print("  by traceback (innermost first):", flush=True)
                for name, size in found["by_traceback"].items():
                    print(f"    {size:8.1f}  {name}", flush=True)
        else:
            for round_number in range(args.rounds):
                for case in rotated(args.cases, round_number):
                    for watches in args.watches:
                        runs += 1
                        figures = measure(case, watches, folder, runs)
                        rounds.append(
                            {"round": round_number, "case": case, "watches": watches, **figures}
                        )
                        print(
                            f"round {round_number + 1} {case:12} {watches:6} watches: RSS"
                            f" {figures['rss_kib']:5.1f} + kernel {figures['kernel_kib']:4.1f}"
                            f" = {figures['total_kib']:5.1f} KiB per watch; load"
                            f" {load_average()}",
                            flush=True,
                        )
            for case in args.cases:
                for watches in args.watches:
                    mine = [r for r in rounds if r["case"] == case and r["watches"] == watches]
                    point = {
                        name: spread([r[name] for r in mine])
                        for name in ("rss_kib", "kernel_kib", "total_kib")
                    }
                    summary[f"{case}_{watches}"] = point
                    shown = ", ".join(
                        f"{name} {value['median']:.1f} ({value['min']:.1f}-{value['max']:.1f})"
                        for name, value in point.items()
                    )
                    print(f"{case} {watches}: {shown}", flush=True)
    name = "watch_memory" + (f"-{args.label}" if args.label else "")
    path = write_results(name, rounds, summary, args.results_dir)
    print(f"load average at end: {load_average()}; results: {path}", flush=True)
    return summary


if __name__ == "__main__":
    main()
