"""The API example schema with auth enabled.

Direct mode; auth-o-tron is a closed port, which these tests must never need.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conformance.helpers import NOTIFY, assert_error, request_id_header
from tests.support.configs import API_EXAMPLE
from tests.support.process import free_port
from tests.support.server import running_server


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    document = copy.deepcopy(API_EXAMPLE)
    document["auth"] = {
        "enabled": True,
        "mode": "direct",
        "auth_o_tron_url": f"http://127.0.0.1:{free_port()}",
        "jwt_secret": "api-items-secret",
        "admin_roles": {"ops": ["admin"]},
    }
    document["notification_schema"]["river_gauge"]["auth"] = {"required": True}
    with running_server(document) as server, httpx.Client(base_url=server.url) as http:
        yield http


def test_schema_ignores_a_garbage_authorization_header(client: httpx.Client) -> None:
    for path in ("/api/v1/schema", "/api/v1/schema/river_gauge"):
        response = client.get(path, headers={"Authorization": "Garbage x"})
        assert response.status_code == 200, response.text
        assert '"auth"' not in response.text


def test_admin_without_credentials(client: httpx.Client) -> None:
    response = client.delete("/api/v1/admin/wipe/all")
    assert response.status_code == 401
    body = json.loads(response.text)
    assert list(body) == ["code", "error", "message", "request_id"]
    assert body["code"] == "UNAUTHORIZED"
    assert body["message"] == "Authorization header is required"
    assert body["request_id"] == request_id_header(response)
    assert response.headers.get_list("www-authenticate") == ["Bearer", "Basic"]


def test_stream_auth_after_parsing(client: httpx.Client) -> None:
    notification = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}}
    response = client.post(NOTIFY, content=json.dumps(notification))
    assert_error(
        response,
        401,
        "UNAUTHORIZED",
        error="unauthorized",
        message="Authentication is required for this stream",
        keys={"code", "error", "message", "request_id"},
    )
    invalid = client.post(NOTIFY, content=b'{"event_type": "river_gauge", ')
    assert_error(invalid, 400, "INVALID_JSON", message_prefix="JSON parsing failed: ")
