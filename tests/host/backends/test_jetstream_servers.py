"""``nats_url`` with several servers and ``replicas``.

Parsing is checked directly; the rest with real ``nats-server`` processes: a server list whose
first server is down, a replica count a single server refuses, and an existing stream's
replica count raised on a three-node cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aviso_builtins.backends.jetstream.options import OptionsError, parse_options, split_servers
from tests.host.backends.jetstream_support import (
    assert_storage_failed,
    aviso_serving,
    document,
    notify,
    notify_ok,
    poll,
    stream_config,
    unique,
)
from tests.support.nats import NatsServer, nats_cluster
from tests.support.process import free_port

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py


def test_several_servers_are_split_in_order() -> None:
    options = parse_options(
        {"nats_url": "nats://a.example:4222, tls://u:p@b.example:4223,nats://c.example"}
    )
    assert split_servers(options.nats_url) == [
        "nats://a.example:4222",
        "tls://u:p@b.example:4223",
        "nats://c.example",
    ]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ({"nats_url": "http://n:4222"}, "'http://n:4222' must start with nats:// or tls://"),
        ({"nats_url": "n:4222"}, "'n:4222' must start with nats:// or tls://"),
        ({"nats_url": "nats://:4222"}, "'nats://:4222' has no host"),
        ({"nats_url": "nats://n:99999"}, "'nats://n:99999' Port out of range 0-65535"),
        ({"nats_url": "nats://n:0"}, "'nats://n:0' port must be between 1 and 65535"),
        ({"nats_url": "nats://n:4222/x"}, "must be scheme://[user:password@]host[:port] only"),
        ({"nats_url": "nats://a:4222,,nats://b:4222"}, "has an empty entry"),
        ({"nats_url": "nats://a:4222,"}, "has an empty entry"),
        ({"replicas": 6}, "must be at most 5 (the JetStream maximum)"),
    ],
    ids=["http", "no-scheme", "no-host", "port-range", "port-0", "path", "empty", "trailing", "r6"],
)
def test_an_unusable_server_list_or_replica_count_names_the_key(
    raw: dict[str, object], reason: str
) -> None:
    key = next(iter(raw))
    with pytest.raises(OptionsError) as error:
        parse_options(raw)
    message = str(error.value)
    assert message.startswith(f"notification_backend.jetstream.{key}: "), message
    assert reason in message, message


def test_a_password_in_a_refused_url_is_not_echoed() -> None:
    with pytest.raises(OptionsError) as error:
        parse_options({"nats_url": "nats://a:4222,http://user:s3cret@b:4222"})
    assert "s3cret" not in str(error.value)
    assert "[REDACTED]@b:4222" in str(error.value)


def test_a_server_list_whose_first_server_is_down_connects_to_the_next(
    module_nats: NatsServer, tmp_path: Path
) -> None:
    down = f"nats://127.0.0.1:{free_port()}"
    config = document(f"{down},{module_nats.url}")
    event_type = unique("list")
    with aviso_serving(tmp_path, config) as server, server.client() as http:
        for n in range(3):
            notify_ok(http, event_type, {"n": n})
        assert http.get("/ready").status_code == 200


def test_more_replicas_than_one_server_can_hold_fail_the_notify_naming_the_key(
    module_nats: NatsServer, tmp_path: Path
) -> None:
    """A single nats-server refuses a replicated stream; the notify fails (nothing stored)
    and the log says which setting to change."""
    config = document(module_nats.url, jetstream={"replicas": 3})
    event_type = unique("solo")
    with aviso_serving(tmp_path, config) as server, server.client() as http:
        assert_storage_failed(notify(http, event_type, {"n": "1"}))
        log = server.log()
    assert "notification_backend.jetstream.replicas: stream " in log, log
    assert stream_config(module_nats.url, event_type.upper()) is None


def test_an_existing_streams_replica_count_is_raised_to_the_configured_one(
    tmp_path: Path,
) -> None:
    """A stream created with one replica, then served with ``replicas: 3``: JetStream scales
    it up in place (history kept) rather than the server refusing to start."""
    event_type = unique("scale")
    name = event_type.upper()
    with nats_cluster(tmp_path / "nats", size=3) as cluster:
        with aviso_serving(tmp_path, document(cluster.url)) as server, server.client() as http:
            notify_ok(http, event_type, {"n": "1"})
        node = cluster.nodes[0].url
        assert stream_config(node, name).num_replicas == 1  # type: ignore[union-attr]
        config = document(cluster.url, jetstream={"replicas": 3})
        with aviso_serving(tmp_path, config) as server, server.client() as http:
            notify_ok(http, event_type, {"n": "2"})
            poll(
                lambda: stream_config(node, name).num_replicas == 3,  # type: ignore[union-attr]
                20,
                "the stream scaled to three replicas",
            )
