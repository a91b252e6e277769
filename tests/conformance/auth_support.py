"""Shared configuration and helpers of the auth conformance suite.

Servers are real uvicorn servers on 127.0.0.1; auth-o-tron and ECPDS are the loopback
doubles of ``tests/support``. Nothing in the host is mocked.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from tests.conformance.helpers import request_id_header
from tests.support.fake_auth_o_tron import FakeAuthOTron, fake_auth_o_tron
from tests.support.fake_ecpds import fake_ecpds
from tests.support.server import RunningServer, running_server
from tests.support.tokens import SECRET

AUTH_KEYS = ["code", "error", "message", "request_id"]
CODES = {
    401: ("UNAUTHORIZED", "unauthorized"),
    403: ("FORBIDDEN", "forbidden"),
    500: ("INTERNAL_ERROR", "internal_error"),
    503: ("SERVICE_UNAVAILABLE", "service_unavailable"),
}

NOTIFY = "/api/v1/notification"
WATCH = "/api/v1/watch"
REPLAY = "/api/v1/replay"
READS = (WATCH, REPLAY)

_FEED = {
    "identifier": {"name": {"type": "StringHandler", "required": True}},
    "payload": {"required": False},
}


def _feed(base: str, auth: dict[str, Any] | None = None) -> dict[str, Any]:
    entry = copy.deepcopy(_FEED)
    entry["topic"] = {"base": base, "key_order": ["name"]}
    if auth is not None:
        entry["auth"] = auth
    return entry


def _ecpds_feed(base: str, auth: dict[str, Any]) -> dict[str, Any]:
    return {
        "topic": {"base": base, "key_order": ["destination", "class"]},
        "identifier": {
            "destination": {"type": "StringHandler", "required": True},
            "class": {"type": "StringHandler", "required": False},
        },
        "payload": {"required": False},
        "auth": auth,
    }


SCHEMAS: dict[str, Any] = {
    "public_feed": _feed("public"),
    "declared_public": _feed("declpublic", {"required": False}),
    "protected_feed": _feed("protected", {"required": True}),
    "producer_feed": _feed(
        "producer", {"required": True, "write_roles": {"localrealm": ["producer"]}}
    ),
    "admin_read_feed": _feed(
        "adminread", {"required": True, "read_roles": {"localrealm": ["admin"]}}
    ),
    "wildcard_feed": _feed("wildcard", {"required": True, "read_roles": {"localrealm": ["*"]}}),
    "split_feed": _feed(
        "split",
        {
            "required": True,
            "read_roles": {"localrealm": ["analyst"]},
            "write_roles": {"localrealm": ["producer"]},
        },
    ),
    "dissemination_ecpds": _ecpds_feed("diss_ecpds", {"required": True, "plugins": ["ecpds"]}),
    "dissemination_ecpds_writable": _ecpds_feed(
        "diss_ecpds_w",
        {"required": True, "plugins": ["ecpds"], "write_roles": {"localrealm": ["producer"]}},
    ),
}


def document(
    mode: str = "direct",
    auth_o_tron_url: str = "",
    ecpds_servers: list[str] | None = None,
    policy: str = "strict",
    schemas: dict[str, Any] | None = None,
    **auth: Any,
) -> dict[str, Any]:
    """An auth-enabled configuration (plus ECPDS when servers are given)."""
    chosen = copy.deepcopy(schemas if schemas is not None else SCHEMAS)
    if ecpds_servers is None:
        chosen = {
            name: entry for name, entry in chosen.items() if "plugins" not in entry.get("auth", {})
        }
    doc: dict[str, Any] = {
        "application": {"host": "127.0.0.1", "port": 0, "base_url": "http://aviso.test"},
        "notification_backend": {"kind": "in_memory", "in_memory": {"max_history_per_topic": 100}},
        "auth": {
            "enabled": True,
            "mode": mode,
            "auth_o_tron_url": auth_o_tron_url,
            "jwt_secret": SECRET,
            "admin_roles": {"localrealm": ["admin"]},
            # The loopback auth-o-tron answers in milliseconds; a loaded machine must not turn
            # a slow answer into a wrongful 503.
            "timeout_ms": 10_000,
            **auth,
        },
        "notification_schema": chosen,
    }
    if ecpds_servers is not None:
        doc["ecpds"] = {
            "username": "svc-aviso",
            "password": "svc-secret",
            "servers": ecpds_servers,
            "match_key": "destination",
            "partial_outage_policy": policy,
        }
    return doc


# -- deployments -----------------------------------------------------------------------


@dataclass
class Deployment:
    """A real auth-enabled server, the loopback auth-o-tron it asks, and a client to it."""

    mode: str
    aot: FakeAuthOTron
    server: RunningServer
    client: httpx.Client

    @property
    def challenges(self) -> list[str]:
        """The ``WWW-Authenticate`` fields this mode's 401 carries."""
        return ["Bearer"] if self.mode == "trusted_proxy" else ["Bearer", "Basic"]

    def forwarded(self) -> list[dict[str, Any]]:
        """What aviso sent to auth-o-tron since the last reset (via the fake's own API)."""
        return httpx.get(f"{self.aot.url}/_requests").json()

    def reset(self) -> None:
        """Empty the fake's request log and clear its scripted failures."""
        httpx.post(f"{self.aot.url}/_reset")


