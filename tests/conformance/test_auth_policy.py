"""Auth conformance: role matching and the per-stream matrix.

Direct mode against the loopback auth-o-tron, whose directory supplies the users.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conformance.auth_support import (
    NOTIFY,
    READS,
    REPLAY,
    WATCH,
    assert_auth_error,
    body,
    call,
    challenges,
    direct_deployment,
    read_body,
)
from tests.support.fake_auth_o_tron import DIRECTORY
from tests.support.tokens import basic, bearer, mint

ADMIN_ONLY = "Only administrators can write to this stream"
WRITE_DENIED = "User does not have required write role for this stream"
READ_DENIED = "User does not have required read role for this stream"
NOT_ADMIN = "User does not have required administrative role"
REQUIRED = "Authentication is required for this stream"


def as_user(name: str) -> dict[str, str]:
    return basic(name, DIRECTORY[name].password)


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with direct_deployment() as deployment:
        yield deployment.client


def read(client: httpx.Client, event_type: str, path: str, user: str | None) -> httpx.Response:
    headers = as_user(user) if user else {}
    return call(client, path, read_body(event_type, path), headers)


def write(client: httpx.Client, event_type: str, user: str | None) -> httpx.Response:
    return call(client, NOTIFY, body(event_type), as_user(user) if user else {})


# -- protected streams ------------------------------------------------------------------


@pytest.mark.parametrize("path", READS)
def test_any_user_reads_a_protected_stream(client: httpx.Client, path: str) -> None:
    assert read(client, "protected_feed", path, "reader-user").status_code == 200


def test_only_admins_write_without_write_roles(client: httpx.Client) -> None:
    assert_auth_error(write(client, "protected_feed", "reader-user"), 403, ADMIN_ONLY)
    assert write(client, "protected_feed", "admin-user").status_code == 200


@pytest.mark.parametrize("path", [NOTIFY, *READS])
def test_anonymous_is_refused_with_challenges(client: httpx.Client, path: str) -> None:
    payload = body("protected_feed") if path == NOTIFY else read_body("protected_feed", path)
    response = call(client, path, payload)
    assert_auth_error(response, 401, REQUIRED)
    assert challenges(response) == ["Bearer", "Basic"]


# -- write roles ------------------------------------------------------------------------


def test_write_roles(client: httpx.Client) -> None:
    assert write(client, "producer_feed", "producer-user").status_code == 200
    assert_auth_error(write(client, "producer_feed", "reader-user"), 403, WRITE_DENIED)
    assert write(client, "producer_feed", "admin-user").status_code == 200


def test_read_and_write_roles_are_independent(client: httpx.Client) -> None:
    assert read(client, "split_feed", WATCH, "analyst-user").status_code == 200
    assert_auth_error(write(client, "split_feed", "analyst-user"), 403, WRITE_DENIED)
    assert write(client, "split_feed", "producer-user").status_code == 200
    assert_auth_error(read(client, "split_feed", REPLAY, "producer-user"), 403, READ_DENIED)


# -- read roles -------------------------------------------------------------------------


@pytest.mark.parametrize("path", READS)
def test_read_roles(client: httpx.Client, path: str) -> None:
    assert_auth_error(read(client, "admin_read_feed", path, "reader-user"), 403, READ_DENIED)
    assert read(client, "admin_read_feed", path, "admin-user").status_code == 200


# -- wildcard roles ---------------------------------------------------------------------


@pytest.mark.parametrize("path", READS)
def test_wildcard_read_role(client: httpx.Client, path: str) -> None:
    for user in ("reader-user", "analyst-user", "producer-user"):
        assert read(client, "wildcard_feed", path, user).status_code == 200, user
    no_roles = bearer(mint("roleless-user", "localrealm", []))
    response = call(client, path, read_body("wildcard_feed", path), no_roles)
    assert response.status_code == 200, response.text
    assert_auth_error(read(client, "wildcard_feed", path, "partner-user"), 403, READ_DENIED)


def test_a_users_own_star_role_is_not_a_wildcard(client: httpx.Client) -> None:
    star = bearer(mint("star-user", "localrealm", ["*"]))
    response = call(client, REPLAY, read_body("admin_read_feed", REPLAY), star)
    assert_auth_error(response, 403, READ_DENIED)
    admin_path = client.delete("/api/v1/admin/wipe/stream", headers=star)
    assert_auth_error(admin_path, 403, NOT_ADMIN)


# -- admin -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/api/v1/admin/wipe/all", "/api/v1/admin/wipe/stream", "/api/v1/admin/notification/x@1"],
)
def test_admin_role_in_another_realm_is_not_admin(client: httpx.Client, path: str) -> None:
    assert_auth_error(client.delete(path, headers=as_user("foreign-admin")), 403, NOT_ADMIN)


def test_user_without_realm(client: httpx.Client) -> None:
    response = client.delete("/api/v1/admin/wipe/all", headers=as_user("norealm-user"))
    assert_auth_error(response, 403, NOT_ADMIN)
    for path in READS:
        assert read(client, "protected_feed", path, "norealm-user").status_code == 200
        assert_auth_error(read(client, "admin_read_feed", path, "norealm-user"), 403, READ_DENIED)
        assert_auth_error(read(client, "wildcard_feed", path, "norealm-user"), 403, READ_DENIED)
    assert_auth_error(write(client, "protected_feed", "norealm-user"), 403, ADMIN_ONLY)


def test_admin_delete(client: httpx.Client) -> None:
    path = "/api/v1/admin/notification/mars@1"
    assert_auth_error(client.delete(path, headers=as_user("reader-user")), 403, NOT_ADMIN)
    response = client.delete(path, headers=as_user("admin-user"))
    assert response.status_code == 404, response.text
    assert response.json()["message"] == "Notification not found"


def test_per_stream_roles_never_grant_admin(client: httpx.Client) -> None:
    for user in ("producer-user", "analyst-user"):
        response = client.delete("/api/v1/admin/wipe/all", headers=as_user(user))
        assert_auth_error(response, 403, NOT_ADMIN)


def test_admin_may_wipe(client: httpx.Client) -> None:
    headers = {**as_user("admin-user"), "Content-Type": "application/json"}
    response = client.request(
        "DELETE",
        "/api/v1/admin/wipe/stream",
        headers=headers,
        content=b'{"stream_name":"protected_feed"}',
    )
    assert response.status_code == 200, response.text


# -- order of checks --------------------------------------------------------------------


@pytest.mark.parametrize("path", [NOTIFY, *READS])
def test_invalid_json_precedes_stream_auth(client: httpx.Client, path: str) -> None:
    response = call(client, path, None, raw=b"{not json")
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "INVALID_JSON"


@pytest.mark.parametrize("path", [NOTIFY, *READS])
def test_unknown_event_type_precedes_stream_auth(client: httpx.Client, path: str) -> None:
    response = call(client, path, body("no_such_feed"))
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "UNKNOWN_EVENT_TYPE"


def test_notify_point_precedes_stream_auth(client: httpx.Client) -> None:
    response = call(client, NOTIFY, body("protected_feed", {"name": "a", "point": "1,2"}))
    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_NOTIFICATION_REQUEST"


@pytest.mark.parametrize("path", [NOTIFY, *READS])
def test_stream_auth_precedes_identifier_validation(client: httpx.Client, path: str) -> None:
    payload = body("protected_feed", {"unknown_field": "x"})
    if path == REPLAY:
        payload["from_id"] = "1"
    assert_auth_error(call(client, path, payload), 401, REQUIRED)
    allowed = call(client, path, payload, as_user("admin-user"))
    assert allowed.status_code == 400, allowed.text
