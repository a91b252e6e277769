"""Auth providers see the request (method, path, headers, client address), not one header;
providers written against the old ``authenticate(authorization)`` still work, with a
deprecation warning."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx

from aviso_host.auth.request_view import takes_authorization_header
from aviso_host.config import settings_from_document
from aviso_host.plugins import discover
from aviso_plugins import hookimpl
from aviso_plugins.types import (
    AuthError,
    AuthProvider,
    AuthRequest,
    Caller,
    MalformedCredentials,
    RequestHeaders,
)
from tests.conformance.auth_support import NOTIFY, body, document
from tests.support.server import running_server


class SignedCookieProvider(AuthProvider):
    """``session=<user>.<hex HMAC-SHA256 of user>`` signed with the secret ``key`` option."""

    mode = "signed_cookie"
    challenges = ("Cookie",)
    options_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "required": ["key"],
        "properties": {"key": {"type": "string", "writeOnly": True}},
    }
    seen: ClassVar[list[AuthRequest]] = []

    async def authenticate(self, request: AuthRequest) -> Caller | None:
        type(self).seen.append(request)
        session = request.cookies.get("session")
        if session is None:
            return None
        user, _, signature = session.rpartition(".")
        if not user:
            raise MalformedCredentials("session cookie is malformed")
        if not hmac.compare_digest(signature, sign(user)):
            raise AuthError(401, "Invalid session")
        return Caller(username=user, realm="localrealm", roles=frozenset({"admin"}))


COOKIE_KEY = "cookie-signing-key-0001"


def sign(user: str) -> str:
    return hmac.new(COOKIE_KEY.encode(), user.encode(), hashlib.sha256).hexdigest()


class LegacyProvider(AuthProvider):
    """Written against aviso-py 0.x: receives the ``Authorization`` header value only."""

    mode = "legacy"
    received: ClassVar[list[str | None]] = []

    async def authenticate(self, authorization: str | None) -> Caller | None:
        type(self).received.append(authorization)
        if authorization is None:
            return None
        if authorization != "Token let-me-in":
            raise AuthError(401, "Invalid token")
        return Caller(username="old", realm="localrealm", roles=frozenset({"admin"}))


class _Plugin:
    @hookimpl
    def aviso_auth_providers(self) -> list[type[AuthProvider]]:
        return [SignedCookieProvider, LegacyProvider]


def _notify(client: httpx.Client, **kwargs: Any) -> httpx.Response:
    return client.post(NOTIFY, content=json.dumps(body("protected_feed")), **kwargs)


def test_a_provider_reads_a_signed_cookie_and_sees_method_path_and_client() -> None:
    doc = document("signed_cookie", signed_cookie={"key": COOKIE_KEY})
    SignedCookieProvider.seen.clear()
    with (
        running_server(doc, [_Plugin()]) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        anonymous = _notify(client)
        assert anonymous.status_code == 401
        assert anonymous.headers.get_list("www-authenticate") == ["Cookie"]
        signed = {
            "Cookie": f"theme=dark; session=ada.{sign('ada')}",
            "X-Trace": "a",
            # The peer (this test, on loopback) is the client, whatever a header claims.
            "X-Forwarded-For": "203.0.113.7",
        }
        assert _notify(client, headers=signed).status_code == 200
        forged = _notify(client, headers={"Cookie": f"session=eve.{sign('ada')}"})
        assert forged.status_code == 401
        assert forged.json()["message"] == "Invalid session"
        wipe = client.delete("/api/v1/admin/wipe/all", headers={"Cookie": "session=nodot"})
        assert wipe.json()["message"] == "session cookie is malformed"
    seen = SignedCookieProvider.seen[1]
    assert (seen.method, seen.path, seen.client) == ("POST", NOTIFY, "127.0.0.1")
    assert seen.headers["x-trace"] == seen.headers["X-TRACE"] == "a"
    assert seen.cookies == {"theme": "dark", "session": f"ada.{sign('ada')}"}
    assert seen.authorization is None
    assert SignedCookieProvider.seen[-1].method == "DELETE"


def test_a_provider_of_the_old_signature_gets_the_authorization_header() -> None:
    LegacyProvider.received.clear()
    registry = discover(extra=[_Plugin()])
    settings = settings_from_document(document("legacy"), registry)
    assert [w for w in settings.warnings if "deprecated" in w] == [
        "auth.mode: auth provider 'legacy' declares authenticate(authorization), which "
        "receives only the Authorization header; it is deprecated: declare "
        "authenticate(self, request: AuthRequest) (auth provider 'legacy' (registered in code))"
    ]
    with (
        running_server(document("legacy"), [_Plugin()]) as server,
        httpx.Client(base_url=server.url, timeout=10.0) as client,
    ):
        assert _notify(client).status_code == 401
        assert _notify(client, headers={"Authorization": "Token let-me-in"}).status_code == 200
        assert _notify(client, headers={"Authorization": "Token no"}).status_code == 401
    assert LegacyProvider.received == [None, "Token let-me-in", "Token no"]


def test_the_old_signature_is_recognised_by_name_or_text_annotation() -> None:
    class ByAnnotation(AuthProvider):
        async def authenticate(self, header: str | None) -> Caller | None:
            return None

    class Current(AuthProvider):
        async def authenticate(self, request: AuthRequest) -> Caller | None:
            return None

    class Unannotated(AuthProvider):
        async def authenticate(self, req):
            return None

    assert takes_authorization_header(LegacyProvider)
    assert takes_authorization_header(ByAnnotation)
    assert not takes_authorization_header(Current)
    assert not takes_authorization_header(Unannotated)
    assert not takes_authorization_header(SignedCookieProvider)


def test_request_headers_are_read_only_case_insensitive_and_keep_repeats() -> None:
    headers = RequestHeaders.from_raw(
        [(b"X-Forwarded-For", b"10.0.0.1"), (b"x-forwarded-for", b"\xe9")]
    )
    assert headers["x-forwarded-for"] == "10.0.0.1"
    assert headers.get_list("X-Forwarded-For") == ["10.0.0.1", "\xe9"]
    assert list(headers) == ["x-forwarded-for"]
    assert len(headers) == 1
    assert "10.0.0.1" not in repr(headers)
    assert not hasattr(headers, "__setitem__")
