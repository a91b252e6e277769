"""Plugin discovery: built-ins through entry points, blocking, load failures, conflicts."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from aviso_host.plugins import BLOCK_ENV, HOST_COMMANDS, PluginError, discover
from aviso_plugins import hookimpl
from aviso_plugins.types import FieldHandler
from tests.support.process import run_aviso

pytestmark = pytest.mark.heavy  # child processes: see tests/conftest.py

HOST = Path(__file__).resolve().parents[2] / "host"

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


def test_without_entry_points_the_built_ins_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _command_distribution(tmp_path, "hello")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = discover(load_entry_points=False)
    assert {"in_memory", "jetstream"} <= set(registry.backends)
    assert "StringHandler" in registry.field_handlers
    assert "hello" not in registry.commands  # another distribution's plugin
    assert "hello" in discover().commands


def test_without_built_ins_only_the_given_plugins_are_registered() -> None:
    registry = discover(load_entry_points=False, builtins=False, extra=[_ClashingPlugin()])
    assert registry.backends == {} and set(registry.field_handlers) == {"IntHandler"}


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


def _command_distribution(root: Path, command: str) -> None:
    """A distribution whose plugin adds ``aviso-server COMMAND`` (prints a greeting)."""
    module = f"aviso_{command}_command"
    (root / f"{module}.py").write_text(
        "import click\n"
        "from aviso_plugins import hookimpl\n"
        f"@click.command({command!r})\n"
        "@click.argument('who')\n"
        "def greet(who):\n"
        "    click.echo(f'hello {who}')\n"
        "@hookimpl\n"
        "def aviso_commands():\n"
        "    return [greet]\n"
    )
    info = root / f"aviso_{command}-0.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: aviso-{command}\nVersion: 0.2.0\n"
    )
    (info / "entry_points.txt").write_text(f"[aviso]\n{command}_cmd = {module}\n")


def test_a_plugin_adds_a_subcommand(tmp_path: Path) -> None:
    _command_distribution(tmp_path, "hello")
    env = {"PYTHONPATH": str(tmp_path)}
    result = run_aviso("hello", "world", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello world\n"
    listing = run_aviso("plugins", env=env)
    row = next(line for line in listing.stdout.splitlines() if line.startswith("hello_cmd"))
    assert row.split() == ["hello_cmd", "aviso-hello", "0.2.0", "commands:", "hello"]
    assert "hello" in run_aviso("--help", env=env).stdout


def test_the_reserved_names_are_the_host_commands() -> None:
    from aviso_host.cli import main

    assert set(main.commands) - set(discover().commands) == HOST_COMMANDS


def test_a_plugin_cannot_take_a_host_command(tmp_path: Path) -> None:
    _command_distribution(tmp_path, "serve")
    result = run_aviso("plugins", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode != 0
    assert "plugin 'serve_cmd' provides command 'serve'" in result.stderr


def test_spark_and_load_are_plugin_commands_the_host_does_not_import() -> None:
    registry = discover()
    assert {"spark", "load"} <= set(registry.commands)
    names = {plugin.name: plugin for plugin in registry.plugins}
    assert names["spark_commands"].provides == (("commands", ("spark",)),)
    assert names["load_commands"].provides == (("commands", ("load",)),)
    sources = [path.read_text() for path in HOST.rglob("*.py")]
    assert not [text for text in sources if "aviso_spark" in text or "aviso_loadtests" in text]


def test_plugins_lists_what_each_plugin_provides() -> None:
    result = run_aviso("plugins")
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert rows["numeric_handlers"].split()[1:] == [
        "aviso-py",
        "0.1.0",
        "field-handlers:",
        "IntHandler,",
        "FloatHandler",
    ]
    assert "storage-backend: jetstream" in rows["jetstream_backend"]
    assert "auth-provider: direct" in rows["direct_auth"]
    assert "stream-authoriser: ecpds" in rows["ecpds_authoriser"]
    assert "sink: http" in rows["http_sink"]
