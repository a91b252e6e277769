"""pyaviso 2.4.2 listening to a completion event type: ``aviso listen`` with a listener on
``ens_complete`` gets the complete event of its group, as any other notification."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.client.support import client_env, listening, write_listeners
from tests.plugins.completion.support import config
from tests.support.server import running_server


def test_aviso_listen_hears_the_complete_event(tmp_path: Path) -> None:
    with running_server(config()) as server:
        env = client_env(tmp_path / "home", server.url)
        listeners = write_listeners(
            tmp_path / "listeners.yaml",
            [
                {
                    "event": "ens_complete",
                    "identifiers": {"run": "r1", "status": "complete"},
                    "triggers": [{"type": "echo"}],
                }
            ],
        )
        with listening(env, "--no-state-store", str(listeners)) as listener:
            listener.connected()
            for member in range(5):
                body = {
                    "event_type": "ens",
                    "identifier": {"run": "r1", "step": "24", "member": str(member)},
                }
                answer = httpx.post(f"{server.url}/api/v1/notification", json=body, timeout=10)
                assert answer.status_code == 200, answer.text
            (notification,) = listener.notifications(1)
        assert notification["identifier"]["status"] == "complete"
        assert notification["identifier"]["run"] == "r1"
        assert str(notification["identifier"]["step"]) == "24"
        assert notification["payload"]["count"] == 5
