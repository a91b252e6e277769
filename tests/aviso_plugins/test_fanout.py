"""The subscriber index only narrows: every pattern that matches a topic is a candidate."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aviso_plugins._shared.fanout import SubscriberIndex
from aviso_plugins.topics import TopicPattern, build_topic

# A tiny alphabet makes equal tokens (and so matches) common; "." and "%" exercise encoding.
TOKENS = st.sampled_from(["a", "b", "a.b", "%", ""])
PATTERN_TOKENS = st.one_of(TOKENS, st.none())


@settings(max_examples=300, deadline=None)
@given(
    patterns=st.lists(st.lists(PATTERN_TOKENS, min_size=1, max_size=4), max_size=12),
    topic=st.lists(TOKENS, min_size=1, max_size=4),
)
def test_candidates_hold_every_matching_pattern(
    patterns: list[list[str | None]], topic: list[str]
) -> None:
    index: SubscriberIndex[int] = SubscriberIndex()
    compiled = [TopicPattern(tuple(tokens)) for tokens in patterns]
    for number, pattern in enumerate(compiled):
        index.add(pattern, number)
    encoded = build_topic(topic)
    matching = {n for n, pattern in enumerate(compiled) if pattern.matches(encoded)}
    assert matching <= set(index.candidates(encoded))


def test_subscribers_of_other_leading_tokens_are_not_candidates() -> None:
    index: SubscriberIndex[str] = SubscriberIndex()
    for run in range(1000):
        index.add(TopicPattern(("bench", f"idle{run}", None)), f"idle{run}")
    index.add(TopicPattern(("bench", "hot", None)), "hot")
    index.add(TopicPattern(("bench", None, "1")), "any-run")
    index.add(TopicPattern((None, None, None)), "everything")
    assert sorted(index.candidates("bench.hot.1")) == ["any-run", "everything", "hot"]


def test_a_discarded_subscriber_is_no_candidate() -> None:
    index: SubscriberIndex[str] = SubscriberIndex()
    pattern = TopicPattern(("bench", "hot"))
    index.add(pattern, "w1")
    index.add(pattern, "w2")
    index.discard(pattern, "w1")
    index.discard(pattern, "never-added")
    assert index.candidates("bench.hot") == ["w2"]
    index.discard(pattern, "w2")
    assert index.candidates("bench.hot") == []


def test_an_undecodable_topic_has_no_candidates() -> None:
    index: SubscriberIndex[str] = SubscriberIndex()
    index.add(TopicPattern((None,)), "everything")
    assert index.candidates("bad%zz") == []


@settings(max_examples=300, deadline=None)
@given(
    patterns=st.lists(st.lists(PATTERN_TOKENS, min_size=1, max_size=4), max_size=12),
    topic=st.lists(TOKENS, min_size=1, max_size=4),
    shared=st.integers(min_value=1, max_value=3),
)
def test_matching_is_exactly_the_matching_patterns(
    patterns: list[list[str | None]], topic: list[str], shared: int
) -> None:
    """Each pattern is held by ``shared`` subscribers (one match decides for all of them)."""
    index: SubscriberIndex[tuple[int, int]] = SubscriberIndex()
    compiled = [TopicPattern(tuple(tokens)) for tokens in patterns]
    for number, pattern in enumerate(compiled):
        for copy in range(shared):
            index.add(pattern, (number, copy))
    encoded = build_topic(topic)
    expected = {
        (n, copy)
        for n, pattern in enumerate(compiled)
        if pattern.matches(encoded)
        for copy in range(shared)
    }
    found = index.matching(encoded)
    assert len(found) == len(expected)
    assert set(found) == expected


def test_matching_skips_undecodable_topics_and_other_runs() -> None:
    index: SubscriberIndex[str] = SubscriberIndex()
    index.add(TopicPattern((None,)), "everything")
    assert index.matching("bad%zz") == []
    index.add(TopicPattern(("bench", "hot", None)), "hot")
    index.add(TopicPattern(("bench", "cold", None)), "cold")
    index.add(TopicPattern(("bench", "hot", "2")), "hot-2")
    assert index.matching("bench.hot.1") == ["hot"]


def test_a_pattern_filed_again_after_its_last_subscriber_left_matches_as_before() -> None:
    index: SubscriberIndex[str] = SubscriberIndex()
    pattern = TopicPattern(("bench", None, "1"))
    index.add(pattern, "w1")
    index.discard(pattern, "w1")
    assert index.matching("bench.hot.1") == []
    index.add(pattern, "w2")
    index.add(TopicPattern(("bench", None, None)), "stream")
    assert index.matching("bench.hot.1") == ["w2", "stream"]
    assert index.matching("bench.hot.2") == ["stream"]
