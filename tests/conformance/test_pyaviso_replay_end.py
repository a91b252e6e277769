"""ECMWF's client against aviso-py: ``aviso replay --from A --until B``.

The user report: ``aviso replay --event mars --identifier class=od --from 0 --until 2``
failed with ``400 UNKNOWN_FIELD`` for ``to_id``. pyaviso's real ``aviso`` command runs
against a real server on both backends, with a home of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conformance.helpers import NOTIFY, post
from tests.support.configs import API_EXAMPLE, ForBackend, with_changes
from tests.support.server import RunningServer, running_server

AVISO = shutil.which("aviso")
pytestmark = [
    pytest.mark.heavy,
    pytest.mark.skipif(AVISO is None, reason="pyaviso's aviso command is not installed"),
]


@pytest.fixture
def mars_server(for_backend: ForBackend) -> Iterator[RunningServer]:
    """A fresh server with a ``mars`` schema on a topic base of its own, so that its
    sequences start at 1 on both backends."""
    base = f"mars{uuid.uuid4().hex[:8]}"
    schema = {
        "topic": {"base": base, "key_order": ["class", "step"]},
        "identifier": {
            "class": {"type": "StringHandler", "required": True},
            "step": {"type": "IntHandler", "required": False},
        },
        "payload": {"required": False},
    }
    document = with_changes(API_EXAMPLE, notification_schema={"mars": schema})
    with running_server(for_backend(document)) as server:
        yield server


def _aviso(server: RunningServer, home: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    assert AVISO is not None
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AVISO")}
    environment.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"))
    return subprocess.run(
        [AVISO, *arguments, "--base-url", server.url, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        check=False,
    )


def _notifications(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_aviso_replay_from_until(mars_server: RunningServer, tmp_path: Path) -> None:
    with httpx.Client(base_url=mars_server.url, timeout=10.0) as client:
        for step in range(4):
            body = {"event_type": "mars", "identifier": {"class": "od", "step": step}}
            assert post(client, NOTIFY, body).status_code == 200
    result = _aviso(
        mars_server,
        tmp_path,
        "replay",
        "--event",
        "mars",
        "--identifier",
        "class=od",
        "--from",
        "0",
        "--until",
        "2",
    )
    assert result.returncode == 0, result.stderr
    received = _notifications(result.stdout)
    assert [event["sequence"] for event in received] == [1, 2], result.stdout
    assert {event["identifier"]["class"] for event in received} == {"od"}


def test_aviso_replay_until_a_date(mars_server: RunningServer, tmp_path: Path) -> None:
    """A date ``--until`` is sent as ``to_date``: everything stored so far is before it."""
    with httpx.Client(base_url=mars_server.url, timeout=10.0) as client:
        body = {"event_type": "mars", "identifier": {"class": "rd", "step": 1}}
        assert post(client, NOTIFY, body).status_code == 200
    arguments = ("--event", "mars", "--identifier", "class=rd", "--from", "0")
    result = _aviso(mars_server, tmp_path, "replay", *arguments, "--until", "2099-01-01T00:00:00Z")
    assert result.returncode == 0, result.stderr
    received = _notifications(result.stdout)
    assert [event["identifier"]["class"] for event in received] == ["rd"], result.stdout
