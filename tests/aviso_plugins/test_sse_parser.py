"""The incremental SSE parser (testing kit, Spark reader, load tests): the same events
whatever the chunking."""

from __future__ import annotations

import random

import pytest

from aviso_host.streaming import frames
from aviso_plugins._shared.sse import SSEEvent, SSEParser


def parse(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    assert not parser.pending, "bytes of a complete stream were held back"
    return events


# Aviso's own frames (LF only), then the other line endings and fields SSE allows.
AVISO = b"".join(
    [
        frames.connection_established("mars.od.*", 3600, "req-1"),
        frames.frame(frames.LIVE, '{"data":{"payload":{"city":"Zürich","sent_at":1.5}}}'.encode()),
        frames.heartbeat("mars.od.*"),
        frames.connection_closing("mars.od.*", "end_of_stream", "req-1"),
    ]
)
MIXED = (
    b"\xef\xbb\xbf: a comment\r\n"
    b"event: replay\r\ndata: first line\r\ndata: second \xe2\x82\xac\r\nid: 7\r\n\r\n"
    b"retry: 1500\rdata:no space\r\r"
    b"event: only-a-name\n\n"
    b"data\ndata: \n\n"
    b"unknown: field\nevent: last\ndata: {}\n\n"
)
MIXED_EVENTS = [
    SSEEvent("replay", "first line\nsecond €", "7"),
    SSEEvent("message", "no space", "7"),
    SSEEvent("message", "\n", "7"),
    SSEEvent("last", "{}", "7"),
]


def test_whole_aviso_stream() -> None:
    events = parse([AVISO])
    assert [e.event for e in events] == [
        "live-notification",
        "live-notification",
        "heartbeat",
        "connection-closing",
    ]
    assert '"city":"Zürich"' in events[1].data
    assert '"end_of_stream"' in events[3].data


def test_whole_mixed_stream() -> None:
    parser = SSEParser()
    assert parser.feed(MIXED) == MIXED_EVENTS
    assert parser.retry == 1500


@pytest.mark.parametrize("stream", [AVISO, MIXED], ids=["aviso", "line-endings-and-fields"])
def test_split_at_every_byte_position(stream: bytes) -> None:
    expected = parse([stream])
    for cut in range(len(stream) + 1):
        assert parse([stream[:cut], stream[cut:]]) == expected, f"split at byte {cut}"


@pytest.mark.parametrize("stream", [AVISO, MIXED], ids=["aviso", "line-endings-and-fields"])
def test_every_pair_of_split_positions(stream: bytes) -> None:
    expected = parse([stream])
    size = len(stream)
    step = max(1, size // 60)  # a grid of pairs keeps this quick; single splits are exhaustive
    for first in range(0, size + 1, step):
        for second in range(first, size + 1, step):
            chunks = [stream[:first], stream[first:second], stream[second:]]
            assert parse(chunks) == expected, f"split at {first} and {second}"


@pytest.mark.parametrize("stream", [AVISO, MIXED], ids=["aviso", "line-endings-and-fields"])
def test_one_byte_at_a_time_and_random_chunks(stream: bytes) -> None:
    expected = parse([stream])
    assert parse([stream[i : i + 1] for i in range(len(stream))]) == expected
    rng = random.Random(6)
    for _ in range(200):
        cuts = sorted(rng.sample(range(len(stream) + 1), rng.randint(1, 12)))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert parse(chunks) == expected


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\n\r") == [SSEEvent("message", "a")]
    assert parser.feed(b"\ndata: b\r\n\r\n") == [SSEEvent("message", "b")]


def test_event_without_data_is_not_dispatched_and_name_resets() -> None:
    parser = SSEParser()
    assert parser.feed(b"event: ping\n\ndata: x\n\n") == [SSEEvent("message", "x")]


def test_incomplete_event_is_held_back() -> None:
    parser = SSEParser()
    assert parser.feed(b"event: replay\ndata: {}\n") == []
    assert parser.pending
    assert parser.feed(b"\n") == [SSEEvent("replay", "{}")]
    assert parser.bytes_seen == len(b"event: replay\ndata: {}\n\n")
