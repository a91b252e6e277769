"""Hostile cursors: ids beyond u64 and dates that leave the representable range
once their offset is applied are refused with 400, never a 500, on every stream endpoint."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.hostile.support import assert_client_error, assert_still_serving

BEYOND_U64 = "999999999999999999999999"
# Longer than Python's int() accepts from text (4300 digits): its own error must not leak.
HUGE_NUMBER = "9" * 5000
OUT_OF_RANGE_DATES = [
    "0001-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59-23:59",
    "2026-01-01T00:00:00+99:99",
    HUGE_NUMBER,
]
ENDPOINTS = {
    "/api/v1/watch": "INVALID_WATCH_REQUEST",
    "/api/v1/replay": "INVALID_REPLAY_REQUEST",
    "/api/v1/aggregate": "INVALID_AGGREGATE_REQUEST",
}


def _body(path: str, **cursor: str) -> dict[str, Any]:
    body: dict[str, Any] = {"event_type": "river_gauge", "identifier": {"basin": "rhine"}}
    if path.endswith("aggregate"):
        body["group_by"] = ["level"]
    return {**body, **cursor}


def _refused(hostile: httpx.Client, path: str, body: dict[str, Any], prefix: str) -> None:
    answer = hostile.post(path, json=body)
    assert_client_error(answer, 400, ENDPOINTS[path])
    assert answer.json()["message"].startswith(prefix), answer.json()["message"]
    assert_still_serving(hostile)


@pytest.mark.parametrize("path", list(ENDPOINTS))
@pytest.mark.parametrize("value", [BEYOND_U64, HUGE_NUMBER], ids=["beyond-u64", "5000-digits"])
def test_from_id_out_of_range(hostile: httpx.Client, path: str, value: str) -> None:
    _refused(hostile, path, _body(path, from_id=value), "from_id must be a valid positive integer")


@pytest.mark.parametrize("value", [BEYOND_U64, HUGE_NUMBER], ids=["beyond-u64", "5000-digits"])
def test_to_id_out_of_range(hostile: httpx.Client, value: str) -> None:
    path = "/api/v1/replay"
    body = _body(path, from_id="1", to_id=value)
    _refused(hostile, path, body, "to_id must be a valid positive integer")


@pytest.mark.parametrize("path", list(ENDPOINTS))
@pytest.mark.parametrize("value", OUT_OF_RANGE_DATES)
def test_from_date_out_of_range(hostile: httpx.Client, path: str, value: str) -> None:
    body = _body(path, from_date=value)
    _refused(hostile, path, body, "from_date must be a valid datetime/timestamp")


@pytest.mark.parametrize("value", OUT_OF_RANGE_DATES)
def test_to_date_out_of_range(hostile: httpx.Client, value: str) -> None:
    path = "/api/v1/replay"
    body = _body(path, from_id="1", to_date=value)
    _refused(hostile, path, body, "to_date must be a valid datetime/timestamp")
