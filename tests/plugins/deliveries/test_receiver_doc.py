"""docs/subscriptions.md's webhook receiver, as printed there, run with uvicorn on 127.0.0.1:
it accepts what a real aviso server pushes to it and refuses a forged signature."""

from __future__ import annotations

import queue
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from aviso_plugins.testing import serve
from tests.support.configs import API_EXAMPLE, with_changes

DOC = Path(__file__).resolve().parents[3] / "docs" / "subscriptions.md"
CONFIG = with_changes(API_EXAMPLE, subscriptions={"webhook": {"allow_private_networks": True}})
RHINE = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}}
SECRET = "whsec_" + "c2VjcmV0LWtleS1mb3ItdGhlLXJlY2VpdmVyLWV4YW1wbGU="
WAIT = 15.0


def _receiver_source() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    (source,) = [block for block in blocks if "Starlette(" in block and "hmac" in block]
    return str(source)


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, queue.Queue[Any]]]:
    monkeypatch.setenv("WEBHOOK_SECRET", SECRET)
    namespace: dict[str, Any] = {"__name__": "receiver"}
    exec(compile(_receiver_source(), str(DOC), "exec"), namespace)
    handled: queue.Queue[Any] = queue.Queue()
    # The example prints; the test wants to see what it handled.
    namespace["handle"] = lambda message_id, event: handled.put((message_id, event))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(namespace["app"], log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        thread.join(0.01)
    assert server.started
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/aviso", handled
    finally:
        server.should_exit = True
        thread.join(WAIT)
        listener.close()


def test_the_documented_receiver_accepts_a_push_and_refuses_a_forgery(
    receiver: tuple[str, queue.Queue[Any]],
) -> None:
    url, handled = receiver
    with serve(CONFIG) as aviso:
        body = {**RHINE, "delivery": {"kind": "webhook", "url": url, "secret": SECRET}}
        assert aviso.put("/api/v1/subscriptions/doc", json=body).status_code == 201
        identifier = {"basin": "rhine", "date": "20260402", "level": 3}
        assert aviso.notify("river_gauge", identifier, {"level": 3}).status_code == 200
        message_id, event = handled.get(timeout=WAIT)
        assert message_id == f"river_gauge@{event['sequence']}"
        assert event["data"]["payload"] == {"level": 3}
        deadline = time.monotonic() + WAIT
        while (state := aviso.get("/api/v1/subscriptions/doc").json())["deliveries"][
            "delivered"
        ] != 1 and time.monotonic() < deadline:
            time.sleep(0.01)  # a state announces no change: it is polled
        assert state["deliveries"]["delivered"] == 1
    forged = httpx.post(
        url,
        content=b"{}",
        headers={
            "webhook-id": "river_gauge@1",
            "webhook-timestamp": str(int(time.time())),
            "webhook-signature": "v1,AAAA",
        },
    )
    assert forged.status_code == 401
    assert handled.empty()
