"""Re-authorisation of long streams: token expiry and ECPDS rechecks.

Real uvicorn servers on 127.0.0.1 with the loopback auth-o-tron and ECPDS fakes; tokens are
minted with a short ``exp``. Every wait is for an SSE event, bounded by a timeout; with a
one-second heartbeat the stream itself is the clock.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import httpx
import pytest

from aviso_host.config import ConfigError, settings_from_document
from aviso_host.plugins import discover
from aviso_host.streaming.control import StreamControl
from tests.conformance.auth_support import REPLAY, WATCH, body, document, read_body
from tests.conformance.helpers import LiveStream, open_stream, request_id_header
from tests.support.fake_auth_o_tron import fake_auth_o_tron
from tests.support.fake_ecpds import FakeEcpds, fake_ecpds
from tests.support.server import RunningServer, running_server
from tests.support.tokens import bearer, claims_for, mint, sign

AGGREGATE = "/api/v1/aggregate"
CLOSE_TIMEOUT = 45.0
"""Bound on waiting for a closing frame; tokens expire and rechecks fall due within seconds."""
ADMISSION_MARGIN = 10
"""Seconds from minting a short-lived token to its expiry: room for a loaded machine to
admit the stream first."""
WATCH_SETTINGS = {"sse_heartbeat_interval_sec": 1}
ECPDS_STREAM = "dissemination_ecpds"
_users = itertools.count(1)


def _document(mode: str, auth_o_tron_url: str = "", **watch: int) -> dict[str, Any]:
    doc = document(mode, auth_o_tron_url)
    doc["watch_endpoint"] = {**WATCH_SETTINGS, **watch}
    return doc


def _closing(stream: LiveStream) -> dict[str, Any]:
    """Read to the closing frame and the end of the body; return the frame's data."""
    closing = stream.until_kind("connection-closing", CLOSE_TIMEOUT)
    assert stream.next() is None, "the body must end after connection-closing"
    return closing.data


def _assert_auth_expired(stream: LiveStream, exp: int) -> None:
    closing = _closing(stream)
    # Not closed before the expiry: the frame was written before it was read here. (Its own
    # whole-second timestamp comes from a coarser clock that may lag ``time.time()``.)
    assert time.time() >= exp
    # end_of_stream on the wire, so that clients reconnect (and refresh the token on the 401).
    assert closing["reason"] == "end_of_stream", closing
    assert closing["cause"] == "auth_expired", closing
    assert closing["message"] == "Authentication expired"
    assert closing["request_id"] == request_id_header(stream.response)
    assert closing["topic"] == "protected.n1"
    assert set(closing) == {"cause", "message", "reason", "request_id", "timestamp", "topic"}
    assert {event.kind for event in stream.events[:-1]} <= {
        "live-notification/connection_established",
        "heartbeat",
    }


def _use_expiring_token(client: httpx.Client, user: str) -> int:
    """Have ``client`` send a token expiring in :data:`ADMISSION_MARGIN` seconds; its ``exp``.

    Minted once the servers run: a token that had already expired when its stream was
    admitted would be inside the skew leeway, and its stream would last until the leeway's
    end instead."""
    claims = claims_for(user, "localrealm", ["reader"], exp_offset=ADMISSION_MARGIN)
    client.headers.update(bearer(sign({"alg": "HS256", "typ": "JWT"}, claims)))
    return int(claims["exp"])


# -- token expiry -----------------------------------------------------------------------


