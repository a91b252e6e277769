"""Scale-out on JetStream: what ``aviso-server serve --workers N`` adds, measured in one run.

  python -m benchmarks.scale_out [--quick] [--workers 1,2,4,8]
      [--fan-out 100000x8,10000x8,10000x1] [--mode auto|workers|processes] [--budget S]

Every service is ``aviso-server serve --workers N --embedded-nats DIR`` on 127.0.0.1 with a
fresh store (``--mode processes``: N hand-started single-process servers on N ports sharing
one nats-server, the load spread over the ports; ``auto`` uses ``--workers`` where ``serve``
has it). Load generators are processes of their own on uvloop, one protocol object per socket
(:mod:`benchmarks.load_generators`), each bound to a loopback source address of its own.

- notify: for every N, ``N x --generators-per-worker`` generator processes POST
  notifications in a closed loop over ``--connections`` keep-alive connections per worker
  (one request in flight on each); answers/s in a window after a warm-up;
- raw: the ceiling, nats-py publishing the message aviso publishes on the backend's own
  publish-and-await-ack path (:func:`benchmarks.jetstream_publish.ceiling_publish`: same
  subject, payload and headers), from as many processes as the notify runs' workers,
  ``--connections`` publishes in flight per process, against a nats-server of the same kind
  (JetStream, file storage); with the most any of those processes spent in CPU per publish;
- fan-out (``WATCHESxN``): ``WATCHES`` live watches of one stream held by ``max(N, WATCHES /
  12,500)`` generators; notifications whose payload carries the publisher's clock are then
  posted at each rate (1 and 5 per second): p50/p99 publish-to-receive per delivery,
  deliveries/s (deliveries over the time from the first publish to the last receive plus
  one interval, so that a server keeping up shows the offered rate x watches) and
  deliveries missing;
  also how long opening took, the server's RSS growth per idle watch (all aviso processes:
  supervisor and workers; nats-server excluded; before and after opening) and how evenly the
  watches spread over the workers (the most descriptors a worker gained over the mean).

Then the ratios: notify with the most workers over one worker, and notify over raw nats-py
from the same number of processes. Parts run in order of importance; one that would end
after ``--budget`` seconds is skipped, so a run always stops in time; one that fails is
reported (with the tail of its server's log) and the next one runs. Progress lines are
flushed as they come, a ``figures`` line (that part's, as JSON) follows every part, then the
goals' figures beside their goals; the last line is every figure as JSON (printed on SIGTERM
or an error too).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import resource
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from tempfile import TemporaryDirectory

import psutil

from aviso_loadtests.report import percentile
from aviso_loadtests.servers import free_port, nats_server
from benchmarks.core import notification
from benchmarks.fanout_cpu import slab_bytes, socket_buffers
from benchmarks.jetstream import jetstream_config
from benchmarks.load_generators import (
    RAW_STREAM,
    RAW_SUBJECTS,
    generator_processes,
    notify_generator,
    raw_publish_generator,
    receive,
    source_address,
    start_window,
    watch_generator,
)
from tests.support.process import (
    aviso_command,
    aviso_process,
    clean_environment,
    run_aviso,
    stop,
    wait_until_healthy,
)

WATCHES_PER_GENERATOR = 12_500
"""Below the benchmark machine's 20,000 descriptors per process, and below the ~28,000
ephemeral ports of one source/destination address pair."""
MAX_CONNECTIONS = 250_000
LISTEN_TIMEOUT = 20.0
SETTLE_SECONDS = 2.0
"""Pause before an RSS reading, so that the server has finished the openings' work."""
DELIVERY_TIMEOUT = 20.0
"""How long after the last publish a fan-out waits for the deliveries still missing."""
WATCH_BODY = json.dumps({"event_type": "bench", "identifier": {"run": "live"}})
WARM_WATCHES_PER_WORKER = 4


@dataclass(frozen=True)
class Sizes:
    workers: tuple[int, ...]
    fan_outs: tuple[tuple[int, int], ...]
    """(watches, workers) per fan-out."""
    rates: tuple[tuple[float, int], ...]
    """(notifications/s, notifications) per fan-out phase."""
    warm: float
    duration: float
    connections: int
    """Notify connections per server worker, raw publishes in flight per process."""
    budget: float


