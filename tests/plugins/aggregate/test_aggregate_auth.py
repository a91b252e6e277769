"""Aggregate watch under auth: the same per-stream read policy as watch.

Direct mode against the loopback auth-o-tron; nothing in the host is mocked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.conformance.auth_support import assert_auth_error, call, challenges, direct_deployment
from tests.support.fake_auth_o_tron import DIRECTORY
from tests.support.sse import Stream
from tests.support.tokens import basic

AGGREGATE = "/api/v1/aggregate"
READ_DENIED = "User does not have required read role for this stream"
REQUIRED = "Authentication is required for this stream"


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with direct_deployment() as deployment:
        yield deployment.client


def aggregate(client: httpx.Client, event_type: str, user: str | None) -> httpx.Response:
    headers = basic(user, DIRECTORY[user].password) if user else {}
    body = {"event_type": event_type, "identifier": {"name": "n1"}, "group_by": ["name"]}
    return call(client, AGGREGATE, body, headers)


def test_anonymous_is_refused_on_a_protected_stream_with_challenges(
    client: httpx.Client,
) -> None:
    response = aggregate(client, "protected_feed", None)
    assert_auth_error(response, 401, REQUIRED)
    assert challenges(response) == ["Bearer", "Basic"]


def test_a_reader_without_the_read_role_is_refused(client: httpx.Client) -> None:
    assert_auth_error(aggregate(client, "admin_read_feed", "reader-user"), 403, READ_DENIED)


def test_allowed_readers_get_the_snapshot(client: httpx.Client) -> None:
    assert aggregate(client, "admin_read_feed", "admin-user").status_code == 200
    assert aggregate(client, "public_feed", None).status_code == 200
    body = {"event_type": "protected_feed", "identifier": {"name": "n1"}, "group_by": ["name"]}
    headers = basic("reader-user", DIRECTORY["reader-user"].password)
    with client.stream("POST", AGGREGATE, content=json.dumps(body), headers=headers) as response:
        assert response.status_code == 200
        first = next(Stream(response).events())
    assert first.kind == "aggregate/snapshot"
    assert first.data["total"] == 0
