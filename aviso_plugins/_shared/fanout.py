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
    """Subscribers by their pattern's literal prefix, then by pattern; ``candidates``
    narrows (callers still confirm each one with ``TopicPattern.matches``), ``matching``
    also confirms."""

    def __init__(self) -> None:
        # Dicts (not sets) keep delivery in subscription order within a pattern.
        self._by_prefix: dict[
            tuple[str, ...], dict[tuple[str | None, ...], dict[Subscriber, TopicPattern]]
        ] = {}
        # How many prefixes of each length are filed, and those lengths in ascending order:
        # a publish looks its topic up at these lengths only.
        self._lengths: dict[int, int] = {}
        self._ordered_lengths: tuple[int, ...] = ()
        # Per filed pattern, its literal tokens after its prefix, by position: all a topic
        # filed under the prefix and of the pattern's length must still equal (none for a
        # whole stream's pattern, what every consumer follows).
        self._literals_after_prefix: dict[tuple[str | None, ...], tuple[tuple[int, str], ...]] = {}

    def _count_prefix(self, length: int, change: int) -> None:
        count = self._lengths.get(length, 0) + change
        if count:
            self._lengths[length] = count
        else:
            del self._lengths[length]
        self._ordered_lengths = tuple(sorted(self._lengths))

    def add(self, pattern: TopicPattern, subscriber: Subscriber) -> None:
        prefix = pattern.literal_prefix
        groups = self._by_prefix.get(prefix)
        if groups is None:
            groups = self._by_prefix[prefix] = {}
            self._count_prefix(len(prefix), 1)
        peers = groups.get(pattern.tokens)
        if peers is None:
            peers = groups[pattern.tokens] = {}
            self._literals_after_prefix[pattern.tokens] = tuple(
                (position, token)
                for position, token in enumerate(pattern.tokens)
                if position >= len(prefix) and token is not None
            )
        peers[subscriber] = pattern

    def discard(self, pattern: TopicPattern, subscriber: Subscriber) -> None:
        prefix = pattern.literal_prefix
        groups = self._by_prefix.get(prefix)
        if groups is None:
            return
        peers = groups.get(pattern.tokens)
        if peers is not None:
            peers.pop(subscriber, None)
            if not peers:
                del groups[pattern.tokens]
                del self._literals_after_prefix[pattern.tokens]
                if not groups:
                    del self._by_prefix[prefix]
                    self._count_prefix(len(prefix), -1)

    def candidates(self, topic: str) -> list[Subscriber]:
        """Every subscriber whose literal prefix starts the encoded ``topic``."""
        try:
            tokens = decode_topic(topic)
        except TopicDecodeError:
            return []  # an undecodable topic matches no pattern
        found: list[Subscriber] = []
        for depth in range(len(tokens) + 1):
            groups = self._by_prefix.get(tokens[:depth])
            if groups:
                for peers in groups.values():
                    found.extend(peers)
        return found

    def matching(self, topic: str) -> list[Subscriber]:
        """Every subscriber whose pattern matches the encoded ``topic``, in subscription
        order within a pattern.

        Watches of a busy event share a handful of patterns: each distinct pattern is
        matched once per call, so 10,000 watchers of one pattern cost one match, not
        10,000.
        """
        if not self._by_prefix:
            return []
        try:
            # Without an escape every token is as decoded (the per-token check, once).
            tokens = tuple(topic.split(".")) if "%" not in topic else decode_topic(topic)
        except TopicDecodeError:
            return []  # an undecodable topic matches no pattern
        found: list[Subscriber] = []
        length = len(tokens)
        literals = self._literals_after_prefix
        for depth in self._ordered_lengths:
            if depth > length:
                break
            groups = self._by_prefix.get(tokens[:depth])
            if not groups:
                continue
            # Filed under the topic's own prefix: what is left to compare is the length and
            # the literal tokens after the prefix (a plain loop: this runs for every publish
            # that has a subscriber).
            for wanted, peers in groups.items():
                if len(wanted) != length:
                    continue
                for position, token in literals[wanted]:
                    if tokens[position] != token:
                        break
                else:
                    found.extend(peers)
        return found
