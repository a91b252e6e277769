"""``aviso_plugins.types``, the path the plugin documentation shows, keeps offering every base
class and value type after their split into one module per plugin kind."""

from __future__ import annotations

import importlib

import pytest

from aviso_plugins import types

KIND_MODULES = ("fields", "storage", "auth", "sinks", "consumers", "deliveries")


@pytest.mark.parametrize("kind", KIND_MODULES)
def test_the_index_offers_every_name_of_a_kind_module_as_the_same_object(kind: str) -> None:
    module = importlib.import_module(f"aviso_plugins.{kind}")
    missing = [name for name in module.__all__ if name not in types.__all__]
    assert not missing, f"aviso_plugins.types does not re-export {missing} of {kind}"
    for name in module.__all__:
        assert getattr(types, name) is getattr(module, name), name


def test_the_index_offers_nothing_the_kind_modules_do_not_define() -> None:
    # TopicPattern, what a backend receives, has always been importable from here too.
    defined = {"TopicPattern"} | {
        name
        for kind in KIND_MODULES
        for name in importlib.import_module(f"aviso_plugins.{kind}").__all__
    }
    assert set(types.__all__) == defined
    assert len(types.__all__) == len(defined), "a name is listed twice"