FULL = Sizes(
    workers=(1, 2, 4, 8),
    fan_outs=((100_000, 8), (10_000, 8), (10_000, 1)),
    rates=((1.0, 10), (5.0, 25)),
    warm=1.0,
    duration=5.0,
    connections=64,
    budget=300.0,
)
QUICK = Sizes(
    workers=(1, 2),
    fan_outs=((200, 2),),
    rates=((1.0, 3), (5.0, 5)),
    warm=0.5,
    duration=2.0,
    connections=16,
    budget=float("inf"),
)


def fan_out_keys(watches: int, workers: int, rates: tuple[tuple[float, int], ...]) -> list[str]:
    """Every figure one fan-out reports, in the JSON summary's naming."""
    prefix = f"fanout_{watches}_w{workers}"
    names = ("generators", "open_s", "idle_kib_per_watch", "idle_kernel_kib_per_watch")
    keys = [f"{prefix}_{name}" for name in (*names, "idle_total_kib_per_watch")]
    keys.append(f"{prefix}_max_worker_share")
    for rate, _ in rates:
        keys += [
            f"{prefix}_{rate:g}hz_{name}"
            for name in ("p50_ms", "p99_ms", "deliveries_per_s", "missing", "duplicated")
        ]
    return keys


def expected_keys(sizes: Sizes) -> list[str]:
    """Every figure a complete run of ``sizes`` reports."""
    keys = []
    for workers in sizes.workers:
        keys += [f"notify_w{workers}_rps", f"notify_w{workers}_generators"]
        keys += [f"raw_p{workers}_rps", f"raw_p{workers}_client_cpu_us"]
        keys.append(f"notify_over_raw_w{workers}")
    keys.append(f"notify_w{max(sizes.workers)}_over_w1")
    for watches, workers in sizes.fan_outs:
        keys += fan_out_keys(watches, workers, sizes.rates)
    return keys


# -- the services ----------------------------------------------------------------------------


@dataclass
class Service:
    """A running aviso service: where it listens and which processes it is made of."""

    ports: list[int]
    workers: int
    processes: Callable[[], list[psutil.Process]]
    """The aviso processes (supervisor and workers; nats-server excluded)."""

    def rss(self) -> int:
        return sum(_alive(lambda p: p.memory_info().rss, process) for process in self.processes())

    def descriptors(self) -> dict[int, int]:
        return {p.pid: _alive(lambda p: p.num_fds(), p) for p in self.processes()}


def _alive(read: Callable[[psutil.Process], int], process: psutil.Process) -> int:
    try:
        return read(process)
    except psutil.NoSuchProcess:
        return 0


def service_config(config: Path, nats_url: str) -> Path:
    """benchmarks.core's schema on JetStream keeping every message, connection cap lifted."""
    text = jetstream_config(nats_url, 1000) + f"limits: {{max_connections: {MAX_CONNECTIONS}}}\n"
    config.write_text(text)
    return config


def _listening(process: psutil.Process, port: int) -> bool | None:
    """Whether ``process`` listens on ``port``; None where its sockets cannot be read."""
    # psutil before 6.0 names it connections.
    read = getattr(process, "net_connections", None) or process.connections
    try:
        connections = read(kind="tcp")
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return None
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections)


def wait_for_workers(supervisor: psutil.Process, port: int, workers: int) -> None:
    """Until ``workers`` processes under ``supervisor`` listen on ``port`` (bounded)."""
    deadline = time.monotonic() + LISTEN_TIMEOUT
    while True:
        seen = [_listening(child, port) for child in supervisor.children(recursive=True)]
        if None in seen:
            print("    (cannot see the workers' sockets; measuring once one answers)")
            return
        if sum(bool(listens) for listens in seen) >= workers:
            return
        if time.monotonic() > deadline:
            print(f"    (not all {workers} workers listen after {LISTEN_TIMEOUT:g} s)")
            return
        time.sleep(0.1)


