"""Sequence ranges and the streaming source's gap check, without Spark or a server."""

from __future__ import annotations

import itertools

import pytest

from aviso_spark.partitioning import SequenceRange, split
from aviso_spark.replay import ReplayRequest
from aviso_spark.stream_source import GapCheck, HistoryGap, StreamOptions

REQUEST = ReplayRequest("http://127.0.0.1:1", "events", {})


@pytest.mark.parametrize(
    ("first", "last", "count"), [(1, 100, 4), (5, 7, 4), (10, 10, 3), (1, 1_000_003, 7)]
)
def test_ranges_are_adjacent_and_cover_every_sequence_once(
    first: int, last: int, count: int
) -> None:
    ranges = split(first, last, count)
    assert len(ranges) == min(count, last - first + 1)
    assert ranges[0].first == first and ranges[-1].last == last
    for before, after in itertools.pairwise(ranges):
        assert after.first == before.last + 1
    widths = [part.last - part.first + 1 for part in ranges]
    assert max(widths) - min(widths) <= 1


def test_an_empty_span_has_no_ranges() -> None:
    assert split(8, 7, 4) == []


def test_an_unfiltered_range_must_deliver_every_sequence() -> None:
    whole = GapCheck(REQUEST, SequenceRange(0, 5, 8), unfiltered=True)
    for sequence in (5, 6, 7, 8):
        whole.delivered(sequence)
    whole.finished()

    jump = GapCheck(REQUEST, SequenceRange(0, 5, 8), unfiltered=True)
    jump.delivered(5)
    with pytest.raises(HistoryGap, match=r"expected sequence 6 .* but sequence 8 came next"):
        jump.delivered(8)

    short = GapCheck(REQUEST, SequenceRange(0, 5, 8), unfiltered=True)
    short.delivered(5)
    with pytest.raises(HistoryGap, match=r"expected sequence 6 .* nothing more came"):
        short.finished()


def test_a_filtered_range_fails_only_on_the_servers_gap_event() -> None:
    filtered = GapCheck(REQUEST, SequenceRange(0, 5, 8), unfiltered=False)
    filtered.delivered(7)
    filtered.finished()

    pruned = GapCheck(REQUEST, SequenceRange(0, 5, 8), unfiltered=False)
    pruned.control("history_gap", {"requested_from_sequence": 5, "first_available_sequence": 7})
    with pytest.raises(HistoryGap, match="accept_history_gap=true"):
        pruned.delivered(7)


def test_stream_options_refuse_an_end_and_check_the_gap_flag() -> None:
    base = {"url": "http://127.0.0.1:1", "event_type": "events"}
    assert StreamOptions.parse(base).accept_gap is False
    assert StreamOptions.parse({**base, "accept_history_gap": "TRUE"}).accept_gap is True
    with pytest.raises(ValueError, match="a streaming read has no end"):
        StreamOptions.parse({**base, "to_id": "9"})
    with pytest.raises(ValueError, match="accept_history_gap must be true or false"):
        StreamOptions.parse({**base, "accept_history_gap": "yes"})
    with pytest.raises(ValueError, match="numPartitions must be a positive integer"):
        StreamOptions.parse({**base, "numPartitions": "0"})
