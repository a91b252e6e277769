"""The ECPDS plugin's pieces: body contract, outcome labels, merge, cache, single flight."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aviso_builtins.auth.ecpds import EcpdsAuthoriser
from aviso_builtins.auth.ecpds_cache import DestinationCache
from aviso_builtins.auth.ecpds_upstream import (
    LookupFailed,
    ServerAnswer,
    classify_status,
    destinations_of,
    list_url,
    merge,
)
from aviso_host.config.plugin_options import authoriser_options
from aviso_plugins.types import AuthError, Caller


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        (
            "https://gw.example/ecpds-api",
            "https://gw.example/ecpds-api/ecpds/v1/destination/list?id=alice",
        ),
        (
            "https://gw.example/ecpds-api/",
            "https://gw.example/ecpds-api/ecpds/v1/destination/list?id=alice",
        ),
    ],
)
def test_list_url(server: str, expected: str) -> None:
    assert list_url(server, "alice") == expected


def test_list_url_form_encodes_the_user() -> None:
    assert list_url("https://e", "u+s er&name=").endswith("?id=u%2Bs+er%26name%3D")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"success":"yes","destinationList":[{"name":"CIP","active":true,"type":32},'
            b'{"name":"OLD","active":false},{"id":"X","active":true},{"name":7,"active":true},'
            b'{"name":"S","active":"true"},"junk",{"name":"T"}],"extra":1}',
            frozenset({"CIP"}),
        ),
        (b'{"success":"yes","destinationList":[]}', frozenset()),
        (b'{"success":"YES","destinationList":[]}', None),
        (b'{"success":"no","destinationList":[{"name":"CIP","active":true}]}', None),
        (b'{"success":true,"destinationList":[]}', None),
        (b'{"success":"yes","destinationList":{}}', None),
        (b'{"success":"yes"}', None),
        (b"not json", None),
        (b"[]", None),
    ],
)
def test_body_contract(body: bytes, expected: frozenset[str] | None) -> None:
    assert destinations_of(body, "name") == expected


def test_target_field() -> None:
    body = b'{"success":"yes","destinationList":[{"name":"A","id":"B","active":true}]}'
    assert destinations_of(body, "id") == frozenset({"B"})


@pytest.mark.parametrize(
    ("status", "label"),
    [
        (401, "http_401"),
        (403, "http_403"),
        (404, "http_4xx"),
        (429, "http_4xx"),
        (500, "http_5xx"),
        (302, "http_5xx"),
    ],
)
def test_status_labels(status: int, label: str) -> None:
    assert classify_status(status) == label


def _answers(*outcomes: str) -> list[ServerAnswer]:
    return [
        ServerAnswer(outcome, frozenset({f"D{index}"}) if outcome == "success" else frozenset())
        for index, outcome in enumerate(outcomes)
    ]


def test_merge_strict() -> None:
    assert merge(_answers("success", "success"), False) == (frozenset({"D0", "D1"}), "success")
    with pytest.raises(LookupFailed) as failure:
        merge(_answers("success", "unreachable", "http_5xx"), False)
    assert failure.value.outcome == "http_5xx"


def test_merge_any_success() -> None:
    assert merge(_answers("success", "unreachable"), True) == (frozenset({"D0"}), "unreachable")
    with pytest.raises(LookupFailed) as failure:
        merge(_answers("invalid_response", "http_401", "http_403"), True)
    assert failure.value.outcome == "http_401"


@pytest.mark.parametrize(
    "labels",
    [
        ("http_4xx", "invalid_response"),
        ("invalid_response", "http_5xx"),
        ("http_5xx", "unreachable"),
        ("http_403", "http_4xx"),
    ],
)
def test_worst_failure_priority(labels: tuple[str, str]) -> None:
    with pytest.raises(LookupFailed) as failure:
        merge(_answers(labels[1], labels[0]), False)
    assert failure.value.outcome == labels[0]


# -- cache ----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_ttl_counts_from_insertion_and_reads_do_not_extend_it() -> None:
    async def scenario() -> list[str]:
        clock, calls = Clock(), []
        cache = DestinationCache(10, 100, clock)

        async def fetch(user: str) -> frozenset[str]:
            calls.append(user)
            return frozenset({"CIP"})

        await cache.get("u", fetch)
        clock.now = 9.9
        await cache.get("u", fetch)
        clock.now = 10.0
        await cache.get("u", fetch)
        return calls

    assert asyncio.run(scenario()) == ["u", "u"]


def test_capacity_evicts_the_least_recently_used() -> None:
    async def scenario() -> list[str]:
        calls: list[str] = []
        cache = DestinationCache(100, 2)

        async def fetch(user: str) -> frozenset[str]:
            calls.append(user)
            return frozenset()

        for user in ("a", "b", "a", "c", "a", "b"):
            await cache.get(user, fetch)
        assert len(cache) == 2
        return calls

    assert asyncio.run(scenario()) == ["a", "b", "c", "b"]


def test_single_flight_shares_success_and_failure_and_survives_cancellation() -> None:
    async def scenario() -> None:
        cache = DestinationCache(100, 100)
        calls: list[str] = []
        release = asyncio.Event()

        async def fetch(user: str) -> frozenset[str]:
            calls.append(user)
            await release.wait()
            if user == "bad":
                raise LookupFailed("http_5xx")
            return frozenset({"CIP"})

        good = [asyncio.ensure_future(cache.get("good", fetch)) for _ in range(50)]
        bad = [asyncio.ensure_future(cache.get("bad", fetch)) for _ in range(5)]
        await asyncio.sleep(0)
        good[0].cancel()  # the first waiter hangs up: the others still get the answer
        release.set()
        results = await asyncio.gather(*good[1:])
        assert results == [frozenset({"CIP"})] * 49
        for task in bad:
            with pytest.raises(LookupFailed):
                await task
        assert sorted(calls) == ["bad", "good"]
        release.clear()
        follow_up = asyncio.ensure_future(cache.get("bad", fetch))
        await asyncio.sleep(0)
        release.set()
        with pytest.raises(LookupFailed):
            await follow_up
        assert calls.count("bad") == 2, "failures are not cached"
        assert await cache.get("good", fetch) == frozenset({"CIP"})
        assert calls.count("good") == 1

    asyncio.run(scenario())


# -- the authoriser's own failure answers -------------------------------------------------


def _authoriser(**options: Any) -> EcpdsAuthoriser:
    section = {
        "username": "svc",
        "password": "pw",
        "servers": ["http://127.0.0.1:9"],
        "match_key": "destination",
        **options,
    }
    return EcpdsAuthoriser(authoriser_options(EcpdsAuthoriser, {"ecpds": section}))


def test_unexpected_failure_is_500_and_never_allows() -> None:
    async def scenario() -> AuthError:
        authoriser = _authoriser()
        await authoriser.start()

        async def broken(*args: Any) -> frozenset[str]:
            raise KeyError("bug")

        authoriser._fetch = broken  # type: ignore[method-assign]
        try:
            with pytest.raises(AuthError) as failure:
                await authoriser.authorise(Caller("u"), "e", {"destination": "CIP"})
            return failure.value
        finally:
            await authoriser.close()

    error = asyncio.run(scenario())
    assert (error.status, error.message) == (500, "ECPDS check failed unexpectedly")


def test_missing_match_key_and_missing_client() -> None:
    async def scenario() -> tuple[AuthError, AuthError]:
        authoriser = _authoriser()
        with pytest.raises(AuthError) as unstarted:
            await authoriser.authorise(Caller("u"), "e", {"destination": "CIP"})
        await authoriser.start()
        try:
            with pytest.raises(AuthError) as missing:
                await authoriser.authorise(Caller("u"), "e", {"class": "od"})
        finally:
            await authoriser.close()
        return unstarted.value, missing.value

    unstarted, missing = asyncio.run(scenario())
    assert (unstarted.status, unstarted.message) == (500, "Server configuration error")
    assert (missing.status, missing.message) == (
        403,
        "Required field 'destination' not found in request identifiers",
    )
