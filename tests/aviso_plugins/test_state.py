import asyncio

import pytest

from aviso_plugins.state import ProcessLocalState, valid_key


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(coroutine)


def test_keys_are_dot_separated_segments_of_a_safe_alphabet() -> None:
    assert valid_key("subscriptions.alice_=.x-1")
    for bad in ("", ".a", "a.", "a..b", "a b", "a/b", "a*", "ü", "a" * 256):
        assert not valid_key(bad), bad


def test_create_wins_once_and_update_compares_the_revision() -> None:
    async def scenario() -> None:
        state = ProcessLocalState()
        first = await state.create("k", b"one")
        assert first is not None
        assert await state.create("k", b"two") is None
        entry = await state.get("k")
        assert entry is not None and entry.value == b"one" and entry.revision == first
        second = await state.update("k", b"three", first)
        assert second is not None and second != first
        assert await state.update("k", b"stale", first) is None
        assert await state.delete("k", revision=first) is False
        assert await state.delete("k", revision=second) is True
        assert await state.get("k") is None
        assert await state.create("k", b"again") is not None

    run(scenario())


def test_keys_lists_a_prefix_sorted() -> None:
    async def scenario() -> None:
        state = ProcessLocalState()
        for key in ("b.2", "a.1", "b.1", "c"):
            await state.put(key, b"")
        assert await state.keys("b.") == ["b.1", "b.2"]
        assert await state.keys() == ["a.1", "b.1", "b.2", "c"]

    run(scenario())


def test_an_invalid_key_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        run(ProcessLocalState().put("a b", b""))


def test_with_a_ttl_an_entry_not_rewritten_is_gone() -> None:
    async def scenario() -> None:
        state = ProcessLocalState(ttl_seconds=0.0)
        assert await state.create("lease", b"holder") is not None
        assert await state.get("lease") is None
        assert await state.create("lease", b"other") is not None

    run(scenario())
