"""``aviso listen`` and the Python API against aviso-py: listener YAML with constraints and
the four local triggers, resume from the state file, reconnect at the maximum duration."""

from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyaviso
import pytest

from tests.client.support import (
    CONFIG,
    WAIT,
    client_env,
    listening,
    payloads,
    publish,
    write_listeners,
)
from tests.support.configs import ForBackend
from tests.support.loopback import Handler, serve
from tests.support.server import RunningServer, running_server


class _Receiver:
    def __init__(self) -> None:
        self.posts: queue.Queue[tuple[str, str, dict[str, Any]]] = queue.Queue()

    def take(self, count: int) -> list[tuple[str, str, dict[str, Any]]]:
        return [self.posts.get(timeout=WAIT) for _ in range(count)]


class _ReceiverHandler(Handler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        self.server.owner.posts.put(  # type: ignore[attr-defined]
            (self.path, self.headers.get("Content-Type", ""), body)
        )
        self.reply(200)


@contextmanager
def _receiver() -> Iterator[tuple[_Receiver, str]]:
    """A loopback HTTP endpoint for the post trigger; yields it and its URL."""
    receiver = _Receiver()
    with serve(_ReceiverHandler, receiver) as url:
        yield receiver, url


def test_listener_yaml_with_constraints_and_every_local_trigger(
    env: dict[str, str], name: str, feed_server: RunningServer, tmp_path: Path
) -> None:
    log = tmp_path / "notifications.log"
    ran = tmp_path / "command.out"
    with _receiver() as (receiver, url):
        listeners = write_listeners(
            tmp_path / "listeners.yaml",
            [
                {
                    "event": "feed",
                    "identifiers": {"name": name, "step": {"gte": 5}},
                    "triggers": [
                        {"type": "echo"},
                        {"type": "log", "path": str(log)},
                        {"type": "command", "command": f'echo "$AVISO_NOTIFICATION_JSON" >> {ran}'},
                        {"type": "post", "url": f"{url}/hook"},
                    ],
                }
            ],
        )
        with listening(env, "--no-state-store", str(listeners)) as listener:
            listener.connected()
            for step in (4, 5, 6):
                publish(feed_server.url, name, 1, start=step, step=step)
            echoed = listener.notifications(2)
            posted = receiver.take(2)  # the post trigger runs last
        assert receiver.posts.empty()
    assert payloads(echoed) == [5, 6]
    assert [n["identifier"] for n in echoed] == [
        {"name": name, "step": "5"},
        {"name": name, "step": "6"},
    ]
    sequences = [n["sequence"] for n in echoed]
    assert [json.loads(line)["sequence"] for line in log.read_text().splitlines()] == sequences
    assert [json.loads(line)["sequence"] for line in ran.read_text().splitlines()] == sequences
    for (path, content_type, event), sequence in zip(posted, sequences, strict=True):
        assert path == "/hook" and content_type == "application/cloudevents+json"
        assert event["id"] == f"feed@{sequence}" and event["type"] == "int.ecmwf.aviso.feed"
        assert event["data"]["identifier"]["name"] == name


def test_resume_from_the_state_file_delivers_exactly_the_missed_ones(
    env: dict[str, str], name: str, feed_server: RunningServer, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    listeners = write_listeners(
        tmp_path / "listeners.yaml",
        [{"event": "feed", "identifiers": {"name": name}, "triggers": [{"type": "echo"}]}],
    )
    args = ("--state-file", str(state), str(listeners))
    with listening(env, *args) as listener:
        listener.connected()
        publish(feed_server.url, name, 2)
        first = listener.notifications(2)
        assert listener.stop() == 0
    checkpoint = json.loads(state.read_text())
    assert checkpoint["version"] == 1
    [entry] = checkpoint["checkpoints"].values()
    # The CLI commits one notification behind: the last one may still be pending when it is
    # stopped, and is then asked for again (at-least-once, by pyaviso's design).
    committed = entry["last_committed_sequence"]
    assert committed in [n["sequence"] for n in first]
    assert entry["last_event_id"] == f"feed@{committed}"
    again = [n for n in first if n["sequence"] > committed]
    publish(feed_server.url, name, 3, start=2)  # while the client is stopped
    with listening(env, *args) as listener:
        resumed = listener.notifications(len(again) + 3)
        publish(feed_server.url, name, 1, start=5)
        live = listener.notifications(1)
        listener.stop()
        left = listener.no_more_notifications()
    # From the cursor on, exactly: the missed ones, then live, no gap and no duplicate.
    assert resumed[: len(again)] == again
    assert payloads(first + resumed[len(again) :] + live) == [0, 1, 2, 3, 4, 5]
    assert left == []


@pytest.fixture(scope="module")
def short_server(for_backend: ForBackend) -> Iterator[RunningServer]:
    """Streams last 2 s (``connection_max_duration_sec``)."""
    document = json.loads(json.dumps(CONFIG))
    document["watch_endpoint"]["connection_max_duration_sec"] = 2
    with running_server(for_backend(document)) as server:
        yield server


def test_max_duration_reached_reconnects_from_the_cursor(
    short_server: RunningServer, name: str, tmp_path: Path
) -> None:
    env = client_env(tmp_path / "home", short_server.url)
    args = ("-v", "--event", "feed", "--identifier", f"name={name}", "--no-state-store")
    with listening(env, *args) as listener:
        listener.subscribed(1)
        publish(short_server.url, name, 1)
        assert payloads(listener.notifications(1)) == [0]
        listener.subscribed(3)  # closed at the maximum duration twice, reconnected each time
        publish(short_server.url, name, 2, start=1)
        assert payloads(listener.notifications(2)) == [1, 2]
        listener.stop()
        assert listener.no_more_notifications() == []


def test_python_api_replays_then_resumes_from_a_json_file_store(
    feed_server: RunningServer, name: str, tmp_path: Path
) -> None:
    publish(feed_server.url, name, 2)
    with pyaviso.AvisoClient(base_url=feed_server.url, auth=pyaviso.Anonymous()) as client:
        replayed = list(
            client.listen("feed", filter={"name": name}, start_from=0, mode="replay_only")
        )
    assert [n.payload for n in replayed] == [{"n": 0}, {"n": 1}]
    assert [n.identifier for n in replayed] == [{"name": name, "step": "1"}] * 2
    assert replayed[0].cloudevent is not None
    assert replayed[0].cloudevent["id"] == f"feed@{replayed[0].sequence}"

    def resuming_client() -> pyaviso.AvisoClient:
        store = pyaviso.JsonFileStore(tmp_path / "state.json")
        return pyaviso.AvisoClient(
            base_url=feed_server.url,
            auth=pyaviso.Anonymous(),
            state_store=store,
            flush_cursor_on_exit=True,
        )

    last = replayed[-1].sequence
    with (
        resuming_client() as client,
        client.listen("feed", filter={"name": name}, start_from=last) as live,
    ):
        publish(feed_server.url, name, 1, start=2)
        assert next(live).payload == {"n": 2}
    publish(feed_server.url, name, 2, start=3)  # while no client listens
    with resuming_client() as client, client.listen("feed", filter={"name": name}) as live:
        assert [next(live).payload for _ in range(2)] == [{"n": 3}, {"n": 4}]


def test_async_client_replays_and_notifies(feed_server: RunningServer, name: str) -> None:
    async def scenario() -> list[Any]:
        client = pyaviso.AsyncAvisoClient(base_url=feed_server.url, auth=pyaviso.Anonymous())
        answer = await client.notify(
            event_type="feed", identifier={"name": name, "step": 2}, payload={"n": 0}
        )
        assert answer.status == "success"
        stream = client.listen("feed", filter={"name": name}, start_from=0, mode="replay_only")
        return [notification.payload async for notification in stream]

    assert asyncio.run(asyncio.wait_for(scenario(), WAIT)) == [{"n": 0}]
