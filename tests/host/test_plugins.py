"""Plugin discovery: built-ins through entry points, blocking, load failures, conflicts."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from aviso_host.plugins import BLOCK_ENV, PluginError, discover
from aviso_plugins import hookimpl
from aviso_plugins.types import FieldHandler
from tests.support.process import run_aviso

BUILT_IN = {
    "text_handlers": ("StringHandler", "EnumHandler", "ExpverHandler"),
    "temporal_handlers": ("DateHandler", "TimeHandler"),
    "numeric_handlers": ("IntHandler", "FloatHandler"),
    "polygon_handler": ("PolygonHandler",),
}


def test_built_in_plugins_arrive_through_entry_points() -> None:
    registry = discover()
    names = {plugin.name: plugin for plugin in registry.plugins}
    for plugin, handler_types in BUILT_IN.items():
        assert names[plugin].kinds == ("field-handlers",)
        assert names[plugin].distribution == "aviso-py"
        assert set(handler_types) <= set(registry.field_handlers)
    assert names["in_memory_backend"].kinds == ("storage-backend",)
    assert set(registry.backends) >= {"in_memory"}


def test_without_entry_points_nothing_is_built_in() -> None:
    registry = discover(load_entry_points=False)
    assert registry.field_handlers == {} and registry.backends == {}


def test_operator_can_block_named_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BLOCK_ENV, "numeric_handlers, polygon_handler")
    registry = discover()
    assert "IntHandler" not in registry.field_handlers
    assert "PolygonHandler" not in registry.field_handlers
    assert "StringHandler" in registry.field_handlers
    assert "numeric_handlers" not in {plugin.name for plugin in registry.plugins}


class _Clash(FieldHandler):
    type_name: ClassVar[str] = "IntHandler"

    def canonicalise(self, text: str) -> str:
        return text


class _ClashingPlugin:
    @hookimpl
    def aviso_field_handlers(self) -> list[type[FieldHandler]]:
        return [_Clash]


def test_two_plugins_claiming_one_handler_type_fail_startup() -> None:
    with pytest.raises(PluginError, match="both provide type_name 'IntHandler'"):
        discover(extra=[_ClashingPlugin()])


def _broken_distribution(root: Path) -> None:
    """A distribution whose entry point imports a module that raises."""
    (root / "aviso_broken_plugin.py").write_text("raise ImportError('missing dependency xyz')\n")
    info = root / "aviso_broken-1.2.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: aviso-broken\nVersion: 1.2.3\n")
    (info / "entry_points.txt").write_text("[aviso]\nbroken = aviso_broken_plugin\n")


def test_a_plugin_that_fails_to_load_names_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _broken_distribution(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as failure:
        discover()
    message = str(failure.value)
    assert "plugin 'broken'" in message and "aviso-broken 1.2.3" in message
    assert "missing dependency xyz" in message


def test_the_cli_reports_a_broken_plugin_and_exits_non_zero(tmp_path: Path) -> None:
    _broken_distribution(tmp_path)
    result = run_aviso("plugins", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode != 0
    assert "plugin 'broken'" in result.stderr


def test_blocking_the_broken_plugin_lets_the_rest_load(tmp_path: Path) -> None:
    _broken_distribution(tmp_path)
    result = run_aviso("plugins", env={"PYTHONPATH": str(tmp_path), BLOCK_ENV: "broken"})
    assert result.returncode == 0, result.stderr
    assert "text_handlers" in result.stdout and "broken" not in result.stdout
