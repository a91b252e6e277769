"""Load-generator processes on uvloop with one protocol object per socket (no task, no stream
reader per connection), so that a generator costs far less per request or delivery than the
server it drives.

- :class:`NotifyConnection`: a keep-alive connection POSTing notifications in a closed loop,
  counting the answers completed inside a measuring window;
- :class:`Watch` and :class:`WatchClient`: live watches timestamping every stamped event;
- :func:`notify_generator`, :func:`raw_publish_generator` and :func:`watch_generator`: the
  bodies of generator processes, started by :func:`generator_processes`;
- :func:`source_address`: a distinct loopback source address per generator, since one
  source/destination address pair has only ~28,000 ephemeral ports.

Every generator process raises its descriptor limit to the hard limit first.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection
from typing import Any

from aviso_host.server import raise_descriptor_limit
from aviso_loadtests.servers import raw_post

OPEN_CONCURRENCY = 100
"""Connections a generator process opens at once (the listen backlog is finite)."""
OPEN_TIMEOUT = 120.0
STOP_GRACE = 30.0
STAMP = b'"sent_at":'
OPENED = b"connection_established"
HEAD_END = b"\r\n\r\n"
LENGTH = b"content-length:"


def source_address(group: int, index: int) -> str:
    """The loopback address generator ``index`` of ``group`` binds its sockets to.

    Every group (a benchmark part) gets addresses of its own, so the ports that its
    connections leave in TIME_WAIT never hold up the next part's connections."""
    return f"127.{group + 1}.{index // 250}.{index % 250 + 2}"


def run_generator(main: Coroutine[Any, Any, None]) -> None:
    """Run a generator process's coroutine on uvloop (asyncio's loop where it is missing),
    with every descriptor the hard limit allows."""
    raise_descriptor_limit()
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        # Not uvloop.run: it is missing from uvloop releases before 0.18.
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main)


@contextmanager
def generator_processes(
    target: Callable[..., None], arguments: Sequence[tuple[Any, ...]]
) -> Iterator[list[Connection]]:
    """One spawned process per entry of ``arguments``, each running ``target(*arguments,
    pipe)``; yields the coordinator's ends of the pipes. On exit every process is joined,
    and killed if it outlives the grace period."""
    context = multiprocessing.get_context("spawn")
    pipes: list[Connection] = []
    children = []
    try:
        for args in arguments:
            ours, theirs = context.Pipe()
            child = context.Process(target=target, args=(*args, theirs), daemon=True)
            child.start()
            theirs.close()
            pipes.append(ours)
            children.append(child)
        yield pipes
    finally:
        for child in children:
            child.join(STOP_GRACE)
            if child.is_alive():
                child.kill()
                child.join(10)
        for pipe in pipes:
            pipe.close()


def receive(pipe: Connection, timeout: float) -> Any:
    """The next message of a generator, or RuntimeError if none comes in ``timeout`` s."""
    if not pipe.poll(timeout):
        raise RuntimeError(f"a load generator sent nothing in {timeout:g} s")
    return pipe.recv()


class Window:
    """A measuring window shared by generator processes: each connects, answers ``ready``
    on its pipe, and gets (wall-clock start, warm-up s, window s) back; what completes
    inside the window is counted."""

    def __init__(self) -> None:
        self.opens = self.closes = float("inf")
        self.duration = 1.0
        self.count = 0

    async def agreed(self, pipe: Connection) -> None:
        """Report ready, take the timing, and sleep until the start."""
        loop = asyncio.get_running_loop()
        pipe.send("ready")
        start_at, warm, duration = await loop.run_in_executor(None, pipe.recv)
        start = loop.time() + (start_at - time.time())
        self.opens = start + warm
        self.closes = self.opens + duration
        self.duration = duration
        await asyncio.sleep(max(0.0, start - loop.time()))


def start_window(pipes: Sequence[Connection], warm: float, duration: float) -> None:
    """Once every generator is ready, start their common window half a second from now."""
    for pipe in pipes:
        if receive(pipe, OPEN_TIMEOUT) != "ready":
            raise RuntimeError("a load generator did not get ready")
    timing = (time.time() + 0.5, warm, duration)
    for pipe in pipes:
        pipe.send(timing)


# -- notify throughput -----------------------------------------------------------------------


