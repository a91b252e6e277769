"""A loopback stand-in for auth-o-tron, a real HTTP server.

``GET /authenticate`` answers per the user directory and the scripted users; ``GET
/_requests`` and ``POST /_reset`` are the introspection endpoints. Switchable failures:
set ``fail_status`` to answer every ``/authenticate`` with that status, ``delay_seconds``
to sleep before answering.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support.loopback import Handler, serve
from tests.support.tokens import OTHER_SECRET, mint

JWT_SHAPED_PARTS = 3


@dataclass(frozen=True)
class User:
    password: str
    realm: str | None
    roles: tuple[str, ...]
    omit: tuple[str, ...] = ()


DIRECTORY: dict[str, User] = {
    "admin-user": User("admin-pass", "localrealm", ("admin",)),
    "reader-user": User("reader-pass", "localrealm", ("reader",)),
    "producer-user": User("producer-pass", "localrealm", ("producer",)),
    "analyst-user": User("analyst-pass", "localrealm", ("analyst",)),
    "partner-user": User("partner-pass", "partnerrealm", ("partner",)),
    "foreign-admin": User("foreign-pass", "otherrealm", ("admin",)),
    "norealm-user": User("norealm-pass", None, ("admin",)),
    "subonly-user": User("subonly-pass", "localrealm", ("reader",), omit=("username",)),
    "ecpds-user": User("ecpds-pass", "localrealm", ("reader",)),
    "ecpds-noaccess": User("ecpds-pass", "localrealm", ("reader",)),
    "ecpds-unavailable": User("ecpds-pass", "localrealm", ("reader",)),
}

PASSWORDS = {name: user.password for name, user in DIRECTORY.items()}
SCRIPTED = frozenset(
    {
        "deny-user",
        "boom-user",
        "teapot-user",
        "slow-user",
        "body-token-user",
        "body-jwt-user",
        "body-access-user",
        "body-raw-user",
        "body-quoted-user",
        "no-token-user",
        "expired-user",
        "badsig-user",
        "cookie-user",
    }
)
SLOW_SECONDS = 30.0
"""How long ``slow-user`` takes: past any auth timeout the tests configure."""


def jwt_shaped(text: str) -> bool:
    parts = text.split(".")
    allowed = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    return len(parts) == JWT_SHAPED_PARTS and all(part and set(part) <= allowed for part in parts)


def _token(user: str) -> str:
    entry = DIRECTORY.get(user)
    if entry is None:
        return mint(user, "localrealm", ["reader"])
    return mint(user, entry.realm, entry.roles, omit=entry.omit)


@dataclass
class FakeAuthOTron:
    url: str = ""
    fail_status: int | None = None
    delay_seconds: float = 0.0
    calls: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requests(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.calls)

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
        self.fail_status = None
        self.delay_seconds = 0.0


class _AuthOTronHandler(Handler):
    @property
    def fake(self) -> FakeAuthOTron:
        return self.server.owner  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:
        if self.path == "/_requests":
            self.reply(200, json.dumps(self.fake.requests()).encode())
        elif self.path == "/authenticate":
            self._authenticate()
        else:
            self.reply(404)

    def do_POST(self) -> None:
        if self.path == "/_reset":
            self.fake.reset()
            self.reply(200, b"{}")
        else:
            self.reply(404)

    def _authenticate(self) -> None:
        fake = self.fake
        authorization = self.headers.get("Authorization")
        with fake.lock:
            fake.calls.append(
                {
                    "authorization": authorization,
                    "headers": sorted({name.lower() for name in self.headers}),
                }
            )
        if fake.delay_seconds:
            time.sleep(fake.delay_seconds)
        if fake.fail_status is not None:
            self.reply(fake.fail_status)
            return
        if authorization is None:
            self.reply(401)
            return
        scheme, _, credential = authorization.partition(" ")
        if scheme.lower() == "bearer":
            token = credential.strip()
            if jwt_shaped(token):
                self.reply(200, headers=[("Authorization", f"Bearer {token}")])
            else:
                self.reply(401)
            return
        if scheme.lower() != "basic":
            self.reply(401)
            return
        try:
            decoded = base64.b64decode(credential.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            self.reply(401)
            return
        user, _, password = decoded.partition(":")
        if user in SCRIPTED:
            self._scripted(user)
        elif PASSWORDS.get(user) == password:
            self.reply(
                200,
                b"authenticated",
                headers=[("Authorization", f"Bearer {_token(user)}")],
                content_type="text/plain",
            )
        else:
            self.reply(401)

    def _scripted(self, user: str) -> None:
        token = _token(user)
        match user:
            case "deny-user":
                self.reply(403)
            case "boom-user":
                self.reply(500, b'{"error":"internal boom"}')
            case "teapot-user":
                self.reply(418)
            case "slow-user":
                time.sleep(SLOW_SECONDS)
                self.reply(200, headers=[("Authorization", f"Bearer {token}")])
            case "body-token-user":
                self.reply(200, json.dumps({"token": token}).encode())
            case "body-jwt-user":
                self.reply(200, json.dumps({"jwt": token}).encode())
            case "body-access-user":
                self.reply(200, json.dumps({"access_token": token}).encode())
            case "body-raw-user":
                self.reply(200, token.encode(), content_type="text/plain")
            case "body-quoted-user":
                self.reply(200, json.dumps(token).encode())
            case "no-token-user":
                self.reply(200, b"{}")
            case "expired-user":
                expired = mint(user, "localrealm", ["reader"], exp_offset=-600)
                self.reply(200, headers=[("Authorization", f"Bearer {expired}")])
            case "badsig-user":
                forged = mint(user, "localrealm", ["reader"], secret=OTHER_SECRET)
                self.reply(200, headers=[("Authorization", f"Bearer {forged}")])
            case "cookie-user":
                self.reply(
                    200,
                    headers=[
                        ("Authorization", f"Bearer {token}"),
                        ("Set-Cookie", "aot_session=cookie-user; Path=/"),
                    ],
                )


@contextmanager
def fake_auth_o_tron() -> Iterator[FakeAuthOTron]:
    fake = FakeAuthOTron()
    with serve(_AuthOTronHandler, fake) as url:
        fake.url = url
        yield fake
