"""A separately installable plugin adds a field handler type with no change to host code.

The package in tests/fixtures/aviso_colour_handler is built and installed by pip into a
private target directory, then a real ``aviso-server serve`` with that directory on its path serves
a schema using ``type: ColourHandler``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.process import aviso_process, install_into, run_aviso, with_pythonpath
from tests.support.sse import collect

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "aviso_colour_handler"

CONFIG = """
application: {host: 127.0.0.1, port: 0, base_url: "http://aviso.test"}
notification_backend: {kind: in_memory, in_memory: {max_history_per_topic: 10}}
notification_schema:
  paint_batch:
    topic: {base: paint, key_order: [colour, line]}
    identifier:
      colour: {type: ColourHandler, required: true, allow_short: true}
      line: {type: IntHandler, required: false}
"""


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    install_into(target, FIXTURE)
    return target


def test_aviso_plugins_lists_the_installed_plugin(plugin_path: Path) -> None:
    listing = run_aviso("plugins", env=with_pythonpath(plugin_path))
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if line.startswith("colour_handler"))
    assert row.split() == [
        "colour_handler",
        "loaded",
        "aviso-colour-handler",
        "0.1.0",
        "field-handlers:",
        "ColourHandler",
    ]


def test_schema_with_the_plugin_handler_works_end_to_end(plugin_path: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    server = aviso_process(config, tmp_path / "server.log", with_pythonpath(plugin_path))
    with server as (url, _), httpx.Client(base_url=url) as client:

        def notify(colour: str) -> httpx.Response:
            body = {"event_type": "paint_batch", "identifier": {"colour": colour, "line": 7}}
            return client.post("/api/v1/notification", content=json.dumps(body))

        assert notify("#A1B").status_code == 200
        rejected = notify("crimson")
        assert rejected.status_code == 400
        assert rejected.json()["code"] == "INVALID_NOTIFICATION_REQUEST"
        assert "must be a colour" in rejected.json()["message"]
        schema = client.get("/api/v1/schema/paint_batch").json()
        assert schema["schema"]["identifier"]["colour"] == {
            "allow_short": True,
            "operators": [],
            "required": True,
            "type": "ColourHandler",
            "value_kind": "text",
        }
        events = collect(
            client,
            "/api/v1/replay",
            {"event_type": "paint_batch", "identifier": {"colour": "#aa11bb"}, "from_id": "0"},
        )
    replayed = [event.data for event in events if event.name == "replay"]
    assert [event["data"]["identifier"] for event in replayed] == [
        {"colour": "#aa11bb", "line": "7"}
    ]