@contextmanager
def deploy(
    doc: dict[str, Any], aot: FakeAuthOTron, client_timeout: float = 30.0
) -> Iterator[Deployment]:
    """Serve ``doc`` (a :func:`document` naming ``aot``) and open a client to it."""
    with (
        running_server(doc) as server,
        httpx.Client(base_url=server.url, timeout=client_timeout) as client,
    ):
        yield Deployment(doc["auth"]["mode"], aot, server, client)


@contextmanager
def direct_deployment() -> Iterator[Deployment]:
    """The auth configuration in direct mode against its own loopback auth-o-tron."""
    with fake_auth_o_tron() as aot, deploy(document("direct", aot.url), aot) as deployment:
        yield deployment


@contextmanager
def both_modes(client_timeout: float = 30.0, **direct_auth: Any) -> Iterator[dict[str, Deployment]]:
    """A direct and a trusted-proxy server sharing one auth-o-tron and one ECPDS double;
    ``direct_auth`` changes the direct server's ``auth`` block only."""
    with fake_auth_o_tron() as aot, fake_ecpds() as ecpds:
        servers = [ecpds.url]
        with (
            deploy(
                document("direct", aot.url, servers, **direct_auth), aot, client_timeout
            ) as direct,
            deploy(document("trusted_proxy", aot.url, servers), aot, client_timeout) as proxy,
        ):
            yield {"direct": direct, "trusted_proxy": proxy}


# -- requests --------------------------------------------------------------------------


def body(event_type: str, identifier: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"event_type": event_type, "identifier": identifier or {"name": "n1"}, **extra}


def read_body(
    event_type: str, path: str, identifier: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A watch (live) or replay (from sequence 1) body."""
    extra = {"from_id": "1"} if path == REPLAY else {}
    return body(event_type, identifier, **extra)


def call(
    client: httpx.Client,
    path: str,
    payload: Any,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> httpx.Response:
    """POST and return the response; a 200 event stream is closed after the headers."""
    content = raw if raw is not None else json.dumps(payload).encode()
    with client.stream("POST", path, content=content, headers=headers or {}) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
        return response


def assert_auth_error(
    response: httpx.Response, status: int, message: str | None = None
) -> dict[str, Any]:
    """Exactly the four members in order, the status's code, request_id = header."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].split(";")[0] == "application/json"
    document = json.loads(response.text)
    assert list(document) == AUTH_KEYS, response.text
    code, error = CODES[status]
    assert document["code"] == code and document["error"] == error, document
    assert document["request_id"] == request_id_header(response)
    if message is not None:
        assert document["message"] == message, document
    challenges = response.headers.get_list("www-authenticate")
    if status != 401:
        assert challenges == [], challenges
    return document


def challenges(response: httpx.Response) -> list[str]:
    return response.headers.get_list("www-authenticate")
