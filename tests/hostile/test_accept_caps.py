"""Connection floods against the caps, which act when a connection is accepted.

Found against ``aviso-server serve`` under ``ulimit -n 1024``: 1,100 connections sending a
head one byte every 2 s made 14 of 14 ``/health`` probes fail and every notify with them.
``max_connections`` was already lowered below the descriptor limit, but a connection over
it was refused only once its head was complete, so the excess held descriptors first and
``accept`` failed for everyone.

Now a connection past a cap is for the probes from the start: a short head deadline, every
other request refused; past the probe reserve a new connection takes the place of one that
has shown it is no probe, or is reset at once.
"""

from __future__ import annotations

import json
import resource
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from aviso_host.http_protocol import PROBE_RESERVE, PROBE_RESERVE_PER_CLIENT
from aviso_host.server import DESCRIPTOR_RESERVE
from tests.hostile.support import (
    VALID_NOTIFY,
    WAIT,
    assert_client_error,
    assert_still_serving,
    client_from,
    connect_from,
    log_lines,
    read_to_end,
    serving,
    status_and_body,
    wait_for,
)
from tests.support.configs import API_EXAMPLE, with_changes
from tests.support.process import free_port
from tests.support.server import RunningServer, running_server

CAP = 4
FLOOD = "127.0.0.2"
PROBE = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
WATCH = json.dumps({"event_type": "river_gauge", "identifier": {"basin": "caps"}}).encode()


@pytest.fixture(scope="module")
def capped() -> Iterator[RunningServer]:
    """``max_connections`` 4; a head timeout of 1 s, so that past the cap a connection has
    1 s (not the usual 2 s) to send its head."""
    limits = {"max_connections": CAP, "header_timeout_seconds": 1.0}
    with running_server(with_changes(API_EXAMPLE, limits=limits)) as server:
        yield server


@pytest.fixture(scope="module")
def per_client_capped() -> Iterator[RunningServer]:
    limits = {"max_connections_per_client": 2}
    with running_server(with_changes(API_EXAMPLE, limits=limits)) as server:
        yield server


def _from(server: RunningServer, address: str) -> int:
    """The server's open connections from ``address``."""
    return sum(c.client[0] == address for c in list(server.server.server_state.connections))


@contextmanager
def _watches(server: RunningServer, count: int) -> Iterator[None]:
    """``count`` open watches (served connections that stay open), from 127.0.0.10."""
    held = []
    try:
        for _ in range(count):
            sock = connect_from(server, "127.0.0.10")
            held.append(sock)
            sock.sendall(
                b"POST /api/v1/watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(WATCH), WATCH)
            )
            assert sock.recv(65536).startswith(b"HTTP/1.1 200"), "the watch did not start"
        yield
    finally:
        for sock in held:
            sock.close()
        wait_for(lambda: _from(server, "127.0.0.10") == 0, "the watches are still open")