def _aviso_processes(supervisor: psutil.Process) -> list[psutil.Process]:
    try:
        children = supervisor.children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [supervisor, *(c for c in children if _alive(lambda p: "nats" not in p.name(), c))]


@contextmanager
def workers_service(folder: Path, workers: int, run: int) -> Iterator[Service]:
    """``aviso-server serve --workers N --embedded-nats`` with a fresh store, once every
    worker listens (a worker that is not listening yet would get no connections)."""
    # The URL is never used: --embedded-nats replaces it.
    config = service_config(folder / f"aviso-{run}.yaml", "nats://127.0.0.1:4222")
    port = free_port()
    store = folder / f"nats-{run}"
    command = aviso_command(
        "serve", "--config", str(config), "--port", str(port), "--workers", str(workers)
    )
    command += ["--embedded-nats", str(store)]
    with (folder / f"aviso-{run}.log").open("wb") as log:
        process = subprocess.Popen(
            command, stderr=log, stdout=subprocess.DEVNULL, env=clean_environment()
        )
    supervisor = psutil.Process(process.pid)
    started: list[psutil.Process] = []
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}", process)
        if workers > 1:
            wait_for_workers(supervisor, port, workers)
        started = supervisor.children(recursive=True)
        yield Service([port], workers, lambda: _aviso_processes(supervisor))
    finally:
        stop(process, 30.0)
        for child in started:  # nothing may outlive its supervisor into the next part
            if child.is_running():
                child.kill()


@contextmanager
def processes_service(folder: Path, count: int, run: int) -> Iterator[Service]:
    """``count`` single-process servers, each on its own port, sharing one nats-server."""
    with ExitStack() as stack:
        nats = stack.enter_context(nats_server(folder / f"nats-{run}"))
        config = service_config(folder / f"aviso-{run}.yaml", nats.url)
        ports, processes = [], []
        for index in range(count):
            url, process = stack.enter_context(
                aviso_process(config, folder / f"aviso-{run}-{index}.log")
            )
            ports.append(int(url.rsplit(":", 1)[1]))
            processes.append(psutil.Process(process.pid))
        yield Service(ports, count, lambda: processes)


def serve_has_workers() -> bool:
    return "--workers" in run_aviso("serve", "--help").stdout


# -- the parts -------------------------------------------------------------------------------


