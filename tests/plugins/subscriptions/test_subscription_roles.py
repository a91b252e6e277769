"""With auth on, a push subscription delivers only while its owner may read its stream: the
owner as their last request authenticated them is checked again (roles, authorisers) before
it delivers, so a role revoked stops delivery, and restored resumes it from the cursor."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from tests.conformance.auth_support import document as auth_document
from tests.support.fake_auth_o_tron import fake_auth_o_tron
from tests.support.server import running_server
from tests.support.tokens import mint

SUBSCRIPTIONS = "/api/v1/subscriptions"
WAIT = 30.0
FEED = {
    "topic": {"base": "split", "key_order": ["name"]},
    "identifier": {"name": {"type": "StringHandler", "required": True}},
    "auth": {"required": True, "read_roles": {"localrealm": ["analyst"]}},
}


class _Hook(BaseHTTPRequestHandler):
    received: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        type(self).received.append(self.headers["webhook-id"])
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def receiver() -> Iterator[tuple[str, list[str]]]:
    received: list[str] = []
    handler = type("Hook", (_Hook,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def bearer(user: str, *roles: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint(user, roles=roles)}"}


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_revoked_role_stops_a_push_delivery_and_a_restored_one_resumes_it() -> None:
    with fake_auth_o_tron() as aot, receiver() as (url, received):
        doc = auth_document("direct", aot.url, schemas={"split_feed": FEED})
        doc["subscriptions"] = {"webhook": {"allow_private_networks": True}}
        with running_server(doc) as server, httpx.Client(base_url=server.url) as client:
            analyst, revoked = bearer("alice", "analyst"), bearer("alice")
            admin = bearer("root", "admin")
            body = {
                "event_type": "split_feed",
                "identifier": {"name": "n1"},
                "delivery": {"kind": "webhook", "url": url},
            }
            mine = f"{SUBSCRIPTIONS}/mine"
            assert client.put(mine, json=body, headers=analyst).status_code == 201

            def notify() -> None:
                response = client.post(
                    "/api/v1/notification",
                    json={"event_type": "split_feed", "identifier": {"name": "n1"}},
                    headers=admin,
                )
                assert response.status_code == 200, response.text

            def status() -> str:
                views = client.get(SUBSCRIPTIONS, headers=analyst).json()["subscriptions"]
                return str(views[0]["deliveries"]["status"])

            notify()
            wait_for(lambda: received == ["split_feed@1"])
            # Alice's role is gone: her next request says so, and the delivery stops.
            assert client.get(mine, headers=revoked).status_code == 403
            notify()
            wait_for(lambda: status() == "forbidden")
            assert received == ["split_feed@1"]
            # Restored: delivery resumes where it stopped.
            assert client.get(mine, headers=analyst).status_code == 200
            wait_for(lambda: received == ["split_feed@1", "split_feed@2"])
            assert status() == "active"