@contextmanager
def _flood(server: RunningServer, address: str, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections from ``address``, each sending one byte of a head; yielded
    once the server has taken or reset every one of them."""
    flood = []
    try:
        for _ in range(count):
            sock = connect_from(server, address)
            flood.append(sock)
            sock.sendall(b"G")
        yield flood
    finally:
        for sock in flood:
            sock.close()
        wait_for(lambda: _from(server, address) == 0, "the flood's connections are still open")


def _ended(sock: socket.socket) -> bool:
    """Whether the server has ended the connection (without waiting); it must not have
    answered: a connection past the caps that sent part of a head gets no answer."""
    sock.setblocking(False)
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True
    finally:
        sock.settimeout(WAIT)
    assert data == b"", data[:300]
    return True


def _all_ended_but(sockets: list[socket.socket], left: int) -> bool:
    return sum(map(_ended, sockets)) >= len(sockets) - left


def test_past_max_connections_only_probes_are_answered(capped: RunningServer) -> None:
    with _watches(capped, CAP), client_from(capped, "127.0.0.3") as client:
        answer = client.get("/api/v1/schema")
        assert_client_error(answer, 503, "SERVICE_UNAVAILABLE")
        assert answer.headers["retry-after"] == "1"
        assert client.get("/health").status_code == 200
        assert client.get("/ready").status_code == 200
    with client_from(capped) as client:
        assert_still_serving(client)


def test_a_connection_accepted_under_the_cap_stays_served(capped: RunningServer) -> None:
    """The cap is applied once, at accept: a keep-alive connection taken under it is served
    for its whole life, however many connections come after it (before, every request was
    checked against the connections open at that moment, and got 503 once they were past
    the cap); a connection accepted past the cap is refused."""
    with client_from(capped, "127.0.0.4") as kept:
        assert kept.get("/api/v1/schema").status_code == 200
        with (
            _watches(capped, CAP - 1),
            connect_from(capped, "127.0.0.3"),  # past the cap, open while kept asks
            client_from(capped, "127.0.0.3") as late,
        ):
            assert kept.get("/api/v1/schema").status_code == 200
            assert_client_error(late.get("/api/v1/schema"), 503, "SERVICE_UNAVAILABLE")
            assert kept.get("/api/v1/schema").status_code == 200


@pytest.mark.parametrize("sent", [b"", b"GET /health HTTP/1.1\r\n"], ids=["silent", "partial"])
def test_past_max_connections_a_head_not_sent_at_once_is_reset(
    capped: RunningServer, sent: bytes
) -> None:
    """A probe sends its head at once: a connection over the cap that does not is reset
    (its descriptor given back at once), where under the cap it would get
    ``idle_timeout_seconds`` (then a close) or ``header_timeout_seconds`` (then 408)."""
    with _watches(capped, CAP), connect_from(capped, "127.0.0.3") as sock:
        sock.sendall(sent)
        answer, reset = read_to_end(sock)
    assert (answer, reset) == (b"", True)


def test_a_flood_past_the_reserve_is_reset_and_probes_still_get_in(
    capped: RunningServer,
) -> None:
    """The attack: served connections all taken, one address opens a hundred more. It holds
    at most its share of the probe reserve, the rest is reset as it is accepted; probes
    from another address and from the flood's own address are still answered."""
    with _watches(capped, CAP), _flood(capped, FLOOD, 100) as flood:
        wait_for(
            lambda: _all_ended_but(flood, PROBE_RESERVE_PER_CLIENT),
            "the flood past the reserve was not reset",
        )
        wait_for(
            lambda: _from(capped, FLOOD) <= PROBE_RESERVE_PER_CLIENT,
            "the flood holds more than its share of the reserve",
        )
        for address in ("127.0.0.3", FLOOD):
            with connect_from(capped, address) as sock:
                sock.sendall(PROBE)
                answer, _ = read_to_end(sock)
            assert status_and_body(answer) == (200, {"status": "ok"}), (address, answer)
    with client_from(capped) as client:
        assert_still_serving(client)


def test_many_addresses_share_the_reserve_and_leave_a_place_for_probes(
    capped: RunningServer,
) -> None:
    """Twelve addresses, each over its share: the connections past the cap never exceed
    the reserve (the descriptors they hold are bounded), and a probe still gets in by
    taking the place of one that has only sent part of a head."""
    addresses = [f"127.0.1.{n}" for n in range(1, 13)]
    with _watches(capped, CAP):
        floods = [_flood(capped, address, PROBE_RESERVE_PER_CLIENT + 2) for address in addresses]
        opened = [flood.__enter__() for flood in floods]
        try:
            everyone = [sock for socks in opened for sock in socks]
            wait_for(
                lambda: _all_ended_but(everyone, PROBE_RESERVE),
                "the connections past the reserve were not reset",
            )
            wait_for(
                lambda: sum(_from(capped, address) for address in addresses) <= PROBE_RESERVE,
                "more connections past the cap than the reserve",
            )
            with connect_from(capped, "127.0.0.3") as sock:
                sock.sendall(PROBE)
                answer, _ = read_to_end(sock)
            assert status_and_body(answer) == (200, {"status": "ok"}), answer
        finally:
            for flood in floods:
                flood.__exit__(None, None, None)
    with client_from(capped) as client:
        assert_still_serving(client)


def test_past_the_per_client_cap_an_address_holds_at_most_its_share(
    per_client_capped: RunningServer,
) -> None:
    """One address over ``max_connections_per_client`` (2): 429 for its requests, its
    probes answered, and of thirty connections it holds at most the cap plus its share of
    the reserve; another address is served as usual."""
    server = per_client_capped
    with _flood(server, FLOOD, 30) as flood:
        wait_for(
            lambda: _all_ended_but(flood, 2 + PROBE_RESERVE_PER_CLIENT),
            "the flood past the share was not reset",
        )
        wait_for(
            lambda: _from(server, FLOOD) <= 2 + PROBE_RESERVE_PER_CLIENT,
            "the address holds more than the cap and its share",
        )
        with client_from(server, FLOOD) as client:
            assert_client_error(client.get("/api/v1/schema"), 429, "TOO_MANY_REQUESTS")
            assert client.get("/health").status_code == 200
        with client_from(server, "127.0.0.3") as other:
            assert other.get("/api/v1/schema").status_code == 200
    with client_from(server, FLOOD) as client:
        assert_still_serving(client)


# -- aviso-server serve under a low descriptor limit ----------------------------------------

DESCRIPTORS = 1024
SLOW_HEADS = 1_100
PROBES = 14
HEADER_TIMEOUT = 10.0
SLOW_HEAD = b"POST /api/v1/notification HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 1000


def _descriptor_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


@contextmanager
def _own_descriptors(needed: int) -> Iterator[None]:
    """This process may open ``needed`` descriptors (its soft limit raised for the block)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the flood needs {needed} descriptors, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class SlowHeads:
    """``count`` connections from ``address``, each sending a head one byte every 2 s; one
    the server ended is replaced (a new connection) at the next byte."""

    def __init__(self, port: int, address: str, count: int) -> None:
        self.port = port
        self.address = address
        self.sockets: list[socket.socket | None] = [None] * count
        self.sent = [0] * count
        self.replaced = -count
        """Connections opened to replace one the server ended (the first ``count`` not
        included)."""
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SlowHeads:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """The attack stops: every connection of it closed."""
        self.stopped.set()
        self.thread.join(WAIT)
        for sock in self.sockets:
            if sock is not None:
                sock.close()

    def _connect(self) -> socket.socket | None:
        sock = socket.socket()
        sock.settimeout(WAIT)
        try:
            sock.bind((self.address, 0))
            sock.connect(("127.0.0.1", self.port))
        except OSError:
            sock.close()
            return None
        sock.setblocking(False)
        return sock

    def _run(self) -> None:
        while not self.stopped.is_set():
            for index, sock in enumerate(self.sockets):
                if sock is None:
                    sock = self.sockets[index] = self._connect()
                    self.sent[index] = 0
                    self.replaced += 1
                    if sock is None:
                        continue
                at = self.sent[index] % len(SLOW_HEAD)
                try:
                    sock.send(SLOW_HEAD[at : at + 1])
                    self.sent[index] += 1
                except OSError:  # ended by the server (reset, 408): replaced next time
                    sock.close()
                    self.sockets[index] = None
            self.stopped.wait(2.0)


def _client_from_url(url: str, address: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=url, timeout=WAIT, transport=transport)


def _status(url: str, address: str, path: str = "/health", body: object = None) -> int | str:
    """The status of one request on a new connection from ``address`` (a connection kept
    alive would stay the served one it was), or how it failed."""
    try:
        with _client_from_url(url, address) as client:
            if body is None:
                return client.get(path).status_code
            return client.post(path, json=body).status_code
    except httpx.TransportError as exc:
        return type(exc).__name__


@pytest.mark.heavy
def test_slow_heads_past_the_descriptor_limit_leave_health_answering(tmp_path: Path) -> None:
    """The attack as found, against ``aviso-server serve`` with 1,024 descriptors (so
    ``max_connections`` is lowered to 896): one address keeps 1,100 connections sending a
    head one byte every 2 s. ``/health`` answers at least 13 of 14 probes, from another
    address and from the flood's own; once the flood stops, a notify succeeds within
    ``header_timeout_seconds`` plus one second."""
    document = with_changes(
        API_EXAMPLE,
        application={"host": "127.0.0.1", "port": 0},
        limits={"header_timeout_seconds": HEADER_TIMEOUT},
    )
    with (
        _own_descriptors(SLOW_HEADS + 2 * DESCRIPTOR_RESERVE),
        serving(tmp_path, yaml.safe_dump(document), _descriptor_limit) as (port, _),
    ):
        url = f"http://127.0.0.1:{port}"
        with SlowHeads(port, FLOOD, SLOW_HEADS) as attack:
            # The flood is in place once the served connections are all taken.
            wait_for(
                lambda: _status(url, "127.0.0.1", "/api/v1/schema") == 503,
                "the flood never filled max_connections",
            )
            answers = []
            for n in range(PROBES):
                answers.append(_status(url, FLOOD if n % 2 else "127.0.0.1"))
                time.sleep(0.5)
            assert attack.replaced > 0, "the server ended none of the flood's connections"
        stopped = time.monotonic()
        body = {**VALID_NOTIFY, "payload": {"after": "the flood"}}
        notified = None
        while notified is None and time.monotonic() - stopped < HEADER_TIMEOUT + 1:
            if _status(url, "127.0.0.1", "/api/v1/notification", body) == 200:
                notified = time.monotonic() - stopped
            else:
                time.sleep(0.05)
    assert sum(answer == 200 for answer in answers) >= PROBES - 1, answers
    assert notified is not None, "no notify succeeded after the flood stopped"
    lines = log_lines(tmp_path)
    assert any(line.get("event_name") == "server.connections.refused" for line in lines)
    assert not [line for line in lines if line["level"] == "error"], lines[-5:]


@pytest.mark.heavy
def test_slow_heads_at_the_metrics_port_leave_health_answering(tmp_path: Path) -> None:
    """The metrics listener shares the process's descriptors: a flood there (it served any
    number of connections, with no head deadline) left none to accept ``/health`` with.
    Now its connections are capped at accept like the main port's."""
    metrics_port = free_port()
    document = with_changes(
        API_EXAMPLE,
        application={"host": "127.0.0.1", "port": 0},
        limits={"header_timeout_seconds": HEADER_TIMEOUT},
        metrics={"enabled": True, "host": "127.0.0.1", "port": metrics_port},
    )
    with (
        _own_descriptors(SLOW_HEADS + 2 * DESCRIPTOR_RESERVE),
        serving(tmp_path, yaml.safe_dump(document), _descriptor_limit) as (port, _),
    ):
        url = f"http://127.0.0.1:{port}"
        with SlowHeads(metrics_port, FLOOD, SLOW_HEADS) as attack:
            wait_for(lambda: attack.replaced > 0, "the metrics listener ended no connection")
            answers = []
            for n in range(PROBES):
                answers.append(_status(url, FLOOD if n % 2 else "127.0.0.1"))
                time.sleep(0.5)
            metrics = _status(f"http://127.0.0.1:{metrics_port}", "127.0.0.3", "/metrics")
    assert sum(answer == 200 for answer in answers) >= PROBES - 1, answers
    # Scrapes from elsewhere still get through the listener's own probe reserve or a place.
    assert metrics in (200, 503), metrics
