"""Mistakes a plugin author makes that used to pass in silence or surface as a raw error:
a hook function without ``@hookimpl``, a provided class without the name attribute
configuration selects it by."""

from __future__ import annotations

import types
from typing import Any

import pytest

from aviso_host.plugins import PluginError, discover
from aviso_plugins import hookimpl
from aviso_plugins.testing import build_app
from aviso_plugins.types import FieldHandler, StorageBackend
from tests.aviso_plugins.test_plugins_doc_examples import example


class _Unmarked:
    """Both hooks written as hooks, neither marked: pluggy would never call them."""

    def aviso_field_handlers(self) -> list[type[FieldHandler]]:
        return []

    @staticmethod
    def aviso_storage_backend() -> list[type[StorageBackend]]:  # misspelled too
        return []

    @property
    def aviso_not_a_function(self) -> int:
        # Not a function: never reported (pluggy itself reads it while registering).
        return 0


def test_a_hook_function_without_hookimpl_is_a_warning_naming_plugin_and_hook() -> None:
    registry = discover(load_entry_points=False, extra=[_Unmarked()])
    unmarked = [w for w in registry.warnings if "without @hookimpl" in w]
    assert len(unmarked) == 2, registry.warnings
    assert unmarked[0].endswith(
        "defines aviso_field_handlers() without @hookimpl, so it is never called: "
        "mark it with aviso_plugins.hookimpl"
    )
    assert "aviso_storage_backend() (did you mean 'aviso_storage_backends'?)" in unmarked[1]
    assert all(w.startswith("plugin '") for w in unmarked)


def test_a_module_plugin_names_itself_and_marked_hooks_are_not_reported() -> None:
    module = types.ModuleType("aviso_half_marked")

    def aviso_sinks() -> list[Any]:
        return []

    module.aviso_sinks = aviso_sinks  # type: ignore[attr-defined]
    module.aviso_commands = hookimpl(lambda: [])  # type: ignore[attr-defined]
    registry = discover(load_entry_points=False, extra=[module])
    assert [w for w in registry.warnings if "hookimpl" in w] == [
        "plugin 'aviso_half_marked' defines aviso_sinks() without @hookimpl, so it is never "
        "called: mark it with aviso_plugins.hookimpl"
    ]


class _OneUnmarked:
    def aviso_field_handlers(self) -> list[type[FieldHandler]]:
        return []


def test_the_testing_kit_shows_the_warning() -> None:
    with pytest.warns(UserWarning, match=r"aviso_field_handlers\(\) without @hookimpl"):
        build_app({}, plugins=[_OneUnmarked()])


class _Nameless(FieldHandler):
    """A handler whose author forgot ``type_name``."""


class _NamelessPlugin:
    @hookimpl
    def aviso_field_handlers(self) -> list[type[FieldHandler]]:
        return [_Nameless]


def test_a_field_handler_without_type_name_is_a_plugin_error_naming_the_plugin() -> None:
    with pytest.raises(PluginError) as refused:
        discover(load_entry_points=False, extra=[_NamelessPlugin()])
    message = str(refused.value)
    assert message.startswith("plugin '")
    assert "aviso_field_handlers() returned <class" in message and "_Nameless" in message
    assert message.endswith(
        "which has no 'type_name' (the name configuration selects it by): "
        "set the class attribute type_name"
    )
    tolerant = discover(load_entry_points=False, extra=[_NamelessPlugin()], tolerant=True)
    assert [p.state for p in tolerant.unloaded] == ["failed"]


def test_the_guides_example_backend_is_marked() -> None:
    registry = discover(load_entry_points=False, extra=[example("class ListBackend")])
    assert not [w for w in registry.warnings if "hookimpl" in w]
