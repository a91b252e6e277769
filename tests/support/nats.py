"""A real ``nats-server -js`` on a free loopback port with its own store directory, and a
JetStream cluster of several such servers joined by routes."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from aviso_builtins.backends.jetstream.embedded import nats_server_command
from tests.support.process import free_port

READY_TIMEOUT = 20.0


class NatsServer:
    """Start/stop can be repeated on the same port and store (restart and outage tests)."""

    def __init__(
        self, store_dir: Path, token: str | None = None, extra_args: Sequence[str] = ()
    ) -> None:
        self.store_dir = store_dir
        self.token = token
        self.extra_args = tuple(extra_args)
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [*nats_server_command(self.store_dir, self.port, self.token), *self.extra_args]
        # The child keeps its own descriptor; closing ours avoids a ResourceWarning (an error
        # under this suite's filterwarnings).
        with (self.store_dir / "nats-server.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start listening")

    def stop(self, kill: bool = False) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        self.process.wait(30)


@contextmanager
def nats_server(store_dir: Path, token: str | None = None) -> Iterator[NatsServer]:
    store_dir.mkdir(parents=True, exist_ok=True)
    server = NatsServer(store_dir, token)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class ClusterNode(NatsServer):
    """One server of a :class:`NatsCluster`: client, route and monitoring ports of its own."""

    def __init__(self, store_dir: Path, name: str, cluster: str, route_ports: Sequence[int]):
        self.name = name
        self.route_port = route_ports[0]
        self.monitor_port = free_port()
        routes = ",".join(f"nats://127.0.0.1:{port}" for port in route_ports[1:])
        super().__init__(
            store_dir,
            extra_args=(
                "--name",
                name,
                "--cluster_name",
                cluster,
                "--cluster",
                f"nats://127.0.0.1:{self.route_port}",
                "--routes",
                routes,
                "--http_port",
                str(self.monitor_port),
            ),
        )

    def monitor(self, report: str) -> dict[str, Any]:
        """A report of the monitoring endpoint: ``jsz`` (JetStream), ``connz`` (clients)."""
        url = f"http://127.0.0.1:{self.monitor_port}/{report}"
        with urllib.request.urlopen(url, timeout=2) as answer:
            return json.loads(answer.read())


class NatsCluster:
    """Several ``nats-server -js`` on loopback, each routed to all the others."""

    def __init__(self, nodes: list[ClusterNode]) -> None:
        self.nodes = nodes

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (a multi-server ``nats_url``)."""
        return ",".join(node.url for node in self.nodes)

    def node(self, name: str) -> ClusterNode:
        return next(node for node in self.nodes if node.name == name)

    def wait_for_meta_leader(self, timeout: float = READY_TIMEOUT) -> str:
        """The name of the JetStream meta leader once every running node agrees on one."""
        deadline = time.monotonic() + timeout
        while True:
            leaders = set()
            for node in self.nodes:
                if node.process is None or node.process.poll() is not None:
                    continue
                try:
                    leaders.add(node.monitor("jsz").get("meta_cluster", {}).get("leader"))
                except OSError:
                    leaders.add(None)
            if len(leaders) == 1 and None not in leaders and "" not in leaders:
                return str(leaders.pop())
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster elected no meta leader: {leaders}")
            time.sleep(0.1)


@contextmanager
def nats_cluster(directory: Path, size: int = 3) -> Iterator[NatsCluster]:
    """``size`` JetStream servers in one cluster, yielded once it has a meta leader; every
    node is killed on exit, whatever state the test left it in."""
    route_ports = [free_port() for _ in range(size)]
    nodes = []
    for index in range(size):
        store = directory / f"node-{index}"
        store.mkdir(parents=True, exist_ok=True)
        others = route_ports[index + 1 :] + route_ports[:index]
        nodes.append(ClusterNode(store, f"n{index}", "aviso", [route_ports[index], *others]))
    with ExitStack() as stack:
        for node in nodes:
            stack.callback(node.stop, kill=True)
            node.start()
        cluster = NatsCluster(nodes)
        cluster.wait_for_meta_leader()
        yield cluster
