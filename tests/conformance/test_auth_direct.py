"""Auth conformance, direct mode and auth disabled.

Every test talks HTTP to a real uvicorn server whose auth-o-tron is the loopback double of
``tests/support/fake_auth_o_tron.py``; its ``/_requests`` log shows what aviso forwarded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conformance.auth_support import (
    NOTIFY,
    READS,
    REPLAY,
    WATCH,
    Deployment,
    assert_auth_error,
    body,
    call,
    challenges,
    direct_deployment,
    document,
    read_body,
)
from tests.support.process import aviso_process, free_port
from tests.support.raw_http import raw_request
from tests.support.server import running_server
from tests.support.tokens import OTHER_SECRET, basic, bearer, mint

INVALID = "Invalid or expired token"
UNAVAILABLE = "Authentication service temporarily unavailable"


@pytest.fixture(scope="module")
def direct() -> Iterator[Deployment]:
    with direct_deployment() as deployment:
        yield deployment


@pytest.fixture
def env(direct: Deployment) -> Deployment:
    direct.reset()
    return direct


# -- auth disabled ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def disabled() -> Iterator[httpx.Client]:
    doc = document("direct", "http://127.0.0.1:9")
    doc["auth"]["enabled"] = False
    doc["notification_schema"] = {
        name: {key: value for key, value in entry.items() if key != "auth"}
        for name, entry in doc["notification_schema"].items()
    }
    with running_server(doc) as server, httpx.Client(base_url=server.url) as client:
        yield client


@pytest.mark.parametrize("event_type", ["public_feed", "protected_feed", "producer_feed"])
def test_disabled_auth_ignores_a_garbage_bearer(disabled: httpx.Client, event_type: str) -> None:
    response = call(disabled, NOTIFY, body(event_type), {"Authorization": "Bearer garbage"})
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "success"


def test_disabled_auth_leaves_admin_open(disabled: httpx.Client) -> None:
    response = disabled.delete("/api/v1/admin/wipe/all")
    assert response.status_code == 200, response.text
    assert response.json()["success"] is True


# -- public routes never consult auth-o-tron --------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Digest abc"},
        {"Authorization": "Bearer not-a-token"},
        bearer(mint("reader-user", secret=OTHER_SECRET)),
        basic("reader-user", "reader-pass"),
    ],
    ids=["malformed", "opaque", "badsig", "basic"],
)
@pytest.mark.parametrize("path", ["/api/v1/schema", "/api/v1/schema/public_feed"])
def test_schema_routes_are_public(env: Deployment, path: str, headers: dict[str, str]) -> None:
    response = env.client.get(path, headers=headers)
    assert response.status_code == 200, response.text
    assert env.forwarded() == []


def test_schema_routes_work_while_auth_o_tron_is_down(env: Deployment) -> None:
    env.aot.fail_status = 500
    try:
        for path in ("/api/v1/schema", "/api/v1/schema/protected_feed"):
            response = env.client.get(path, headers=basic("reader-user", "reader-pass"))
            assert response.status_code == 200
        # The same credential elsewhere does reach the (failing) service: it is down.
        response = call(env.client, NOTIFY, body("public_feed"), basic("reader-user", "x"))
        assert_auth_error(response, 503, UNAVAILABLE)
    finally:
        env.aot.fail_status = None
    assert len(env.forwarded()) == 1


def test_schema_routes_with_auth_o_tron_unreachable() -> None:
    doc = document("direct", f"http://127.0.0.1:{free_port()}")
    with running_server(doc) as server, httpx.Client(base_url=server.url) as client:
        headers = basic("reader-user", "reader-pass")
        assert client.get("/api/v1/schema", headers=headers).status_code == 200
        assert client.get("/api/v1/schema/public_feed", headers=headers).status_code == 200


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Digest abc"}, basic("nobody", "wrong")])
def test_health_never_authenticates(env: Deployment, headers: dict[str, str]) -> None:
    public = ("/health", "/status", "/", "/console", "/api-docs/openapi.json", "/swagger-ui/")
    for path in public:
        response = env.client.get(path, headers=headers)
        assert response.status_code == 200, (path, response.status_code)
    assert env.forwarded() == []


# -- what is forwarded -------------------------------------------------------------------


def test_basic_credential_forwarded_verbatim_once(env: Deployment) -> None:
    value = basic("reader-user", "reader-pass")["Authorization"]
    headers = [
        (b"Authorization", f"  {value}  ".encode()),
        (b"X-Request-ID", b"client-chosen"),
        (b"Cookie", b"session=abc"),
        (b"X-Custom", b"1"),
    ]
    content = json.dumps(read_body("protected_feed", REPLAY)).encode()
    response = raw_request(env.server.url, "POST", REPLAY, headers, content)
    assert response.status == 200, response.body
    calls = env.forwarded()
    assert len(calls) == 1
    assert calls[0]["authorization"] == value
    for leaked in ("x-request-id", "cookie", "x-custom"):
        assert leaked not in calls[0]["headers"], calls[0]
    # One call per aviso request, also for notify and replay.
    call(
        env.client, REPLAY, read_body("protected_feed", REPLAY), basic("reader-user", "reader-pass")
    )
    call(env.client, NOTIFY, body("public_feed"), basic("reader-user", "reader-pass"))
    assert len(env.forwarded()) == 3


def test_opaque_bearer_is_forwarded_too(env: Deployment) -> None:
    response = call(env.client, NOTIFY, body("public_feed"), {"Authorization": "Bearer opaque"})
    assert_auth_error(response, 401, INVALID)
    assert [entry["authorization"] for entry in env.forwarded()] == ["Bearer opaque"]


def test_cookies_from_auth_o_tron_never_travel_on(env: Deployment) -> None:
    for _ in range(2):
        response = call(env.client, NOTIFY, body("public_feed"), basic("cookie-user", "x"))
        assert response.status_code == 200, response.text
    assert all("cookie" not in entry["headers"] for entry in env.forwarded())


# -- mapping auth-o-tron's answers ----------------------------------------------------------


@pytest.mark.parametrize(
    "user",
    [
        "reader-user",
        "body-token-user",
        "body-jwt-user",
        "body-access-user",
        "body-quoted-user",
        "body-raw-user",
    ],
)
def test_token_locations(env: Deployment, user: str) -> None:
    password = "reader-pass" if user == "reader-user" else "any"
    for path in READS:
        response = call(env.client, path, read_body("protected_feed", path), basic(user, password))
        assert response.status_code == 200, (user, path, response.text)


@pytest.mark.parametrize(
    ("user", "status", "message"),
    [
        ("nobody", 401, INVALID),
        ("deny-user", 403, "Token validation was denied"),
        ("boom-user", 503, UNAVAILABLE),
        ("teapot-user", 503, UNAVAILABLE),
        ("no-token-user", 503, UNAVAILABLE),
        ("slow-user", 503, UNAVAILABLE),
    ],
)
def test_auth_o_tron_outcomes(env: Deployment, user: str, status: int, message: str) -> None:
    response = call(env.client, NOTIFY, body("public_feed"), basic(user, "wrong"))
    assert_auth_error(response, status, message)
    if status == 401:
        assert challenges(response) == ["Bearer", "Basic"]


def test_connection_refused_is_503() -> None:
    doc = document("direct", f"http://127.0.0.1:{free_port()}")
    with running_server(doc) as server, httpx.Client(base_url=server.url) as client:
        response = call(client, NOTIFY, body("public_feed"), basic("reader-user", "reader-pass"))
        assert_auth_error(response, 503, UNAVAILABLE)
        # Anonymous requests never need the service.
        assert call(client, NOTIFY, body("public_feed")).status_code == 200


def test_unusable_url_is_503() -> None:
    with (
        running_server(document("direct", "not a url at all")) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        response = call(client, NOTIFY, body("public_feed"), basic("reader-user", "reader-pass"))
        assert_auth_error(response, 503, UNAVAILABLE)


@pytest.mark.parametrize("user", ["expired-user", "badsig-user"])
def test_returned_token_validated_locally(env: Deployment, user: str) -> None:
    response = call(env.client, NOTIFY, body("public_feed"), basic(user, "any"))
    assert_auth_error(response, 401, INVALID)


# -- admin paths, challenges, body shape ----------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/admin/wipe/all",
        "/api/v1/admin/wipe/stream",
        "/api/v1/admin/notification/protected_feed@1",
        "/api/v1/admin/unknown",  # auth precedes route matching
    ],
)
def test_admin_without_header(env: Deployment, path: str) -> None:
    response = env.client.delete(path)
    assert_auth_error(response, 401, "Authorization header is required")
    assert challenges(response) == ["Bearer", "Basic"]
    assert env.forwarded() == []


def test_admin_wrong_method_still_authenticates(env: Deployment) -> None:
    response = env.client.get("/api/v1/admin/wipe/all")
    assert_auth_error(response, 401, "Authorization header is required")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"Digest abc", "Authorization header must use Bearer or Basic scheme"),
        (b"Bearerabc", "Authorization header must use Bearer or Basic scheme"),
        (b"   ", "Authorization header cannot be empty"),
        (b"", "Authorization header cannot be empty"),
        # HTTP parsers drop trailing whitespace, so "Bearer   " arrives as "Bearer"; the
        # "credentials cannot be empty" case is covered by the header parser's unit test.
        (b"Bearer    ", "Authorization header must use Bearer or Basic scheme"),
        (b"Basic \xff\xfe", "Authorization header is not valid UTF-8"),
    ],
    ids=["scheme", "no-space", "blank", "empty", "bare-scheme", "non-ascii"],
)
def test_admin_with_malformed_header(env: Deployment, raw: bytes, message: str) -> None:
    response = raw_request(
        env.server.url, "DELETE", "/api/v1/admin/wipe/all", [(b"Authorization", raw)]
    )
    assert response.status == 401, response.body
    assert list(response.json()) == ["code", "error", "message", "request_id"]
    assert response.json()["message"] == message
    assert response.json()["request_id"] == response.header_list("x-request-id")[0]
    assert response.header_list("www-authenticate") == ["Bearer", "Basic"]
    assert env.forwarded() == []


def test_direct_challenges_only_on_401(env: Deployment) -> None:
    unauthorized = call(env.client, NOTIFY, body("protected_feed"))
    assert_auth_error(unauthorized, 401)
    assert challenges(unauthorized) == ["Bearer", "Basic"]
    raw = [value for name, value in unauthorized.headers.raw if name.lower() == b"www-authenticate"]
    assert raw == [b"Bearer", b"Basic"], "two separate fields, in this order"
    forbidden = call(
        env.client, NOTIFY, body("protected_feed"), basic("reader-user", "reader-pass")
    )
    assert_auth_error(forbidden, 403)
    unavailable = call(env.client, NOTIFY, body("public_feed"), basic("boom-user", "x"))
    assert_auth_error(unavailable, 503)
    assert challenges(forbidden) == challenges(unavailable) == []


def test_every_auth_error_has_the_four_members(env: Deployment) -> None:
    responses = [
        call(env.client, NOTIFY, body("protected_feed")),
        call(
            env.client,
            WATCH,
            read_body("admin_read_feed", WATCH),
            basic("reader-user", "reader-pass"),
        ),
        call(env.client, NOTIFY, body("public_feed"), basic("boom-user", "x")),
        call(env.client, NOTIFY, body("public_feed"), basic("deny-user", "x")),
        env.client.delete("/api/v1/admin/wipe/all", headers=basic("reader-user", "reader-pass")),
        env.client.delete("/api/v1/admin/wipe/all"),
    ]
    for response in responses:
        document_ = json.loads(response.text)
        assert list(document_) == ["code", "error", "message", "request_id"], response.text
        assert "details" not in document_
        assert document_["request_id"] == response.headers["x-request-id"]


def test_unusable_http_clients_fail_closed(tmp_path: Path) -> None:
    """An unreadable CA bundle keeps the HTTP clients from being built: credentialed
    requests answer 503 "not configured correctly" in direct mode, ECPDS streams 500 (no
    checker), anonymous traffic is unaffected."""
    env = {"SSL_CERT_FILE": str(tmp_path / "missing-ca.pem")}
    servers = ["https://ecpds.example"]
    direct_config = tmp_path / "direct.yaml"
    direct_config.write_text(yaml.safe_dump(document("direct", "https://aot.example", servers)))
    with (
        aviso_process(direct_config, tmp_path / "direct.log", env) as (url, _),
        httpx.Client(base_url=url, timeout=10.0) as client,
    ):
        response = call(client, NOTIFY, body("public_feed"), basic("reader-user", "x"))
        assert_auth_error(response, 503, "Authentication service is not configured correctly")
        assert call(client, NOTIFY, body("public_feed")).status_code == 200
    proxy_config = tmp_path / "proxy.yaml"
    proxy_config.write_text(yaml.safe_dump(document("trusted_proxy", "", servers)))
    with (
        aviso_process(proxy_config, tmp_path / "proxy.log", env) as (url, _),
        httpx.Client(base_url=url, timeout=10.0) as client,
    ):
        reader = bearer(mint("ecpds-user", "localrealm", ["reader"]))
        identifier = {"destination": "CIP"}
        response = call(client, WATCH, read_body("dissemination_ecpds", WATCH, identifier), reader)
        assert_auth_error(response, 500, "Server configuration error")
        assert call(client, WATCH, read_body("protected_feed", WATCH), reader).status_code == 200
