"""The embedded nats-server's client port: 4222 when free, else a free one, or as configured;
and a server another process holds on the chosen port is never taken for this one."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from pathlib import Path

from aviso_builtins.backends.jetstream.embedded import (
    DEFAULT_PORT,
    URL_FILE,
    EmbeddedNatsServer,
    client_port,
    running_url,
)
from tests.support.nats import nats_server


def test_a_given_port_is_kept_and_zero_takes_a_free_one() -> None:
    assert client_port(4333) == 4333
    assert client_port(0) not in (0, DEFAULT_PORT)


def test_unset_takes_another_port_when_4222_is_held() -> None:
    with socket.socket() as holder:
        # Held by someone else already (the bind fails): the same situation.
        with contextlib.suppress(OSError):
            holder.bind(("127.0.0.1", DEFAULT_PORT))
        assert client_port(None) != DEFAULT_PORT


def test_a_server_already_on_the_port_is_not_taken_for_this_one(tmp_path: Path) -> None:
    with nats_server(tmp_path / "other") as other:
        # Told to use the port another nats-server holds: this one's start fails (its own
        # process cannot bind it), it does not report the other's greeting as its own.
        server = EmbeddedNatsServer(str(tmp_path / "mine"), None, other.port)

        async def start() -> str:
            try:
                await server.start()
            except RuntimeError as exc:
                return str(exc)
            finally:
                await server.stop()
            return "started"

        assert asyncio.run(start()).startswith("embedded nats-server exited with")
        assert running_url(tmp_path / "mine") is None


def test_the_url_is_in_the_store_while_it_runs(tmp_path: Path) -> None:
    server = EmbeddedNatsServer(str(tmp_path / "store"), None, 0)

    async def run() -> str | None:
        await server.start()
        try:
            return running_url(tmp_path / "store")
        finally:
            await server.stop()

    assert asyncio.run(run()) == server.url
    assert not (tmp_path / "store" / URL_FILE).exists()