@dataclass
class Run:
    """One benchmark run: its settings, where it keeps files, and the figures so far."""

    sizes: Sizes
    folder: Path
    mode: str
    generators_per_worker: int
    figures: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    services: int = 0
    groups: int = 0

    @contextmanager
    def service(self, workers: int) -> Iterator[Service]:
        self.services += 1
        start = workers_service if self.mode == "workers" else processes_service
        with start(self.folder, workers, self.services) as service:
            yield service

    def show_logs(self, lines: int = 20) -> None:
        """The last lines of the latest service's logs (after a failure)."""
        for log in sorted(self.folder.glob(f"aviso-{self.services}*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            print(f"    --- {log.name}:", *tail, sep="\n    ", flush=True)

    def source_group(self) -> int:
        """A fresh set of source addresses for the next part's generators."""
        self.groups += 1
        return self.groups


def notify_part(run: Run, workers: int) -> None:
    sizes = run.sizes
    generators = workers * run.generators_per_worker
    connections = max(1, sizes.connections * workers // generators)
    requests = [notification("scale", n, {"n": n}) for n in range(1000)]
    print(
        f"notify, {workers} worker(s): {generators} generator process(es) x {connections}"
        f" connections, {sizes.warm:g} s warm-up, {sizes.duration:g} s window",
        flush=True,
    )
    group = run.source_group()
    with run.service(workers) as service:
        arguments = [
            (service.ports, source_address(group, index), requests, connections, 1)
            for index in range(generators)
        ]
        with generator_processes(notify_generator, arguments) as pipes:
            start_window(pipes, sizes.warm, sizes.duration)
            results = [receive(pipe, sizes.warm + sizes.duration + 60) for pipe in pipes]
    statuses: dict[int, int] = {}
    for _, counted in results:
        for status, count in counted.items():
            statuses[status] = statuses.get(status, 0) + count
    rate = sum(rate for rate, _ in results)
    run.figures[f"notify_w{workers}_rps"] = rate
    run.figures[f"notify_w{workers}_generators"] = generators
    print(f"    {rate:9.0f} notifies/s   answers by status: {statuses}", flush=True)
    if set(statuses) != {200}:
        raise RuntimeError(f"notify answered {statuses}")


async def _create_raw_stream(url: str) -> None:
    import nats

    connection = await nats.connect(url)
    try:
        await connection.jetstream().add_stream(
            name=RAW_STREAM, subjects=[RAW_SUBJECTS], max_msgs_per_subject=-1
        )
    finally:
        await connection.close()


def raw_part(run: Run, processes: int) -> None:
    sizes = run.sizes
    print(
        f"raw nats-py publish+ack, {processes} process(es) x {sizes.connections} in flight",
        flush=True,
    )
    with nats_server(run.folder / f"raw-nats-{processes}") as nats:
        asyncio.run(_create_raw_stream(nats.url))
        arguments = [(nats.url, sizes.connections)] * processes
        with generator_processes(raw_publish_generator, arguments) as pipes:
            start_window(pipes, sizes.warm, sizes.duration)
            reports = [receive(pipe, sizes.warm + sizes.duration + 60) for pipe in pipes]
    rate = sum(rate for rate, _ in reports)
    cpu_us = max(cpu_us for _, cpu_us in reports)
    run.figures[f"raw_p{processes}_rps"] = rate
    run.figures[f"raw_p{processes}_client_cpu_us"] = cpu_us
    print(f"    {rate:9.0f} publishes/s, client CPU {cpu_us:.1f} us per publish", flush=True)


def content_length(head: bytes) -> int:
    """The Content-Length of a response head (0 without one)."""
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def publish_paced(ports: list[int], first_step: int, count: int, rate: float) -> float:
    """``count`` notifications to run ``live`` at ``rate`` per second (on schedule, not
    after each answer), round-robin over ``ports``, each stamped when sent; the wall-clock
    time of the first."""

    async def publish() -> float:
        connections = [await asyncio.open_connection("127.0.0.1", port) for port in ports]
        start = time.time()
        try:
            for index in range(count):
                await asyncio.sleep(max(0.0, start + index / rate - time.time()))
                reader, writer = connections[index % len(connections)]
                body = notification("live", first_step + index, {"sent_at": time.time()})
                writer.write(body)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(f"notify answered {head[:12]!r}")
                await reader.readexactly(content_length(head))
        finally:
            for _, writer in connections:
                writer.close()
        return start

    return asyncio.run(publish())


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (index < total % parts) for index in range(parts)]


def _open(pipes: list[Connection], total: int) -> None:
    for pipe, share in zip(pipes, _split(total, len(pipes)), strict=True):
        pipe.send(("open", share))
    refused = sum(receive(pipe, 180.0)[1] for pipe in pipes)
    if refused:
        raise RuntimeError(f"{refused} of {total} watches refused or closed before opening")


def _kernel_kib_per_watch(service: Service, slabs_before: int | None, opened: int) -> float:
    """The kernel's memory per watch connection: the socket buffers of the service's
    sockets (``ss -tm``) and, where ``/proc/slabinfo`` is readable, half the connection
    objects the opening added (both ends are on this machine)."""
    buffers = sockets = 0
    for port in service.ports:
        try:
            port_sockets, port_buffers = socket_buffers(port)
        except (OSError, subprocess.CalledProcessError):  # no `ss` there: buffers unknown
            break
        sockets += port_sockets
        buffers += port_buffers
    kib = buffers / max(1, sockets) / 1024
    slabs_after = slab_bytes()
    if slabs_before is not None and slabs_after is not None:
        kib += (slabs_after - slabs_before) / 2 / opened / 1024
    return kib


@dataclass
class Collected:
    """Deliveries of a collect: latencies (s), the last one's wall-clock time, connections
    lost, and deliveries missing and duplicated, counted watch by watch."""

    latencies: list[float] = field(default_factory=list)
    last: float = 0.0
    lost: int = 0
    missing: int = 0
    duplicated: int = 0


def _collect(pipes: list[Connection], per_watch: int) -> Collected:
    """Every generator's deliveries since the last collect."""
    for pipe in pipes:
        pipe.send(("collect", (per_watch, DELIVERY_TIMEOUT)))
    collected = Collected()
    for pipe in pipes:
        latencies, last, lost, short, extra = receive(pipe, DELIVERY_TIMEOUT + 60)
        collected.latencies += latencies
        collected.last = max(collected.last, last)
        collected.lost += lost
        collected.missing += short
        collected.duplicated += extra
    return collected


def fan_out_part(run: Run, watches: int, workers: int) -> None:
    sizes = run.sizes
    prefix = f"fanout_{watches}_w{workers}"
    generators = max(workers, math.ceil(watches / WATCHES_PER_GENERATOR))
    warm = min(watches, WARM_WATCHES_PER_WORKER * workers)
    print(
        f"fan-out to {watches} live watches, {workers} worker(s), {generators} generator"
        " process(es)",
        flush=True,
    )
    group = run.source_group()
    with run.service(workers) as service:
        arguments = [
            (service.ports, source_address(group, index), WATCH_BODY) for index in range(generators)
        ]
        with generator_processes(watch_generator, arguments) as pipes:
            try:
                # Warm-up: the first watch and notify of a worker import and cache what
                # every later one shares, which is no watch's own memory.
                _open(pipes, warm)
                publish_paced(service.ports, 0, 1, 1.0)
                _collect(pipes, 1)
                time.sleep(SETTLE_SECONDS)
                rss_before, fds_before = service.rss(), service.descriptors()
                slabs_before = slab_bytes()
                opening = time.perf_counter()
                _open(pipes, watches - warm)
                opened = time.perf_counter() - opening
                time.sleep(SETTLE_SECONDS)
                rss_after, fds_after = service.rss(), service.descriptors()
                opened_now = max(1, watches - warm)
                idle = (rss_after - rss_before) / opened_now / 1024
                kernel = _kernel_kib_per_watch(service, slabs_before, opened_now)
                gained = [fds_after[pid] - fds_before.get(pid, 0) for pid in fds_after]
                share = max(gained) / (sum(gained) / workers) if sum(gained) else 0.0
                run.figures.update(
                    {
                        f"{prefix}_generators": generators,
                        f"{prefix}_open_s": opened,
                        f"{prefix}_idle_kib_per_watch": idle,
                        f"{prefix}_idle_kernel_kib_per_watch": kernel,
                        f"{prefix}_idle_total_kib_per_watch": idle + kernel,
                        f"{prefix}_max_worker_share": share,
                    }
                )
                print(
                    f"    opened in {opened:.1f} s; idle watch {idle:.1f} KiB (RSS of"
                    f" {len(fds_after)} aviso processes) + {kernel:.1f} KiB in the kernel ="
                    f" {idle + kernel:.1f} KiB; most loaded worker {share:.2f}x its share",
                    flush=True,
                )
                step = 1
                for rate, count in sizes.rates:
                    first = publish_paced(service.ports, step, count, rate)
                    step += count
                    collected = _collect(pipes, count)
                    # Each notification stands for 1/rate s: a server that keeps up
                    # delivers at the offered rate, rate x watches.
                    span = collected.last - first + 1 / rate
                    _record_phase(run, prefix, rate, watches * count, collected, span)
                    if collected.lost:
                        print(f"    {collected.lost} watch connection(s) lost", flush=True)
            finally:
                for pipe in pipes:
                    pipe.send(("close", None))


def _record_phase(
    run: Run, prefix: str, rate: float, expected: int, collected: Collected, span: float
) -> None:
    key = f"{prefix}_{rate:g}hz"
    latencies = collected.latencies
    if latencies:
        latencies.sort()
        p50 = latencies[len(latencies) // 2] * 1000
        p99 = percentile(latencies, 0.99) * 1000
    else:
        p50 = p99 = math.nan
    delivered = len(latencies) / span if span > 0 else 0.0
    run.figures.update(
        {
            f"{key}_p50_ms": p50,
            f"{key}_p99_ms": p99,
            f"{key}_deliveries_per_s": delivered,
            f"{key}_missing": collected.missing,
            f"{key}_duplicated": collected.duplicated,
        }
    )
    print(
        f"    {rate:g} notification(s)/s: p50 {p50:.1f} ms, p99 {p99:.1f} ms,"
        f" {delivered:,.0f} deliveries/s; counted per watch, {collected.missing} of"
        f" {expected} missing, {collected.duplicated} duplicated",
        flush=True,
    )


def ratios(run: Run) -> None:
    figures = run.figures
    most = max(run.sizes.workers)
    if "notify_w1_rps" in figures and f"notify_w{most}_rps" in figures:
        ratio = figures[f"notify_w{most}_rps"] / figures["notify_w1_rps"]
        figures[f"notify_w{most}_over_w1"] = ratio
        print(f"notify, {most} workers / 1 worker: {ratio:.2f}", flush=True)
    for workers in run.sizes.workers:
        notify, raw = figures.get(f"notify_w{workers}_rps"), figures.get(f"raw_p{workers}_rps")
        if notify and raw:
            figures[f"notify_over_raw_w{workers}"] = notify / raw
            print(
                f"notify, {workers} worker(s) / raw nats-py from {workers} process(es):"
                f" {notify / raw:.2f}",
                flush=True,
            )


def goals(run: Run) -> None:
    """The goals' figures, each beside its goal (for a run at full size)."""
    figures = run.figures
    most = max(run.sizes.workers)
    watches, workers = max(run.sizes.fan_outs)
    prefix = f"fanout_{watches}_w{workers}"
    rows = [
        (f"notify w{most} / w1", f"notify_w{most}_over_w1", ">= 6"),
        (f"notify w{most} / raw p{most}", f"notify_over_raw_w{most}", ">= 0.8"),
        (f"{watches} watches, 1/s, p99 ms", f"{prefix}_1hz_p99_ms", "<= 250"),
    ]
    # The delivery-rate goal is read at each faster rate: one offered above 500,000/s shows
    # what the service sustains rather than only that it keeps up with what it was given.
    for rate, _ in run.sizes.rates:
        if rate > 1:
            key, label = f"{prefix}_{rate:g}hz", f"{watches} watches, {rate:g}/s"
            rows.append((f"{label}, deliveries/s", f"{key}_deliveries_per_s", ">= 500000"))
            rows.append((f"{label}, p99 ms", f"{key}_p99_ms", "<= 1000"))
    rows += [
        (
            f"{watches} watches, KiB per idle watch (RSS + kernel)",
            f"{prefix}_idle_total_kib_per_watch",
            "<= 16",
        ),
    ]
    print("goals (at full size on 16 cores):", flush=True)
    for label, key, goal in rows:
        value = figures.get(key)
        shown = "not measured" if value is None else f"{value:,.2f}"
        print(f"    {label:38} {shown:>14}   goal {goal}", flush=True)


# -- the run ---------------------------------------------------------------------------------


def describe_machine(mode: str) -> None:
    cpu = platform.processor() or "?"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(
        f"machine: {os.cpu_count()} CPUs ({cpu}), {psutil.virtual_memory().total / 2**30:.0f}"
        f" GiB, {platform.platform()}, Python {platform.python_version()}; descriptors"
        f" {soft}/{hard}; load average {os.getloadavg()[0]:.1f}; services: {mode}",
        flush=True,
    )


def parts(run: Run) -> list[tuple[str, float, Callable[[], None]]]:
    """(name, estimated seconds, body) in order of importance: the figures behind the
    goals first (notify at 1 and at the most workers, the raw ceiling there, the fan-outs),
    then the rest of the sweep, so that a run cut short still has them."""
    sizes = run.sizes
    most = max(sizes.workers)
    seconds = 8 + sizes.warm + sizes.duration

    def notify(workers: int) -> tuple[str, float, Callable[[], None]]:
        return f"notify w{workers}", seconds, lambda: notify_part(run, workers)

    def raw(processes: int) -> tuple[str, float, Callable[[], None]]:
        return f"raw p{processes}", seconds, lambda: raw_part(run, processes)

    def fan_out(watches: int, workers: int) -> tuple[str, float, Callable[[], None]]:
        needs = 20 + watches / 5_000 + sum(count / rate for rate, count in sizes.rates)
        return f"fan-out {watches}x{workers}", needs, lambda: fan_out_part(run, watches, workers)

    listed = [notify(1)]
    if most != 1:
        listed.append(notify(most))
    listed.append(raw(most))
    listed += [fan_out(watches, workers) for watches, workers in sizes.fan_outs]
    for workers in sorted(set(sizes.workers) - {1, most}, reverse=True):
        listed += [notify(workers), raw(workers)]
    if most != 1:
        listed.append(raw(1))
    return listed


def _fan_outs(text: str) -> tuple[tuple[int, int], ...]:
    pairs = []
    for item in text.split(","):
        watches, _, workers = item.partition("x")
        pairs.append((int(watches), int(workers)))
    return tuple(pairs)


def _rates(text: str) -> tuple[tuple[float, int], ...]:
    pairs = []
    for item in text.split(","):
        rate, _, count = item.partition("x")
        pairs.append((float(rate), int(count)))
    return tuple(pairs)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a 2-core smoke run")
    parser.add_argument(
        "--workers", type=lambda t: tuple(int(n) for n in t.split(",")), help="notify sweep"
    )
    parser.add_argument("--fan-out", type=_fan_outs, help="WATCHESxWORKERS,... fan-outs")
    parser.add_argument(
        "--rates",
        type=_rates,
        help="RATExCOUNT,... fan-out phases: COUNT notifications at RATE per second each",
    )
    parser.add_argument("--mode", choices=("auto", "workers", "processes"), default="auto")
    parser.add_argument("--generators-per-worker", type=int, default=1)
    parser.add_argument("--connections", type=int, help="notify connections per worker")
    parser.add_argument("--budget", type=float, help="seconds; later parts are skipped")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    sizes = Sizes(
        workers=args.workers or sizes.workers,
        fan_outs=args.fan_out or sizes.fan_outs,
        rates=args.rates or sizes.rates,
        warm=sizes.warm,
        duration=sizes.duration,
        connections=args.connections or sizes.connections,
        budget=args.budget or sizes.budget,
    )
    if 1 not in sizes.workers:
        parser.error("--workers must include 1 (the ratios are over one worker)")
    mode = args.mode
    if mode == "auto":
        mode = "workers" if serve_has_workers() else "processes"
    signal.signal(signal.SIGTERM, _terminated)
    describe_machine(mode)
    with TemporaryDirectory() as folder:
        run = Run(sizes, Path(folder), mode, args.generators_per_worker)
        try:
            for name, seconds, body in parts(run):
                elapsed = time.monotonic() - run.started
                if elapsed + seconds > sizes.budget:
                    print(f"{name}: skipped ({elapsed:.0f} s gone, ~{seconds:.0f} s needed)")
                    continue
                known = set(run.figures)
                try:
                    body()
                except Exception as exc:  # one part's failure must not cost the others
                    print(f"{name}: failed: {exc!r}", flush=True)
                    run.show_logs()
                new = {key: run.figures[key] for key in run.figures if key not in known}
                print(
                    f"    figures ({time.monotonic() - run.started:.0f} s): "
                    + json.dumps(_rounded(new)),
                    flush=True,
                )
            ratios(run)
            goals(run)
        finally:
            print(f"total {time.monotonic() - run.started:.0f} s", flush=True)
            print(json.dumps(_rounded(run.figures)), flush=True)
    return run.figures


def _rounded(figures: dict[str, float]) -> dict[str, float]:
    return {key: round(value, 3) for key, value in figures.items()}


if __name__ == "__main__":
    main()
