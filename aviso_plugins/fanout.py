"""Live subscribers indexed by the literal leading tokens of their patterns.

A pattern can only match topics that start with its literal prefix (the tokens before its
first wildcard), so a publish need only look at the subscribers filed under one of its
topic's prefixes. Fan-out cost then follows the watchers that could match, not every watcher
of the process or of the stream: 10,000 watches of other runs of the same event type cost a
publish a handful of dictionary lookups, not 10,000 pattern matches.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from aviso_plugins.topics import TopicDecodeError, TopicPattern, decode_topic

Subscriber = TypeVar("Subscriber")


class SubscriberIndex(Generic[Subscriber]):
    """Subscribers by their pattern's literal prefix; ``candidates`` narrows, callers still
    confirm each one with ``TopicPattern.matches``."""

    def __init__(self) -> None:
        # Dicts (not sets) keep delivery in subscription order within a prefix.
        self._by_prefix: dict[tuple[str, ...], dict[Subscriber, None]] = {}

    def add(self, pattern: TopicPattern, subscriber: Subscriber) -> None:
        self._by_prefix.setdefault(pattern.literal_prefix, {})[subscriber] = None

    def discard(self, pattern: TopicPattern, subscriber: Subscriber) -> None:
        prefix = pattern.literal_prefix
        peers = self._by_prefix.get(prefix)
        if peers is not None:
            peers.pop(subscriber, None)
            if not peers:
                del self._by_prefix[prefix]

    def candidates(self, topic: str) -> list[Subscriber]:
        """Every subscriber whose literal prefix starts the encoded ``topic``."""
        try:
            tokens = decode_topic(topic)
        except TopicDecodeError:
            return []  # an undecodable topic matches no pattern
        found: list[Subscriber] = []
        for depth in range(len(tokens) + 1):
            peers = self._by_prefix.get(tokens[:depth])
            if peers:
                found.extend(peers)
        return found