class NotifyConnection(asyncio.Protocol):
    """POSTs ``requests`` round-robin, ``depth`` in flight, until the window closes; counts
    every answer's status and the answers completed inside the window."""

    def __init__(
        self, requests: list[bytes], offset: int, window: Window, statuses: dict[int, int]
    ) -> None:
        self._requests = requests
        self._next = offset
        self._window = window
        self._statuses = statuses
        self._buffer = b""
        self._in_flight = 0
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.finished: asyncio.Future[None] = self._loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check.
        self.transport = transport  # type: ignore[assignment]

    def start(self, depth: int) -> None:
        for _ in range(depth):
            self._send()

    def _send(self) -> None:
        assert self.transport is not None
        self.transport.write(self._requests[self._next % len(self._requests)])
        self._next += 1
        self._in_flight += 1

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data
        window = self._window
        now = self._loop.time()
        while True:
            end = buffer.find(HEAD_END)
            if end < 0:
                break
            head = buffer[:end].lower()
            at = head.find(LENGTH)
            length = int(head[at + len(LENGTH) : head.find(b"\r\n", at)]) if at >= 0 else 0
            if len(buffer) < end + 4 + length:
                break
            status = int(buffer[9:12])
            buffer = buffer[end + 4 + length :]
            self._statuses[status] = self._statuses.get(status, 0) + 1
            if window.opens <= now <= window.closes:
                window.count += 1
            self._in_flight -= 1
            if now < window.closes:
                self._send()
        self._buffer = buffer
        if self._in_flight == 0 and not self.finished.done():
            self.finished.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


async def _notify_load(
    ports: list[int],
    source: str,
    requests: list[bytes],
    connections: int,
    depth: int,
    pipe: Connection,
) -> None:
    loop = asyncio.get_running_loop()
    window = Window()
    statuses: dict[int, int] = {}
    protocols = []
    # Connected once the window is agreed, not before: waiting for every other generator
    # process to start can outlast the server's idle timeout, which closes idle connections.
    await window.agreed(pipe)
    for index in range(connections):
        protocol = NotifyConnection(requests, index * 997, window, statuses)
        port = ports[index % len(ports)]
        await loop.create_connection(
            lambda p=protocol: p, "127.0.0.1", port, local_addr=(source, 0)
        )
        protocols.append(protocol)
    for protocol in protocols:
        protocol.start(depth)
    with suppress(TimeoutError):  # a stuck connection: what it did not answer is missing
        await asyncio.wait_for(
            asyncio.gather(*(protocol.finished for protocol in protocols)),
            window.closes + STOP_GRACE - loop.time(),
        )
    for protocol in protocols:
        if protocol.transport is not None:
            protocol.transport.close()
    pipe.send((window.count / window.duration, statuses))


def notify_generator(
    ports: list[int],
    source: str,
    requests: list[bytes],
    connections: int,
    depth: int,
    pipe: Connection,
) -> None:
    """POST over ``connections`` keep-alive connections from ``source`` (spread over
    ``ports``), ``depth`` requests in flight on each, in the window agreed on ``pipe`` (see
    :class:`Window`). Reports (answers/s inside the window, answers by status)."""
    run_generator(_notify_load(ports, source, requests, connections, depth, pipe))


# -- raw nats-py publish with ack ------------------------------------------------------------

RAW_STREAM = "RAWSCALE"
RAW_SUBJECTS = "bench.>"


async def _raw_publish(url: str, concurrency: int, pipe: Connection) -> None:
    from aviso_builtins.backends.jetstream.publisher import PublishingClient
    from benchmarks.jetstream_publish import ceiling_publish

    client = PublishingClient()
    await client.connect(url, allow_reconnect=False)
    await client.listen_for_acks()
    loop = asyncio.get_running_loop()
    window = Window()
    cpu = [0.0, 0.0]
    """This process's CPU time when the window opened and when it closed."""

    def mark(index: int) -> None:
        cpu[index] = time.process_time()

    async def publisher(first: int) -> None:
        n = first
        while loop.time() < window.closes:
            await ceiling_publish(client, n, RAW_STREAM)
            if window.opens <= loop.time() <= window.closes:
                window.count += 1
            n += concurrency

    await window.agreed(pipe)
    loop.call_at(window.opens, mark, 0)
    loop.call_at(window.closes, mark, 1)
    await asyncio.gather(*(publisher(index) for index in range(concurrency)))
    await client.close()
    pipe.send((window.count / window.duration, (cpu[1] - cpu[0]) / max(window.count, 1) * 1e6))


def raw_publish_generator(url: str, concurrency: int, pipe: Connection) -> None:
    """The raw nats-py ceiling (:func:`benchmarks.jetstream_publish.ceiling_publish`: the
    message aviso publishes, on the backend's publish-and-await-ack path), ``concurrency``
    at a time, to the stream :data:`RAW_STREAM` (created by the coordinator), in the window
    agreed on ``pipe`` (see :class:`Window`); reports (acks/s inside the window, this
    process's CPU us per ack there)."""
    run_generator(_raw_publish(url, concurrency, pipe))


# -- live watches ----------------------------------------------------------------------------