def test_trusted_proxy_watch_closes_at_token_expiry() -> None:
    with (
        running_server(_document("trusted_proxy")) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        exp = _use_expiring_token(client, "reader-user")
        with open_stream(client, WATCH, body("protected_feed")) as stream:
            _assert_auth_expired(stream, exp)


def test_direct_mode_watch_closes_at_expiry_of_the_token_auth_o_tron_returned() -> None:
    with (
        fake_auth_o_tron() as aot,
        running_server(_document("direct", aot.url)) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        exp = _use_expiring_token(client, "reader-user")
        with open_stream(client, WATCH, body("protected_feed")) as stream:
            _assert_auth_expired(stream, exp)
        assert len(aot.requests()) == 1


def test_an_aggregate_stream_closes_at_token_expiry() -> None:
    request = body("protected_feed", group_by=["name"])
    with (
        running_server(_document("trusted_proxy")) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        exp = _use_expiring_token(client, "reader-user")
        with open_stream(client, AGGREGATE, request) as stream:
            closing = _closing(stream)
    assert time.time() >= exp
    assert closing["cause"] == "auth_expired", closing
    assert stream.events[0].kind == "aggregate/snapshot"


def test_a_stream_opened_with_a_token_inside_the_skew_leeway_lasts_until_the_leeway_ends() -> None:
    # Expired 45 s ago: inside the 60 s leeway, so admitted. Closing it at once would
    # have its client reconnect at once with the same token, in a loop; it closes when the
    # leeway ends instead, and the reconnect then meets the 401 that makes clients refresh.
    # Minted once the servers run, with 15 s for the watch to be admitted: a loaded machine
    # must not push its admission past the leeway.
    with (
        fake_auth_o_tron() as aot,
        running_server(_document("direct", aot.url)) as server,
        httpx.Client(base_url=server.url) as client,
    ):
        token = mint("reader-user", "localrealm", ["reader"], exp_offset=-45)
        client.headers.update(bearer(token))
        with open_stream(client, WATCH, body("protected_feed")) as stream:
            closing = _closing(stream)
        again = client.post(WATCH, json=body("protected_feed"))
    assert closing["reason"] == "end_of_stream"
    assert closing["cause"] == "auth_expired"
    assert again.status_code == 401, again.text
    assert again.headers["www-authenticate"]


def test_anonymous_and_long_lived_callers_keep_the_existing_reasons() -> None:
    long_lived = bearer(mint("reader-user", "localrealm", ["reader"]))
    doc = _document("trusted_proxy", connection_max_duration_sec=2)
    with running_server(doc) as server, httpx.Client(base_url=server.url) as client:
        for headers in ({}, long_lived):
            client.headers.clear()
            client.headers.update(headers)
            with open_stream(client, WATCH, body("public_feed")) as stream:
                assert _closing(stream)["reason"] == "max_duration_reached"
        client.headers.update(long_lived)
        with open_stream(client, REPLAY, read_body("protected_feed", REPLAY)) as stream:
            assert _closing(stream)["reason"] == "end_of_stream"


def test_a_far_future_exp_never_expires() -> None:
    # Beyond float range: the token is valid and its stream simply has no expiry.
    token = sign({"alg": "HS256", "typ": "JWT"}, claims_for("reader-user", exp=10**400))
    with (
        running_server(_document("trusted_proxy")) as server,
        httpx.Client(base_url=server.url, headers=bearer(token)) as client,
        open_stream(client, REPLAY, read_body("protected_feed", REPLAY)) as stream,
    ):
        assert _closing(stream)["reason"] == "end_of_stream"


def test_auth_reasons_rank_between_max_duration_and_shutdown() -> None:
    control = StreamControl("r")
    for reason in ("end_of_stream", "max_duration_reached", "auth_expired"):
        control.stop(reason)
    assert control.stop_reason == "auth_expired"
    control.stop("access_revoked")
    assert control.stop_reason == "access_revoked"
    control.stop("max_duration_reached")
    assert control.stop_reason == "access_revoked"
    control.stop("server_shutdown")
    assert control.stop_reason == "server_shutdown"


# -- ECPDS rechecks ---------------------------------------------------------------------

ENTITLED = (200, {"success": "yes", "destinationList": [{"name": "CIP", "active": True}]})
REVOKED = (200, {"success": "yes", "destinationList": [{"name": "FOO", "active": True}]})


def _ecpds_server(fake: FakeEcpds, recheck_seconds: int) -> AbstractContextManager[RunningServer]:
    doc = document("trusted_proxy", "", [fake.url])
    doc["ecpds"]["recheck_seconds"] = recheck_seconds
    doc["watch_endpoint"] = dict(WATCH_SETTINGS)
    return running_server(doc)


@pytest.fixture(scope="module")
def rechecking() -> Iterator[tuple[FakeEcpds, str]]:
    """ECPDS rechecked every second."""
    with fake_ecpds() as fake, _ecpds_server(fake, 1) as server:
        yield fake, server.url


@pytest.fixture
def ecpds(rechecking: tuple[FakeEcpds, str]) -> Iterator[tuple[FakeEcpds, str]]:
    yield rechecking
    rechecking[0].mode = "normal"


def _entitled_user(fake: FakeEcpds) -> str:
    user = f"revocable-{next(_users)}-{time.monotonic_ns()}"
    fake.set_answer(user, ENTITLED)
    return user


@contextmanager
def _ecpds_watch(url: str, user: str, roles: tuple[str, ...] = ("reader",)) -> Iterator[LiveStream]:
    """``user`` watching destination CIP, past the opening event."""
    token = bearer(mint(user, "localrealm", list(roles)))
    request = body(ECPDS_STREAM, {"destination": "CIP"})
    with (
        httpx.Client(base_url=url, headers=token) as client,
        open_stream(client, WATCH, request) as stream,
    ):
        stream.until_kind("live-notification/connection_established")
        yield stream


def test_a_destination_revoked_at_ecpds_ends_the_stream(ecpds: tuple[FakeEcpds, str]) -> None:
    fake, url = ecpds
    user = _entitled_user(fake)
    with _ecpds_watch(url, user) as stream:
        fake.set_answer(user, REVOKED)
        closing = _closing(stream)
    assert closing["reason"] == "end_of_stream", closing
    assert closing["cause"] == "access_revoked", closing
    assert closing["message"] == "Access to this stream was revoked"
    assert closing["request_id"] == request_id_header(stream.response)
    assert closing["topic"] == "diss_ecpds.CIP.*"


def test_ecpds_unreachable_at_recheck_keeps_the_stream_open(ecpds: tuple[FakeEcpds, str]) -> None:
    fake, url = ecpds
    user = _entitled_user(fake)
    with _ecpds_watch(url, user) as stream:
        admitted = fake.count(user)
        fake.mode = "down"
        # Two failed rechecks reached the fake, and the stream is still only heartbeating.
        stream.until(
            lambda event: event.kind != "heartbeat" or fake.count(user) >= admitted + 2,
            CLOSE_TIMEOUT,
        )
        assert stream.events[-1].kind == "heartbeat"
        fake.mode = "normal"
        fake.set_answer(user, REVOKED)
        assert _closing(stream)["cause"] == "access_revoked"


def test_admins_are_not_rechecked(ecpds: tuple[FakeEcpds, str]) -> None:
    fake, url = ecpds
    with _ecpds_watch(url, "admin-user", ("admin",)) as stream:
        for _ in range(3):
            stream.until_kind("heartbeat")
    assert fake.count("admin-user") == 0


def test_recheck_seconds_zero_disables_rechecks() -> None:
    with fake_ecpds() as fake, _ecpds_server(fake, 0) as server:
        user = _entitled_user(fake)
        with _ecpds_watch(server.url, user) as stream:
            fake.set_answer(user, REVOKED)
            for _ in range(3):
                stream.until_kind("heartbeat")
        assert fake.count(user) == 1


def test_recheck_seconds_is_optional_and_must_not_be_negative() -> None:
    registry = discover()
    doc = document("trusted_proxy", "", ["http://127.0.0.1:9"])
    settings = settings_from_document(doc, registry)
    assert settings.authorisers["ecpds"]["recheck_seconds"] == 60
    doc["ecpds"]["recheck_seconds"] = -1
    with pytest.raises(ConfigError, match="recheck_seconds"):
        settings_from_document(doc, registry)
