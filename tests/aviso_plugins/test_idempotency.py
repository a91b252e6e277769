"""The remembered message ids' budgets, checked against a plain model of what they promise.

Past a writer's budget on a stream its own oldest id there goes; past the total, the oldest
id of a writer holding the most (never one of a writer holding fewer).
"""

from __future__ import annotations

import random

from aviso_plugins._shared.idempotency import TOTAL_BUDGET, WRITER_BUDGET, RememberedIds
from aviso_plugins.types import Writer

WINDOW = 3600.0


def test_evictions_take_the_oldest_id_of_a_writer_holding_the_most() -> None:
    evicted: list[str] = []
    ids = RememberedIds(WINDOW, 50, 8, lambda reason, count: evicted.extend([reason] * count))
    writers = [Writer(address=f"10.0.0.{index}") for index in range(40)]
    streams = ("alpha", "beta")
    model: dict[tuple[str, str], Writer] = {}  # remembered ids, oldest first
    rng = random.Random(7)
    seen_reasons: set[str] = set()
    for step in range(3000):
        # A few heavy writers and many light ones.
        writer = writers[min(int(rng.expovariate(0.3)), len(writers) - 1)]
        stream = rng.choice(streams)
        key = (stream, f"id-{step}")
        held = {candidate: 0 for candidate in writers}
        for owner in model.values():
            held[owner] += 1
        before = dict(model)
        evicted.clear()
        ids.remember(stream, key[1], writer, step, b"", 0.0)
        model[key] = writer
        gone = [old for old in before if ids.get(old[0], old[1], 0.0) is None]
        assert len(gone) == len(evicted) <= 1
        if gone:
            seen_reasons.update(evicted)
            (lost,) = gone
            owner = before[lost]
            del model[lost]
            mine = [old for old, who in before.items() if who == owner]
            if evicted == [WRITER_BUDGET]:
                assert owner == writer and lost[0] == stream
                assert lost == next(old for old in mine if old[0] == stream)
            else:
                assert evicted == [TOTAL_BUDGET]
                assert held[owner] == max(held.values()), (held[owner], max(held.values()))
                assert lost == mine[0]
        assert len(ids) == len(model) <= 50
        assert ids.get(stream, key[1], 0.0) is not None
    assert seen_reasons == {WRITER_BUDGET, TOTAL_BUDGET}
    # The window ends for all: everything is forgotten, and the structure starts over.
    assert ids.get("alpha", "id-0", WINDOW + 1) is None
    assert len(ids) == 0
    ids.remember("alpha", "again", writers[0], 1, b"", WINDOW + 2)
    assert len(ids) == 1


def test_many_writers_with_one_id_each_lose_none_to_a_flood() -> None:
    ids = RememberedIds(WINDOW, 20_000, 20_000)
    quiet = [Writer(address=f"quiet-{index}") for index in range(10_000)]
    for index, writer in enumerate(quiet):
        ids.remember("alpha", f"q{index}", writer, index, b"", 0.0)
    flood = Writer(address="flood")
    for index in range(50_000):
        ids.remember("alpha", f"f{index}", flood, index, b"", 0.0)
    assert all(ids.get("alpha", f"q{index}", 0.0) is not None for index in range(10_000))
    assert len(ids) == 20_000