class WatchClient:
    """A generator process's watches: how many are open or were refused (``all_open`` is
    set once every watch is one or the other), and the latencies (s) received since the
    last :meth:`take`."""

    def __init__(self, expected: int, count: int) -> None:
        self.latencies: list[float] = []
        self.expected = expected
        self.count = count
        self.open_count = 0
        self.refused = 0
        self.lost = 0
        self.last_received = 0.0
        self.all_open = asyncio.Event()
        self.done = asyncio.Event()
        if expected == 0:
            self.done.set()

    def opened(self) -> None:
        self.open_count += 1
        self._settled()

    def was_refused(self) -> None:
        self.refused += 1
        self._settled()

    def _settled(self) -> None:
        if self.open_count + self.refused >= self.count:
            self.all_open.set()

    def expect_open(self, count: int) -> None:
        """Wait until ``count`` watches in all are open or refused (``all_open``)."""
        self.count = count
        self.all_open = asyncio.Event()
        self._settled()

    def expect(self, expected: int) -> None:
        """Set ``done`` once ``expected`` latencies have arrived since the last take."""
        self.expected = expected
        self.done = asyncio.Event()
        if len(self.latencies) >= expected:
            self.done.set()

    def take(self) -> tuple[list[float], float]:
        """(latencies since the last take, wall-clock time of the last delivery)."""
        taken, self.latencies = self.latencies, []
        return taken, self.last_received


class Watch(asyncio.Protocol):
    """One watch: writes its request, then timestamps every stamped event it receives."""

    def __init__(self, request: bytes, client: WatchClient) -> None:
        self._request = request
        self._client = client
        self._buffer = b""
        self._open: bool | None = False
        self.transport: asyncio.Transport | None = None
        # Deliveries since the last collect, counted per watch: a total would let one
        # watch's duplicate hide another's miss.
        self.received = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance check.
        self.transport = transport  # type: ignore[assignment]
        transport.write(self._request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        if self._open is None:  # refused: closing
            return
        now = time.time()
        buffer = self._buffer + data
        if not self._open:
            if buffer.startswith(b"HTTP/1.1 ") and not buffer.startswith(b"HTTP/1.1 200"):
                self._refused()
                return
            if OPENED not in buffer:
                # Keep the status line whole until it has been checked.
                self._buffer = buffer if len(buffer) < 16 else buffer[-len(OPENED) :]
                return
            self._open = True
            self._client.opened()
        latencies = self._client.latencies
        while True:
            start = buffer.find(STAMP)
            if start < 0:
                break
            end = buffer.find(b"}", start)
            if end < 0:
                break
            latencies.append(now - float(buffer[start + len(STAMP) : end]))
            self.received += 1
            self._client.last_received = now
            buffer = buffer[end:]
        # Anything before the last partial stamp can go; keep enough to find a split one.
        self._buffer = buffer[-(len(STAMP) + 32) :]
        if len(latencies) >= self._client.expected:
            self._client.done.set()

    def _refused(self) -> None:
        self._open = None  # settled: neither open nor waiting
        self._client.was_refused()
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._open is False:
            self._refused()
        elif self._open:
            self._client.lost += 1


async def _watch_commands(ports: list[int], source: str, body: str, pipe: Connection) -> None:
    loop = asyncio.get_running_loop()
    client = WatchClient(0, 0)
    gate = asyncio.Semaphore(OPEN_CONCURRENCY)
    request = raw_post("/api/v1/watch", body)
    watches: list[Watch] = []

    async def open_one(port: int) -> None:
        async with gate:
            watch = Watch(request, client)
            await loop.create_connection(lambda: watch, "127.0.0.1", port, local_addr=(source, 0))
            watches.append(watch)

    while True:
        command, argument = await loop.run_in_executor(None, pipe.recv)
        if command == "open":
            first, refused = len(watches), client.refused
            client.expect_open(first + argument)
            await asyncio.wait_for(
                asyncio.gather(*(open_one(ports[n % len(ports)]) for n in range(argument))),
                OPEN_TIMEOUT,
            )
            await asyncio.wait_for(client.all_open.wait(), OPEN_TIMEOUT)
            pipe.send((client.open_count, client.refused - refused))
        elif command == "collect":
            per_watch, timeout = argument
            client.expect(per_watch * len(watches))
            with suppress(TimeoutError):  # what did not arrive is reported as missing
                await asyncio.wait_for(client.done.wait(), timeout)
            short = sum(max(0, per_watch - watch.received) for watch in watches)
            extra = sum(max(0, watch.received - per_watch) for watch in watches)
            for watch in watches:
                watch.received = 0
            pipe.send((*client.take(), client.lost, short, extra))
        else:
            for watch in watches:
                if watch.transport is not None:
                    watch.transport.close()
            return


def watch_generator(ports: list[int], source: str, body: str, pipe: Connection) -> None:
    """Hold watches (request ``body``) from ``source``, spread over ``ports``, driven by
    commands on ``pipe``:

    - ``("open", n)``: open ``n`` more; answers (watches open in all, watches of these ``n``
      refused) once each is open or refused;
    - ``("collect", (per_watch, timeout))``: wait (at most ``timeout`` s) for ``per_watch``
      deliveries per watch since the last collect; answers (latencies in s, wall-clock time
      of the last delivery, open connections lost, deliveries missing and deliveries beyond
      ``per_watch``, both counted watch by watch);
    - ``("close", None)``: close every watch and end the process.
    """
    run_generator(_watch_commands(ports, source, body, pipe))
