"""Auth conformance: the ECPDS destination plugin.

aviso runs in direct mode against the loopback auth-o-tron and one or
two loopback ECPDS servers that count every list request per user. Fresh user names
(``ecpds-user-<suffix>``, never cached yet) are authenticated with minted bearer tokens,
which the fake auth-o-tron echoes.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest

from aviso_host.app import create_app
from aviso_host.config import settings_from_document
from aviso_host.plugins import discover
from tests.conformance.auth_support import (
    NOTIFY,
    READS,
    REPLAY,
    WATCH,
    assert_auth_error,
    body,
    call,
    deploy,
    document,
    read_body,
)
from tests.support.fake_auth_o_tron import FakeAuthOTron, fake_auth_o_tron
from tests.support.fake_ecpds import TABLE_B, FakeEcpds, fake_ecpds
from tests.support.server import running_server, serve_app
from tests.support.tokens import basic, bearer, mint

UNAVAILABLE = "ECPDS service is inaccessible"
EVENT = "dissemination_ecpds"
SINGLE_FLIGHT_MS = 3000
"""How long a fake holds its answer in the single-flight tests: every concurrent request must
reach the lookup in flight within it, on a loaded machine too (300 ms was eaten at a load
average of ~45 on two cores)."""
_fresh = itertools.count(1)


def fresh(stem: str = "ecpds-user") -> str:
    """A user name the aviso cache has never seen, matched by the ``<stem>*`` table rows."""
    return f"{stem}-t{next(_fresh)}-{time.monotonic_ns()}"


def token_for(user: str, roles: tuple[str, ...] = ("reader",)) -> dict[str, str]:
    return bearer(mint(user, "localrealm", list(roles)))


def watch(
    client: httpx.Client, headers: dict[str, str], destination: str, path: str = WATCH
) -> httpx.Response:
    return call(client, path, read_body(EVENT, path, {"destination": destination}), headers)


def denied(user: str, destination: str) -> str:
    return f"User '{user}' does not have access to destination '{destination}'"


@dataclass
class Setup:
    aot: FakeAuthOTron
    servers: list[FakeEcpds]
    client: httpx.Client


@contextmanager
def deployment(servers: list[FakeEcpds], policy: str = "strict", **ecpds: Any) -> Iterator[Setup]:
    with fake_auth_o_tron() as aot:
        doc = document("direct", aot.url, [fake.url for fake in servers], policy)
        doc["ecpds"].update(ecpds)
        # These tests are about ECPDS: a hundred concurrent token checks must not time out
        # at auth-o-tron on a busy machine and turn an ECPDS answer into a 503.
        doc["auth"]["timeout_ms"] = 10_000
        with deploy(doc, aot) as deployed:
            yield Setup(aot, servers, deployed.client)


@pytest.fixture(scope="module")
def single() -> Iterator[Setup]:
    """Server A only, strict."""
    with fake_ecpds() as a, deployment([a]) as setup:
        yield setup


@pytest.fixture
def one(single: Setup) -> Iterator[Setup]:
    a = single.servers[0]
    yield single
    a.mode, a.delay_ms = "normal", 0


@pytest.fixture(scope="module")
def union_strict() -> Iterator[Setup]:
    with fake_ecpds() as a, fake_ecpds(table=TABLE_B) as b, deployment([a, b]) as setup:
        yield setup


@pytest.fixture
def two(union_strict: Setup) -> Iterator[Setup]:
    yield union_strict
    for fake in union_strict.servers:
        fake.mode, fake.delay_ms = "normal", 0


# -- the upstream request ---------------------------------------------------------------


def test_upstream_request_and_encoding(one: Setup) -> None:
    a = one.servers[0]
    user = "u+s er&name"
    response = watch(one.client, token_for(user), "CIP")
    assert response.status_code == 200, response.text
    assert a.count(user) == 1, "the fake decoded the id back to the exact user name"
    assert "id=u%2Bs+er%26name" in a.queries
    # The service credentials were accepted: a wrong password would have been a 503.
    assert httpx.get(f"{a.url}/_count", params={"id": user}).json() == {"count": 1}


def test_server_base_with_trailing_slashes() -> None:
    with fake_ecpds() as a:
        with fake_auth_o_tron() as aot:
            doc = document("direct", aot.url, [a.url + "//"])
            with running_server(doc) as server, httpx.Client(base_url=server.url) as client:
                assert watch(client, token_for("ecpds-user"), "CIP").status_code == 200
        assert a.count("ecpds-user") == 1
        assert a.queries == ["id=ecpds-user"]


def test_wrong_service_credentials_are_503() -> None:
    with fake_ecpds() as a, deployment([a], password="not-the-password") as setup:
        assert_auth_error(watch(setup.client, token_for("ecpds-user"), "CIP"), 503, UNAVAILABLE)


# -- decisions -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", READS)
def test_destination_membership(one: Setup, path: str) -> None:
    user = basic("ecpds-user", "ecpds-pass")
    assert watch(one.client, user, "CIP", path).status_code == 200
    assert watch(one.client, user, "FOO", path).status_code == 200
    for destination in ("OLDFEED", "NONAME", "cip", "*"):
        response = watch(one.client, user, destination, path)
        assert_auth_error(response, 403, denied("ecpds-user", destination))


@pytest.mark.parametrize("path", READS)
def test_empty_list_denies_everything(one: Setup, path: str) -> None:
    user = basic("ecpds-noaccess", "ecpds-pass")
    for destination in ("CIP", "ANY"):
        assert_auth_error(
            watch(one.client, user, destination, path), 403, denied("ecpds-noaccess", destination)
        )


@pytest.mark.parametrize("user", ["ecpds-success-no", "ecpds-badshape", "ecpds-unavailable"])
def test_contract_breaking_answers_are_503(one: Setup, user: str) -> None:
    assert_auth_error(watch(one.client, token_for(user), "CIP"), 503, UNAVAILABLE)


@pytest.mark.parametrize("mode", ["down", "forbidden", "throttled", "garbage"])
def test_failure_modes_are_503(one: Setup, mode: str) -> None:
    one.servers[0].mode = mode
    assert_auth_error(watch(one.client, token_for(fresh()), "CIP"), 503, UNAVAILABLE)


# -- cache and single flight -------------------------------------------------------------


def test_sequential_requests_hit_the_cache(one: Setup) -> None:
    user = fresh()
    for path in (WATCH, WATCH, REPLAY):
        assert watch(one.client, token_for(user), "CIP", path).status_code == 200
    assert_auth_error(watch(one.client, token_for(user), "OLDFEED"), 403)  # denials too
    assert one.servers[0].count(user) == 1


def _concurrent(setup: Setup, user: str, count: int) -> list[int]:
    headers = token_for(user)
    with ThreadPoolExecutor(max_workers=count) as pool:
        futures = [pool.submit(watch, setup.client, headers, "CIP") for _ in range(count)]
        return [future.result().status_code for future in futures]


def test_ten_concurrent_misses_share_one_fetch(one: Setup) -> None:
    one.servers[0].delay_ms = SINGLE_FLIGHT_MS
    user = fresh()
    assert _concurrent(one, user, 10) == [200] * 10
    assert one.servers[0].count(user) == 1


def test_single_flight_100_concurrent_watches_one_call_per_server(two: Setup) -> None:
    """Acceptance: 100 concurrent watches for one uncached user, two servers."""
    for fake in two.servers:
        fake.delay_ms = SINGLE_FLIGHT_MS
    user = fresh()
    assert _concurrent(two, user, 100) == [200] * 100
    assert [fake.count(user) for fake in two.servers] == [1, 1]


def test_single_flight_shares_failures_too(one: Setup) -> None:
    a = one.servers[0]
    a.mode, a.delay_ms = "down", SINGLE_FLIGHT_MS
    user = fresh()
    assert _concurrent(one, user, 10) == [503] * 10
    assert a.count(user) == 1


def test_errors_are_not_cached(one: Setup) -> None:
    a = one.servers[0]
    user = fresh()
    a.mode = "down"
    assert_auth_error(watch(one.client, token_for(user), "CIP"), 503, UNAVAILABLE)
    assert a.count(user) == 1
    a.mode = "normal"
    assert watch(one.client, token_for(user), "CIP").status_code == 200
    assert watch(one.client, token_for(user), "CIP").status_code == 200
    assert a.count(user) == 2


def test_cache_entries_expire_after_the_ttl() -> None:
    # Long enough for two requests on a loaded machine to fall inside it.
    ttl = 5
    with fake_ecpds() as a, deployment([a], cache_ttl_seconds=ttl) as setup:
        user = fresh()
        assert watch(setup.client, token_for(user), "CIP").status_code == 200
        assert watch(setup.client, token_for(user), "CIP").status_code == 200
        assert a.count(user) == 1
        time.sleep(ttl + 0.2)
        assert watch(setup.client, token_for(user), "CIP").status_code == 200
        assert a.count(user) == 2


def test_cache_holds_at_most_max_entries() -> None:
    with fake_ecpds() as a, deployment([a], max_entries=1) as setup:
        first, second = fresh(), fresh()
        for user in (first, second, first):
            assert watch(setup.client, token_for(user), "CIP").status_code == 200
        assert (a.count(first), a.count(second)) == (2, 1)


def test_request_timeout_bounds_a_hanging_server() -> None:
    # A 30 s hang against a 1 s timeout: the answer comes well before the hang ends, with
    # room for a loaded machine.
    with fake_ecpds(delay_ms=30_000) as a, deployment([a], request_timeout_seconds=1) as setup:
        started = time.monotonic()
        assert_auth_error(watch(setup.client, token_for(fresh()), "CIP"), 503, UNAVAILABLE)
        assert time.monotonic() - started < 15.0


# -- several servers -----------------------------------------------------------------------


def test_union_under_strict(two: Setup) -> None:
    user = token_for(fresh())
    for destination in ("CIP", "FOO", "BAR"):
        assert watch(two.client, user, destination).status_code == 200, destination


def test_strict_fails_when_one_server_is_down(two: Setup) -> None:
    two.servers[1].mode = "down"
    assert_auth_error(watch(two.client, token_for(fresh()), "CIP"), 503, UNAVAILABLE)


def test_any_success_tolerates_a_down_server(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="aviso.ecpds")
    with (
        fake_ecpds() as a,
        fake_ecpds("down", table=TABLE_B) as b,
        deployment([a, b], policy="any_success") as setup,
    ):
        user = fresh()
        assert watch(setup.client, token_for(user), "CIP").status_code == 200
        assert_auth_error(watch(setup.client, token_for(user), "BAR"), 403, denied(user, "BAR"))
        assert (a.count(user), b.count(user)) == (1, 1)
        # The fetch outcome (what aviso_ecpds_fetch_total will count) is the worst failure.
        assert f"ECPDS lookup for {user!r}: http_5xx" in caplog.text
        a.mode = "down"
        assert_auth_error(watch(setup.client, token_for(fresh()), "CIP"), 503, UNAVAILABLE)


# -- when ECPDS is not asked ----------------------------------------------------------------


@pytest.mark.parametrize("path", READS)
def test_admin_bypass(one: Setup, path: str) -> None:
    a = one.servers[0]
    a.mode = "down"  # would be a 503 if asked
    before = a.total()
    response = watch(one.client, basic("admin-user", "admin-pass"), "ANYTHING", path)
    assert response.status_code == 200, response.text
    assert a.total() == before


@pytest.mark.parametrize(
    ("event_type", "user"),
    [
        (EVENT, ("admin-user", "admin-pass")),
        ("dissemination_ecpds_writable", ("admin-user", "admin-pass")),
        ("dissemination_ecpds_writable", ("producer-user", "producer-pass")),
    ],
)
def test_notify_never_consults_ecpds(one: Setup, event_type: str, user: tuple[str, str]) -> None:
    a = one.servers[0]
    a.mode = "down"
    before = a.total()
    response = call(
        one.client, NOTIFY, body(event_type, {"destination": "ANY", "class": "od"}), basic(*user)
    )
    assert response.status_code == 200, response.text
    assert a.total() == before


def test_plugin_stream_writes_stay_admin_only(one: Setup) -> None:
    reader = basic("ecpds-user", "ecpds-pass")
    response = call(one.client, NOTIFY, body(EVENT, {"destination": "CIP"}), reader)
    assert_auth_error(response, 403, "Only administrators can write to this stream")


@pytest.mark.parametrize("path", READS)
def test_policy_and_validation_come_before_ecpds(one: Setup, path: str) -> None:
    a = one.servers[0]
    before = a.total()
    anonymous = call(one.client, path, read_body(EVENT, path, {"destination": "CIP"}))
    assert_auth_error(anonymous, 401, "Authentication is required for this stream")
    missing = call(one.client, path, read_body(EVENT, path, {"class": "od"}), token_for(fresh()))
    assert missing.status_code == 400, missing.text
    assert "destination" in missing.json()["message"]
    assert a.total() == before


# -- bodies -------------------------------------------------------------------------------


def test_response_bodies(one: Setup) -> None:
    unavailable = watch(one.client, token_for("ecpds-unavailable"), "CIP")
    document_ = json.loads(unavailable.text)
    assert document_ == {
        "code": "SERVICE_UNAVAILABLE",
        "error": "service_unavailable",
        "message": UNAVAILABLE,
        "request_id": unavailable.headers["x-request-id"],
    }
    assert list(document_) == ["code", "error", "message", "request_id"]
    assert "exploded" not in unavailable.text
    forbidden = watch(one.client, token_for("ecpds-noaccess"), "CIP")
    assert json.loads(forbidden.text) == {
        "code": "FORBIDDEN",
        "error": "forbidden",
        "message": denied("ecpds-noaccess", "CIP"),
        "request_id": forbidden.headers["x-request-id"],
    }


def test_missing_authoriser_at_runtime_is_a_500() -> None:
    """Settings validated with the plugin, served without it: fail closed."""
    with fake_ecpds() as a, fake_auth_o_tron() as aot:
        registry = discover()
        settings = settings_from_document(document("direct", aot.url, [a.url]), registry)
        app = create_app(settings, replace(registry, authorisers={}))
        with (
            serve_app(app, app.state.service) as server,
            httpx.Client(base_url=server.url) as client,
        ):
            response = watch(client, token_for("ecpds-user"), "CIP")
            assert_auth_error(response, 500, "Server configuration error")
            admin = watch(client, basic("admin-user", "admin-pass"), "CIP")
            assert admin.status_code == 200, "admins never reach the authorisers"
