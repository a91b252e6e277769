"""A push subscription's dead letters: capped, counted, redriven by sequence, and kept when
the subscription is disabled (the document kept beside its entry in shared state)."""

from __future__ import annotations

from typing import Any

from aviso_builtins.subscriptions.deliveries import (
    DEAD_LETTERS_KEPT,
    DeadLetter,
    disable_letters,
    keep_letter,
    take_dead_letters,
)


def _document() -> dict[str, Any]:
    return {"letters": [], "redrive": [], "dropped": 0}


def _letter(sequence: int) -> DeadLetter:
    return DeadLetter(sequence, 3, "answered 500", "2026-04-02T00:00:00Z")


def test_dead_letters_are_capped_and_the_forgotten_counted() -> None:
    document = _document()
    for sequence in range(1, DEAD_LETTERS_KEPT + 3):
        keep_letter(document, _letter(sequence))
    assert len(document["letters"]) == DEAD_LETTERS_KEPT
    assert document["letters"][0]["sequence"] == 3
    assert document["dropped"] == 2


def test_a_redrive_queues_by_sequence_once_and_a_disabled_one_keeps_its_letters() -> None:
    document = _document()
    for sequence in (9, 4, 7):
        keep_letter(document, _letter(sequence))
    assert take_dead_letters(document) == 3
    assert [letter["sequence"] for letter in document["redrive"]] == [4, 7, 9]
    assert not document["letters"]
    keep_letter(document, _letter(7))  # already queued: not queued twice
    assert take_dead_letters(document) == 1
    assert [letter["sequence"] for letter in document["redrive"]] == [4, 7, 9]
    current = DeadLetter.of(document["redrive"][0])  # being redriven, still queued
    disable_letters(document, current)
    assert not document["redrive"]
    assert [letter["sequence"] for letter in document["letters"]] == [4, 7, 9]
