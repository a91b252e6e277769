"""The suite's own premise: a fresh server passes :func:`assert_still_serving`."""

from __future__ import annotations

import httpx

from tests.hostile.support import assert_still_serving


def test_a_fresh_server_is_serving(hostile: httpx.Client) -> None:
    assert_still_serving(hostile)
