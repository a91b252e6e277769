"""The complete examples of docs/plugins.md work as printed: each is executed as a plugin
module and driven through the testing kit (or click's runner for the command)."""

from __future__ import annotations

import asyncio
import importlib
import json
import queue
import re
import time
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from openapi_spec_validator import validate

from aviso_host.config import settings_from_document
from aviso_host.identifiers import CatalogPlanner
from aviso_host.plugins import discover
from aviso_host.schemas import SchemaCatalog
from aviso_plugins.testing import TEST_DEFAULTS, EventStream, serve
from aviso_plugins.types import Notification, SinkContext
from tests.support.loopback import Handler
from tests.support.loopback import serve as serve_loopback

DOC = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.DOTALL)

SCHEMA = {
    "notification_schema": {
        "paint_batch": {
            "topic": {"base": "paint", "key_order": ["colour", "line"]},
            "identifier": {
                "colour": {"type": "StringHandler", "required": True},
                "line": {"type": "IntHandler", "required": False},
            },
        }
    }
}


def example(marker: str) -> types.ModuleType:
    """The one code block containing ``marker``, executed as a module."""
    (source,) = [block for block in BLOCKS if marker in block]
    module = types.ModuleType(f"doc_example_{abs(hash(marker))}")
    exec(compile(source, f"docs/plugins.md:{marker}", "exec"), module.__dict__)
    return module


def test_the_field_handler_example_is_the_fixture_plugin() -> None:
    (source,) = [block for block in BLOCKS if "class ColourHandler" in block]
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "aviso_colour_handler"
    assert source.strip() in (fixture / "aviso_colour_handler.py").read_text()


def test_the_storage_backend_example_serves_notify_watch_and_replay() -> None:
    backend = example("class ListBackend")
    config = {**SCHEMA, "notification_backend": {"kind": "list"}}
    with serve(config, plugins=[backend]) as aviso:
        with aviso.watch("paint_batch", {"colour": "red"}) as live:
            for line in (1, 2):
                answer = aviso.notify("paint_batch", {"colour": "red", "line": line}, {"n": line})
                assert answer.status_code == 200, answer.text
            assert aviso.notify("paint_batch", {"colour": "blue", "line": 1}).status_code == 200
            first = live.until("live-notification")
            second = live.until("live-notification")
        assert [first.data["data"]["payload"], second.data["data"]["payload"]] == [
            {"n": 1},
            {"n": 2},
        ]
        replayed = aviso.replay("paint_batch", {"colour": "red"}).notifications()
        assert [e.data["data"]["identifier"]["line"] for e in replayed] == ["1", "2"]
        wiped = aviso.request("DELETE", "/api/v1/admin/wipe/stream", json={"stream_name": "PAINT"})
        assert wiped.status_code == 200, wiped.text
        assert aviso.replay("paint_batch", {"colour": "red"}).notifications() == []


def test_the_storage_backend_example_numbers_each_stream_from_1() -> None:
    ink = {
        "topic": {"base": "ink", "key_order": ["colour"]},
        "identifier": {"colour": {"type": "StringHandler", "required": True}},
    }
    schemas = {**SCHEMA["notification_schema"], "ink_batch": ink}
    config = {"notification_schema": schemas, "notification_backend": {"kind": "list"}}
    with serve(config, plugins=[example("class ListBackend")]) as aviso:
        for event_type in ("paint_batch", "ink_batch", "paint_batch", "ink_batch"):
            identifier = {"colour": "red", "line": 1} if event_type == "paint_batch" else {}
            answer = aviso.notify(event_type, {"colour": "red", **identifier}, {"n": 1})
            assert answer.status_code == 200, answer.text
        for event_type in ("paint_batch", "ink_batch"):
            replayed = aviso.replay(event_type, {"colour": "red"}).notifications()
            assert [event.data["sequence"] for event in replayed] == [1, 2]


def test_the_sink_example_writes_valid_notifications_and_rejects_the_rest(
    tmp_path: Path,
) -> None:
    sinks = example("class JsonLinesSink")
    registry = discover(load_entry_points=False)
    settings = settings_from_document({**TEST_DEFAULTS, **SCHEMA}, registry)
    planner = CatalogPlanner(SchemaCatalog(settings, registry.field_handlers))
    path = tmp_path / "out.jsonl"
    sink = sinks.JsonLinesSink(SinkContext(options={"path": str(path)}, planner=planner))
    batch = [
        Notification("paint_batch", {"colour": "red", "line": 3}, {"n": 1}, "m-1"),
        Notification("paint_batch", {"colour": "red"}, None, "m-2"),  # `line` is missing
    ]
    outcomes = asyncio.run(sink.publish_batch(batch))
    assert outcomes[0].error is None
    assert outcomes[1].error is not None and "line" in outcomes[1].error.message
    [line] = path.read_text().splitlines()
    assert json.loads(line)["message_id"] == "m-1"


def test_the_command_example_runs() -> None:
    commands = example("def greet")
    [command] = commands.aviso_commands()
    result = CliRunner().invoke(command, ["world"])
    assert result.exit_code == 0 and result.output == "hello world\n"


