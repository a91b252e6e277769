"""A loopback stand-in for an ECPDS server, a real HTTP server.

Constructed with ``(mode, delay_ms, table)``; ``mode`` and ``delay_ms`` may be switched
while it runs. Only ``GET /ecpds/v1/destination/list`` is served; ``GET /_count?id=<user>``
and ``POST /_reset`` are the introspection endpoints.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.loopback import Handler, serve
from tests.support.tokens import basic

SERVICE_USER = "svc-aviso"
SERVICE_PASSWORD = "svc-secret"
LIST_PATH = "/ecpds/v1/destination/list"

Answer = tuple[int, Any]
"""HTTP status and JSON body (``None``: no body)."""

_ENTITLED = {
    "success": "yes",
    "destinationList": [
        {"name": "CIP", "active": True, "type": 32},
        {"name": "FOO", "active": True},
        {"name": "OLDFEED", "active": False},
        {"id": "NONAME", "active": True},
    ],
}
_EMPTY = {"success": "yes", "destinationList": []}

# A key ending in "*" matches the id itself and every id starting with "<key>-".
TABLE_A: dict[str, Answer] = {
    "ecpds-user*": (200, _ENTITLED),
    "u+s er&name": (200, _ENTITLED),
    "ecpds-noaccess*": (200, _EMPTY),
    "ecpds-unavailable*": (500, {"error": "upstream exploded: secret stack trace"}),
    "ecpds-success-no": (
        200,
        {"success": "no", "destinationList": [{"name": "CIP", "active": True}]},
    ),
    "ecpds-badshape": (200, {"success": True, "destinationList": []}),
}
TABLE_B: dict[str, Answer] = {
    "ecpds-user*": (200, {"success": "yes", "destinationList": [{"name": "BAR", "active": True}]}),
}
MODES = ("normal", "down", "forbidden", "throttled", "garbage")


def lookup(table: Mapping[str, Answer], user: str) -> Answer:
    for key, answer in table.items():
        if key.endswith("*"):
            stem = key[:-1]
            if user == stem or user.startswith(stem + "-"):
                return answer
        elif key == user:
            return answer
    return 200, _EMPTY


@dataclass
class FakeEcpds:
    mode: str = "normal"
    delay_ms: int = 0
    table: Mapping[str, Answer] = field(default_factory=lambda: TABLE_A)
    url: str = ""
    counts: Counter[str] = field(default_factory=Counter)
    queries: list[str] = field(default_factory=list)
    """Raw query strings of list requests, in arrival order."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, user: str) -> int:
        with self.lock:
            return self.counts[user]

    def total(self) -> int:
        with self.lock:
            return sum(self.counts.values())

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.queries.clear()

    def set_answer(self, user: str, answer: Answer) -> None:
        """Answer ``user`` with this from now on, ahead of every table row (e.g. to revoke
        a destination while a stream is open)."""
        with self.lock:
            rest = {key: value for key, value in self.table.items() if key != user}
            self.table = {user: answer, **rest}


class _EcpdsHandler(Handler):
    @property
    def fake(self) -> FakeEcpds:
        return self.server.owner  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        if parts.path == "/_count":
            user = query.get("id", [""])[0]
            self.reply(200, json.dumps({"count": self.fake.count(user)}).encode())
        elif parts.path == LIST_PATH:
            self._list(parts.query, query.get("id", [""])[0])
        else:
            self.reply(404)

    def do_POST(self) -> None:
        if urlsplit(self.path).path == "/_reset":
            self.fake.reset()
            self.reply(200, b"{}")
        else:
            self.reply(404)

    def _list(self, raw_query: str, user: str) -> None:
        fake = self.fake
        with fake.lock:
            fake.counts[user] += 1
            fake.queries.append(raw_query)
            table = fake.table
        if fake.delay_ms:
            time.sleep(fake.delay_ms / 1000)
        expected = basic(SERVICE_USER, SERVICE_PASSWORD)["Authorization"]
        if self.headers.get("Authorization") != expected:
            self.reply(401, b'{"error":"bad service credentials"}')
            return
        match fake.mode:
            case "down":
                self.reply(500, b'{"error":"down"}')
            case "forbidden":
                self.reply(403, b'{"error":"forbidden"}')
            case "throttled":
                self.reply(429, b'{"error":"slow down"}')
            case "garbage":
                self.reply(200, b"not json", content_type="text/plain")
            case _:
                status, body = lookup(table, user)
                self.reply(status, b"" if body is None else json.dumps(body).encode())


@contextmanager
def fake_ecpds(
    mode: str = "normal", delay_ms: int = 0, table: Mapping[str, Answer] = TABLE_A
) -> Iterator[FakeEcpds]:
    fake = FakeEcpds(mode, delay_ms, table)
    with serve(_EcpdsHandler, fake) as url:
        fake.url = url
        yield fake
