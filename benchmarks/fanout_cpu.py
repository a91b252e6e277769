"""Server CPU per delivered live event, aviso beside its two baselines, and memory per idle
watch with the kernel's share of each connection.

  python -m benchmarks.fanout_cpu [--quick] [--rounds N] [--watches W] [--events K]

Each round starts fresh servers and measures them one after the other, the order rotated
from round to round:

- ``aviso``: ``aviso-server serve``, in-memory backend, one process;
- ``jetstream``: the same on the JetStream backend (its own nats-server, file storage);
- ``starlette``: a bare Starlette broadcaster waking one task per watch
  (:mod:`benchmarks.fanout_baselines`);
- ``raw``: a uvloop protocol writing each pre-built chunk straight to every watching
  transport (:mod:`benchmarks.fanout_baselines`), the floor.

Per server: ``W`` live watches (default 1,500), on every server at once, held by two
load-generator processes (one protocol object per socket), and two warm-up notifications.
Then ``K`` notifications per server (default 60) in ``B`` batches (default 4): the servers
take turns batch by batch (the order rotated each batch), so that the other load of a shared
machine, which drifts over seconds, falls on all of them alike. Notifications are spaced
apart so that each is delivered before the next. The figure is the server process's CPU
time (user + system, from the kernel) over its ``K`` notifications divided by its
deliveries; nats-server's CPU is reported beside JetStream's. Deliveries are counted per
watch: every watch must get every event exactly once and in order (each event carries its
number), and a round with any watch missing, repeating or reordering an event fails.

Memory per idle watch (aviso in-memory and the raw floor): ``2,000`` idle watches opened on
a fresh server; the server's RSS growth, the kernel's socket buffers of the server's
sockets (``ss -tm``: receive, send, forward-allocated, queued, option and backlog memory),
and the kernel objects of a connection (``/proc/slabinfo`` when readable: the TCP socket,
its inode, file, dentry and epoll entries; both ends of a loopback connection are on this
machine, so half the growth is counted), each divided by the watches.

Raw rounds are written with :func:`benchmarks.results.write_results`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from multiprocessing.connection import Connection
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import psutil

from aviso_loadtests.servers import free_port, raw_post, wait_until
from benchmarks.core import CONFIG, notification
from benchmarks.jetstream import jetstream_config
from benchmarks.load_generators import (
    OPEN_CONCURRENCY,
    OPEN_TIMEOUT,
    generator_processes,
    receive,
    run_generator,
    source_address,
)
from benchmarks.results import spread, write_results
from benchmarks.watchers import import_path_of
from benchmarks.watchers import publish as publish_live
from tests.support.nats import nats_server
from tests.support.pipelined import post_many
from tests.support.process import aviso_process, with_pythonpath

SERVERS = ("aviso", "jetstream", "starlette", "raw")
GENERATORS = 2
GAP_SECONDS = 0.08
DELIVERY_TIMEOUT = 120.0
SETTLE_SECONDS = 2.0
IDLE_WATCHES = 2_000
BATCHES = 4
MAX_FAILED_ROUNDS = 2
SEQ = b'"seq":'
OPENED = b"connection_established"
QUIET = "sse_heartbeat_interval_sec: 3600"
"""No heartbeats during a round: the figure is about deliveries."""
SLABS = ("TCP", "sock_inode_cache", "filp", "dentry", "eventpoll_epi", "eventpoll_pwq")
SKMEM_FIELDS = ("r", "t", "f", "w", "o", "bl", "d")


# -- load generators ----------------------------------------------------------------------------


class Tally:
    """Per-watch delivery checks of one generator process."""

    def __init__(self) -> None:
        self.opened = 0
        self.errors = 0
        """Events received out of order or twice, over every watch."""
        self.complete = 0
        self.target = 0
        self.all_open = asyncio.Event()
        self.done = asyncio.Event()
        self.expected_open = 0
        self.refusals: list[str] = []

    def check_open(self) -> None:
        if self.opened >= self.expected_open:
            self.all_open.set()


class CountingWatch(asyncio.Protocol):
    """One watch: checks that event numbers arrive as 0, 1, 2, ... exactly once each."""

    def __init__(self, request: bytes, tally: Tally) -> None:
        self._request = request
        self._tally = tally
        self._buffer = b""
        self._open = False
        self.next = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self._request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data
        if not self._open:
            if buffer.startswith(b"HTTP/1.1 ") and not buffer.startswith(b"HTTP/1.1 200"):
                self._tally.refusals.append(buffer[:12].decode("latin-1"))
                self._buffer = b"\xff"  # never parsed again: the status is counted once
                return
            if OPENED not in buffer:
                self._buffer = buffer[-64:]
                return
            self._open = True
            buffer = buffer[buffer.index(OPENED) :]
            self._tally.opened += 1
            self._tally.check_open()
        tally = self._tally
        while True:
            start = buffer.find(SEQ)
            if start < 0:
                break
            at = start + len(SEQ)
            end = at
            while end < len(buffer) and buffer[end : end + 1] in b" 0123456789":
                end += 1
            if end == len(buffer):
                break  # the number may go on in the next read
            number = int(buffer[at:end])
            if number != self.next:
                tally.errors += 1
            self.next = number + 1
            if number + 1 == tally.target:
                tally.complete += 1
                if tally.complete >= tally.opened:
                    tally.done.set()
            buffer = buffer[end:]
        self._buffer = buffer[-32:]


class Group:
    """The watches a generator holds on one server."""

    def __init__(self, bodies: list[str]) -> None:
        self.tally = Tally()
        self.tally.expected_open = len(bodies)
        self.watches = [
            CountingWatch(raw_post("/api/v1/watch", body), self.tally) for body in bodies
        ]


async def _generate(source: str, pipe: Connection) -> None:
    """Commands ``(name, (group, argument))``: watches are held in groups, one per server."""
    loop = asyncio.get_running_loop()
    groups: dict[str, Group] = {}
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)
    while True:
        command, payload = await loop.run_in_executor(None, pipe.recv)
        if command == "stop":
            return
        key, argument = payload
        if command == "open":
            port, bodies = argument
            group = groups[key] = Group(bodies)

            async def open_one(watch: CountingWatch, port: int = port) -> None:
                async with gate:
                    await loop.create_connection(
                        lambda: watch, "127.0.0.1", port, local_addr=(source, 0)
                    )

            await asyncio.wait_for(
                asyncio.gather(*(open_one(w) for w in group.watches)), OPEN_TIMEOUT
            )
            with suppress(TimeoutError):
                await asyncio.wait_for(group.tally.all_open.wait(), OPEN_TIMEOUT)
            pipe.send((group.tally.opened, group.tally.refusals))
        elif command == "expect":
            tally = groups[key].tally
            tally.target, tally.complete = argument, 0
            tally.done = asyncio.Event()
            for watch in groups[key].watches:
                if watch.next >= argument:
                    tally.complete += 1
            if tally.complete >= tally.opened:
                tally.done.set()
            pipe.send("armed")
        elif command == "wait":
            tally = groups[key].tally
            with suppress(TimeoutError):
                await asyncio.wait_for(tally.done.wait(), DELIVERY_TIMEOUT)
            pipe.send((tally.complete, tally.errors, [w.next for w in groups[key].watches]))
        elif command == "close":
            for watch in groups.pop(key, Group([])).watches:
                if watch.transport is not None:
                    watch.transport.close()
            await asyncio.sleep(0.2)
            pipe.send("closed")


def generator(source: str, pipe: Connection) -> None:
    run_generator(_generate(source, pipe))


# -- servers ------------------------------------------------------------------------------------


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


@contextmanager
def baseline(kind: str) -> Iterator[tuple[int, psutil.Process]]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.fanout_baselines", kind, str(port)],
        stderr=subprocess.DEVNULL,
    )
    warm = notification("warm", 0, {"seq": 0})

    def answers() -> bool:
        try:
            return asyncio.run(post_many(port, 1, lambda n: warm, 1)) == {200: 1}
        except (OSError, IndexError, ValueError):  # not listening yet, or closed on us
            return False

    try:
        wait_until(answers, process, f"fanout baseline {kind}")
        yield port, psutil.Process(process.pid)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:  # still draining open streams
            process.kill()
            process.wait(10)


@contextmanager
def aviso(
    folder: Path, config: str, name: str, code: Path | None
) -> Iterator[tuple[int, psutil.Process]]:
    """An aviso server of this tree, or of the packages under ``code``."""
    path = folder / f"{name}.yaml"
    path.write_text(config.replace("sse_heartbeat_interval_sec: 30", QUIET))
    env = with_pythonpath(code) if code is not None else None
    with aviso_process(path, folder / f"{name}.log", env) as (url, process):
        yield int(url.rsplit(":", 1)[1]), psutil.Process(process.pid)


@contextmanager
def servers(
    folder: Path, code: Path | None
) -> Iterator[dict[str, tuple[int, psutil.Process, psutil.Process | None]]]:
    with ExitStack() as stack:
        nats = stack.enter_context(nats_server(folder / "nats"))
        assert nats.process is not None
        nats_process = psutil.Process(nats.process.pid)
        running: dict[str, tuple[int, psutil.Process, psutil.Process | None]] = {}
        port, process = stack.enter_context(aviso(folder, CONFIG, "aviso", code))
        running["aviso"] = (port, process, None)
        port, process = stack.enter_context(
            aviso(folder, jetstream_config(nats.url, 100), "jetstream", code)
        )
        running["jetstream"] = (port, process, nats_process)
        for kind in ("starlette", "raw"):
            port, process = stack.enter_context(baseline(kind))
            running[kind] = (port, process, None)
        yield running


def publish(port: int, first: int, count: int, gap: float) -> None:
    """Notifications ``first`` .. ``first + count - 1`` to run ``live``, ``gap`` s apart,
    each carrying its number."""
    publish_live(port, count, gap, first, lambda number: {"seq": number})


WATCH_BODY = json.dumps({"event_type": "bench", "identifier": {"run": "live"}})


def command(pipes: list[Connection], name: str, key: str, arguments: list[Any]) -> list[Any]:
    """Send ``name`` about group ``key`` to every generator, one argument each; the answers."""
    for pipe, argument in zip(pipes, arguments, strict=True):
        pipe.send((name, (key, argument)))
    return [receive(pipe, OPEN_TIMEOUT + DELIVERY_TIMEOUT) for pipe in pipes]


def fan_out(
    pipes: list[Connection],
    running: dict[str, tuple[int, psutil.Process, psutil.Process | None]],
    order: Sequence[str],
    watches: int,
    events: int,
    batches: int,
) -> dict[str, dict[str, Any]]:
    """Every server's figures for one round: ``watches`` on each server at once, then
    ``batches`` batches of ``events / batches`` notifications per server, the servers taking
    turns (rotated per batch), so that a change in the machine's other load falls on all."""
    count = len(pipes)
    share = [[WATCH_BODY] * len(range(i, watches, count)) for i in range(count)]
    for name in order:
        port = running[name][0]
        openings = command(pipes, "open", name, [(port, bodies) for bodies in share])
        opened = sum(opening[0] for opening in openings)
        if opened != watches:
            refusals = [status for opening in openings for status in opening[1]]
            raise RuntimeError(
                f"{name}: {opened} of {watches} watches opened; refused: {refusals[:5]}"
            )
    warm = 2
    for name in order:
        command(pipes, "expect", name, [warm] * count)
        publish(running[name][0], 0, warm, GAP_SECONDS)
        command(pipes, "wait", name, [None] * count)
    per_batch = max(1, events // batches)
    cpu = dict.fromkeys(order, 0.0)
    extra_cpu = dict.fromkeys(order, 0.0)
    elapsed = dict.fromkeys(order, 0.0)
    answers: dict[str, list[Any]] = {}
    first = warm
    for batch in range(batches):
        shift = batch % len(order)
        for name in [*order[shift:], *order[:shift]]:
            port, process, extra = running[name]
            command(pipes, "expect", name, [first + per_batch] * count)
            before = cpu_seconds(process)
            extra_before = cpu_seconds(extra) if extra is not None else 0.0
            started = time.perf_counter()
            publish(port, first, per_batch, GAP_SECONDS)
            answers[name] = command(pipes, "wait", name, [None] * count)
            elapsed[name] += time.perf_counter() - started
            cpu[name] += cpu_seconds(process) - before
            if extra is not None:
                extra_cpu[name] += cpu_seconds(extra) - extra_before
        first += per_batch
    figures: dict[str, dict[str, Any]] = {}
    published = per_batch * batches
    for name in order:
        command(pipes, "close", name, [None] * count)
        complete = sum(answer[0] for answer in answers[name])
        errors = sum(answer[1] for answer in answers[name])
        positions = [n for answer in answers[name] for n in answer[2]]
        deliveries = watches * published
        figures[name] = {
            "watches": watches,
            "events": published,
            "batches": batches,
            "deliveries": deliveries,
            "watches_complete": complete,
            "order_errors": errors,
            "watches_short": sum(1 for n in positions if n < first),
            "watches_over": sum(1 for n in positions if n > first),
            "cpu_seconds": cpu[name],
            "us_per_delivery": cpu[name] / deliveries * 1e6,
            "elapsed_seconds": elapsed[name],
        }
        if running[name][2] is not None:
            figures[name]["nats_us_per_event"] = extra_cpu[name] / published * 1e6
        if complete != watches or errors:
            raise RuntimeError(f"{name}: deliveries per watch wrong: {figures[name]}")
    return figures


# -- memory -------------------------------------------------------------------------------------


def socket_buffers(port: int) -> tuple[int, int]:
    """(sockets, bytes of kernel buffer memory) of the established server sockets on
    ``port`` (``ss -tm``)."""
    output = subprocess.run(
        ["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    sockets = total = 0
    for line in output.splitlines():
        if "skmem:(" not in line:
            continue
        sockets += 1
        fields = line.split("skmem:(", 1)[1].split(")", 1)[0].split(",")
        for field in fields:
            name = field.rstrip("0123456789")
            if name in SKMEM_FIELDS:
                total += int(field[len(name) :])
    return sockets, total


def slab_bytes() -> int | None:
    """Bytes held by the kernel object caches of a connection, ``None`` if unreadable."""
    try:
        lines = Path("/proc/slabinfo").read_text().splitlines()
    except OSError:
        return None
    total = 0
    for line in lines[2:]:
        parts = line.split()
        if parts and parts[0] in SLABS:
            total += int(parts[1]) * int(parts[3])
    return total


def sockstat_pages() -> int:
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            parts = line.split()
            return int(parts[parts.index("mem") + 1])
    return 0


def idle_memory(
    pipes: list[Connection], port: int, process: psutil.Process, watches: int, aviso: bool
) -> dict[str, float]:
    bodies = [
        json.dumps({"event_type": "bench", "identifier": {"run": f"idle{n}"}}) if aviso else "{}"
        for n in range(watches)
    ]
    time.sleep(SETTLE_SECONDS)
    rss = process.memory_info().rss
    slabs = slab_bytes()
    pages = sockstat_pages()
    share = [bodies[i :: len(pipes)] for i in range(len(pipes))]
    opened = sum(answer[0] for answer in command(pipes, "open", "idle", [(port, p) for p in share]))
    time.sleep(SETTLE_SECONDS)
    rss_after = process.memory_info().rss
    slabs_after = slab_bytes()
    pages_after = sockstat_pages()
    sockets, buffers = socket_buffers(port)
    command(pipes, "close", "idle", [None] * len(pipes))
    if opened != watches:
        raise RuntimeError(f"{opened} of {watches} idle watches opened")
    figures = {
        "rss_kib": (rss_after - rss) / watches / 1024,
        "server_sockets": sockets,
        "socket_buffers_kib": buffers / max(sockets, 1) / 1024,
        "sockstat_kib_per_connection": (pages_after - pages) * 4096 / watches / 1024,
    }
    kernel = figures["socket_buffers_kib"]
    if slabs is not None and slabs_after is not None:
        figures["socket_objects_kib"] = (slabs_after - slabs) / 2 / watches / 1024
        kernel += figures["socket_objects_kib"]
    figures["total_kib"] = figures["rss_kib"] + kernel
    return figures


# -- coordinator --------------------------------------------------------------------------------


def measure_round(
    pipes: list[Connection],
    folder: Path,
    code: Path | None,
    order: Sequence[str],
    round_: int,
    args: argparse.Namespace,
    events: int,
) -> dict[str, Any]:
    """One round on fresh servers: fan-out on all four, then idle memory (aviso, raw)."""
    with servers(folder, code) as running:
        record: dict[str, Any] = {"round": round_ + 1, "order": list(order)}
        record.update(fan_out(pipes, running, order, args.watches, events, args.batches))
        for name in order:
            figure = record[name]["us_per_delivery"]
            print(f"  round {round_ + 1} {name}: {figure:.2f} us/delivery", flush=True)
        for name in ("aviso", "raw"):
            port, process, _ = running[name]
            record[f"{name}_idle"] = idle_memory(pipes, port, process, args.idle, name == "aviso")
            print(f"  round {round_ + 1} {name} idle: {record[f'{name}_idle']}")
    floor = max(record["raw"]["us_per_delivery"], 1e-9)
    record["ratios"] = {
        "aviso_over_raw": record["aviso"]["us_per_delivery"] / floor,
        "starlette_over_raw": record["starlette"]["us_per_delivery"] / floor,
        "jetstream_over_aviso": record["jetstream"]["us_per_delivery"]
        / record["aviso"]["us_per_delivery"],
    }
    print(f"  round {round_ + 1} ratios: {record['ratios']}", flush=True)
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one round, fewer events")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--watches", type=int, default=1_500)
    parser.add_argument("--events", type=int, default=None, help="events per round (default 60)")
    parser.add_argument("--batches", type=int, default=BATCHES, help="turns per server")
    parser.add_argument("--idle", type=int, default=IDLE_WATCHES)
    parser.add_argument("--label", default="", help="appended to the results file's name")
    parser.add_argument(
        "--code", type=Path, default=None, help="serve aviso from this checkout instead"
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    events = args.events or (20 if args.quick else 60)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    records: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    sources = [source_address(7, index) for index in range(GENERATORS)]
    with (
        TemporaryDirectory() as tmp,
        generator_processes(generator, [(source,) for source in sources]) as pipes,
    ):
        code = import_path_of(args.code, Path(tmp)) if args.code is not None else None
        try:
            for round_ in range(rounds + MAX_FAILED_ROUNDS):
                if len(records) == rounds:
                    break
                folder = Path(tmp) / f"round{round_}"
                folder.mkdir()
                order = SERVERS[round_ % len(SERVERS) :] + SERVERS[: round_ % len(SERVERS)]
                try:
                    record = measure_round(pipes, folder, code, order, round_, args, events)
                except RuntimeError as exc:
                    # A loaded machine can fail an opening (a server refuses a watch it
                    # could not set up in time): the round is reported and run again.
                    print(f"  round {round_ + 1} failed: {exc}", flush=True)
                    failed.append({"round": round_ + 1, "error": str(exc)})
                    for name in (*SERVERS, "idle"):
                        command(pipes, "close", name, [None] * len(pipes))
                    continue
                records.append(record)
        finally:
            for pipe in pipes:
                with suppress(OSError):
                    pipe.send(("stop", None))
    if not records:
        raise RuntimeError(f"every round failed: {failed}")
    summary: dict[str, Any] = {"failed_rounds": failed}
    for name in SERVERS:
        summary[f"{name}_us_per_delivery"] = spread([r[name]["us_per_delivery"] for r in records])
    for key in records[0]["ratios"]:
        summary[key] = spread([r["ratios"][key] for r in records])
    for name in ("aviso", "raw"):
        for key in records[0][f"{name}_idle"]:
            summary[f"{name}_idle_{key}"] = spread([r[f"{name}_idle"][key] for r in records])
    path = write_results("fanout_cpu" + (f"-{args.label}" if args.label else ""), records, summary)
    print(f"load average at end: {os.getloadavg()}")
    print(json.dumps(summary, indent=1))
    print(f"raw rounds: {path}")
    return summary


if __name__ == "__main__":
    main()