def test_the_summary_stream_example_tallies_the_history_first() -> None:
    tally = example("class Tally")
    with serve(SCHEMA, plugins=[tally]) as aviso:
        for line in (1, 2):
            assert aviso.notify("paint_batch", {"colour": "red", "line": line}).status_code == 200
        body = {"event_type": "paint_batch", "identifier": {"colour": "red"}}
        with aviso.stream("POST", "/api/v1/tally", json=body) as response:
            assert response.status_code == 200
            snapshot = EventStream(response).until(lambda event: event.name == "tally")
    assert (snapshot.data["type"], snapshot.data["count"]) == ("snapshot", 2)


def test_the_openapi_example_describes_its_route() -> None:
    plugin = example("def aviso_openapi")
    with serve(SCHEMA, plugins=[plugin]) as aviso:
        document = aviso.get("/api-docs/openapi.json").json()
    validate(document)
    assert document["paths"]["/api/v1/latest"]["get"]["operationId"] == "latest"
    codes = document["components"]["schemas"]["RequestError"]["properties"]["code"]["enum"]
    assert "NOTHING_STORED" in codes
    assert document["tags"][-1]["name"] == "latest"


def test_the_api_key_provider_example_keeps_only_the_key_secret() -> None:
    provider = example("class ApiKeyProvider")
    keys = [
        {"key": "k-7f3a9c2e41", "user": "wes-the-writer", "roles": ["writer"]},
        {"key": "k-0b1d5e8f62", "user": "rita-the-reader", "roles": ["reader"]},
    ]
    config = {
        "auth": {
            "enabled": True,
            "mode": "api_keys",
            "admin_roles": {"lab": ["admin"]},
            "api_keys": {"keys": keys},
        },
        "notification_schema": {
            "paint_batch": {
                **SCHEMA["notification_schema"]["paint_batch"],
                "auth": {"required": True, "write_roles": {"lab": ["writer"]}},
            }
        },
    }
    settings = settings_from_document(
        {**TEST_DEFAULTS, **config}, discover(load_entry_points=False, extra=[provider])
    )
    assert settings.secrets == {"k-7f3a9c2e41", "k-0b1d5e8f62"}  # user names are not secret
    with serve(config, plugins=[provider]) as aviso:
        body = ("paint_batch", {"colour": "red", "line": 1})
        assert aviso.notify(*body, headers={"X-Api-Key": "k-7f3a9c2e41"}).status_code == 200
        # pyaviso's only way to send it: a bearer token.
        bearer = {"Authorization": "Bearer k-7f3a9c2e41"}
        assert aviso.notify(*body, headers=bearer).status_code == 200
        reader = {"Authorization": "Bearer k-0b1d5e8f62"}
        assert aviso.notify(*body, headers=reader).status_code == 403
        assert aviso.notify(*body, headers={"X-Api-Key": "k-unknown-key"}).status_code == 401


class _ChatHandler(Handler):
    """A chat server: room ``ops`` exists, any other is 404."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.owner.put((self.path, body["text"]))  # type: ignore[attr-defined]
        self.reply(200 if self.path == "/rooms/ops" else 404)


def test_the_delivery_kind_example_posts_in_order_and_a_missing_room_is_gone() -> None:
    chat = example("class ChatRoom")
    posted: queue.Queue[tuple[str, str]] = queue.Queue()
    with serve_loopback(_ChatHandler, posted) as url:
        config = {**SCHEMA, "subscriptions": {"chat": {"base_url": f"{url}/"}}}
        with serve(config, plugins=[chat]) as aviso:
            for name, room in (("ops", "ops"), ("lost", "lost")):
                body = {
                    "event_type": "paint_batch",
                    "identifier": {"colour": "red"},
                    "delivery": {"kind": "chat", "room": room},
                }
                created = aviso.put(f"/api/v1/subscriptions/{name}", json=body)
                assert created.status_code == 201, created.text
            for line in (1, 2):
                answer = aviso.notify("paint_batch", {"colour": "red", "line": line}, {"n": line})
                assert answer.status_code == 200, answer.text
            seen = [posted.get(timeout=60) for _ in range(3)]
            assert [text for path, text in seen if path == "/rooms/ops"] == [
                "paint_batch 1: {'n': 1}",
                "paint_batch 2: {'n': 2}",
            ]
            assert [path for path, _ in seen].count("/rooms/lost") == 1
            deadline = time.monotonic() + 60
            while (lost := aviso.get("/api/v1/subscriptions/lost").json()["deliveries"])[
                "status"
            ] != "disabled" and time.monotonic() < deadline:
                time.sleep(0.01)  # a state announces no change: it is polled
            assert lost["status"] == "disabled" and lost["last_error"]["error"] == "no such room"


def test_the_typed_options_example_derives_its_schema_and_reads_its_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Imported from a file, as a plugin module is (attribute docstrings are read from it).
    (source,) = [block for block in BLOCKS if "class ArchiveOptions" in block]
    (tmp_path / "doc_example_archive.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("doc_example_archive")
    schema = module.ArchiveBackend.options_schema
    assert schema["required"] == ["path"] and schema["additionalProperties"] is False
    assert schema["properties"]["max_files"] == {
        "default": 100,
        "description": "Files kept before the oldest is deleted.",
        "minimum": 1,
        "type": "integer",
    }
    assert schema["properties"]["compression"]["enum"] == ["none", "gzip"]
    options = module.read_shape(module.ArchiveOptions, {"path": "/srv/archive"})
    assert (options.max_files, options.compression) == (100, "none")
