"""A push subscription's dead letters: capped, counted, redriven by sequence, and kept when
the subscription is disabled."""

from __future__ import annotations

from typing import Any, cast

from aviso_host.deliveries import DEAD_LETTERS_KEPT, DeadLetter, PushState


def _state() -> PushState:
    # Neither the kind nor the filter takes part in the bookkeeping under test.
    return PushState(kind=cast(Any, None), stored={}, stream_filter=cast(Any, None))


def _letter(sequence: int) -> DeadLetter:
    return DeadLetter(sequence, 3, "answered 500", "2026-04-02T00:00:00Z")


def test_dead_letters_are_capped_and_the_forgotten_counted() -> None:
    push = _state()
    for sequence in range(1, DEAD_LETTERS_KEPT + 3):
        push.dead_letter(_letter(sequence))
    assert len(push.dead_letters) == DEAD_LETTERS_KEPT
    assert push.dead_letters[0].sequence == 3
    assert push.dead_letters_dropped == 2
    assert push.dead_lettered == DEAD_LETTERS_KEPT + 2


def test_a_redrive_queues_by_sequence_once_and_a_disabled_one_keeps_its_letters() -> None:
    push = _state()
    for sequence in (9, 4, 7):
        push.dead_letter(_letter(sequence))
    assert push.take_dead_letters() == 3
    assert [letter.sequence for letter in push.redrive] == [4, 7, 9]
    assert not push.dead_letters
    push.dead_letter(_letter(7))  # already queued: not queued twice
    assert push.take_dead_letters() == 1
    assert [letter.sequence for letter in push.redrive] == [4, 7, 9]
    current = push.redrive.pop(0)
    push.disable(current)
    assert push.status == "disabled" and not push.redrive
    assert [letter.sequence for letter in push.dead_letters] == [4, 7, 9]
    assert push.take_dead_letters() == 0
    assert len(push.dead_letters) == 3
