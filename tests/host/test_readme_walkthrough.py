"""The README's curl walk-through, run as printed (the shell included) against a server with
the default configuration: the replays by time find what the walk-through published."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from aviso_host.config.loader import EXAMPLE_CONFIG
from tests.support.server import running_server

pytestmark = pytest.mark.heavy  # child processes (curl through a shell)

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
DOCUMENTED_URL = "http://127.0.0.1:8000"


def walkthrough_commands() -> list[str]:
    section = README.split("## A walk-through with curl", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^    (curl (?:.*\\\n)*.*)$", section, re.MULTILINE)
    return [command.replace("\\\n", " ") for command in commands]


def test_the_walkthrough_replays_by_storage_time_find_the_published_notification() -> None:
    commands = walkthrough_commands()
    by_time = [c for c in commands if "/api/v1/replay" in c and "from_date" in c]
    assert len(by_time) == 2, commands  # from a time; from a time to a time
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    config["application"]["port"] = 0
    with running_server(config) as server:
        for command in commands:
            if not re.search(r"/api/v1/(notification|replay) ", command):
                continue  # a watch or an aggregate: a stream left open
            ran = subprocess.run(
                ["bash", "-c", command.replace(DOCUMENTED_URL, server.url) + " --max-time 30"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert ran.returncode == 0, ran.stderr
            assert '"error"' not in ran.stdout and "event: error" not in ran.stdout, (
                command,
                ran.stdout,
            )
            if command in by_time:
                assert '"id":"mars@1"' in ran.stdout, (command, ran.stdout)
                assert '"type":"replay_completed"' in ran.stdout
