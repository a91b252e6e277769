"""A pattern matches a topic positionally, whatever shortcut it takes: a whole stream's
pattern (its base literal, every other position a wildcard) answers as the rule does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from aviso_plugins.topics import TopicDecodeError, TopicPattern, build_topic, decode_topic

TOKENS = st.sampled_from(["ens", "a", "a.b", "%", "", "é"])
RAW = st.sampled_from(["ens", "ens.a", "ens.a.b", "ens..", "ens.%41.b", "ens.%zz.b", "ensx.a.b"])


def positional(pattern: TopicPattern, topic: str) -> bool:
    try:
        tokens = decode_topic(topic)
    except TopicDecodeError:
        return False
    return len(tokens) == len(pattern.tokens) and all(
        want is None or want == token for want, token in zip(pattern.tokens, tokens, strict=True)
    )


@settings(max_examples=300, deadline=None)
@given(
    base=TOKENS,
    wildcards=st.integers(min_value=0, max_value=3),
    topic=st.one_of(st.lists(TOKENS, min_size=1, max_size=4).map(build_topic), RAW),
)
def test_a_whole_stream_pattern_matches_by_the_positional_rule(
    base: str, wildcards: int, topic: str
) -> None:
    pattern = TopicPattern((base, *(None,) * wildcards))
    assert pattern.matches(topic) == positional(pattern, topic)
