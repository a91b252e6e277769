"""pyaviso resuming from a point past the stream's end (a cursor kept across an in-memory
server's restart, whose stream numbers from 1 again): the server's ``history_gap`` is
tolerated, filtered or not, and the listener reads on as from any start beyond the end."""

from __future__ import annotations

import pyaviso
import pytest

from tests.client.support import publish
from tests.support.server import RunningServer

FAR = 10**9
"""A resume point beyond anything the suite's streams reach."""


@pytest.mark.parametrize("mode", ["replay_only", "watch"])
def test_a_listener_resuming_beyond_the_end_tolerates_the_gap(
    feed_server: RunningServer, name: str, mode: str
) -> None:
    publish(feed_server.url, name, 1)
    with pyaviso.AvisoClient(base_url=feed_server.url, auth=pyaviso.Anonymous()) as client:
        listened = client.listen("feed", filter={"name": name}, start_from=FAR, mode=mode)
        if mode == "replay_only":
            assert list(listened) == []
            return
        with listened as live:
            publish(feed_server.url, name, 1, start=1)
            assert next(live).payload == {"n": 1}
