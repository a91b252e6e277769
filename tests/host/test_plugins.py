"""Plugin discovery: built-ins through entry points, blocking, load failures, conflicts."""

from __future__ import annotations

import importlib.metadata
import json
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
    blocked = {plugin.name: plugin.state for plugin in registry.unloaded}
    assert blocked == {"numeric_handlers": "blocked", "polygon_handler": "blocked"}
    assert registry.warnings == () and registry.problems == ()


def test_a_misspelled_blocked_name_is_a_warning_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BLOCK_ENV, "numeric_handler")
    registry = discover()
    assert "IntHandler" in registry.field_handlers
    assert registry.warnings == (
        f"{BLOCK_ENV} names 'numeric_handler', which is no installed plugin "
        "(did you mean 'numeric_handlers'?)",
    )
    listing = run_aviso("plugins", env={BLOCK_ENV: "numeric_handler"})
    assert listing.returncode == 0
    assert "'numeric_handler', which is no installed plugin" in listing.stderr
    config = tmp_path / "config.yaml"
    config.write_text(
        "application: {host: 127.0.0.1, port: 0}\nnotification_backend: {kind: in_memory}\n"
    )
    checked = run_aviso("config", "check", str(config), env={BLOCK_ENV: "numeric_handler"})
    assert checked.returncode == 0, checked.stderr
    assert "warning: AVISO_BLOCK_PLUGINS names 'numeric_handler'" in checked.stderr


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


def test_plugins_lists_a_broken_plugin_with_the_rest_and_exits_non_zero(tmp_path: Path) -> None:
    _broken_distribution(tmp_path)
    result = run_aviso("plugins", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1
    rows = _rows(result.stdout)
    assert rows["broken"][:4] == ["broken", "failed", "aviso-broken", "1.2.3"]
    assert "ImportError: missing dependency xyz" in " ".join(rows["broken"])
    assert rows["text_handlers"][:2] == ["text_handlers", "loaded"]
    [error] = result.stderr.splitlines()
    assert error.startswith("Error: plugin 'broken'") and "missing dependency xyz" in error


def test_plugins_json_gives_every_state(tmp_path: Path) -> None:
    _broken_distribution(tmp_path)
    result = run_aviso(
        "plugins", "--json", env={"PYTHONPATH": str(tmp_path), BLOCK_ENV: "numeric_handlers"}
    )
    assert result.returncode == 1
    plugins = {plugin["name"]: plugin for plugin in json.loads(result.stdout)}
    assert plugins["broken"]["state"] == "failed"
    assert "missing dependency xyz" in plugins["broken"]["reason"]
    assert plugins["broken"]["distribution"] == "aviso-broken"
    assert plugins["numeric_handlers"]["state"] == "blocked"
    assert plugins["text_handlers"] == {
        "name": "text_handlers",
        "state": "loaded",
        "reason": None,
        "distribution": "aviso-py",
        "version": "0.1.0",
        "provides": {"field-handlers": ["StringHandler", "EnumHandler", "ExpverHandler"]},
    }


def test_blocking_the_broken_plugin_lets_the_rest_load(tmp_path: Path) -> None:
    _broken_distribution(tmp_path)
    result = run_aviso("plugins", env={"PYTHONPATH": str(tmp_path), BLOCK_ENV: "broken"})
    assert result.returncode == 0, result.stderr
    rows = _rows(result.stdout)
    assert rows["broken"] == ["broken", "blocked", "aviso-broken", "1.2.3", "-"]
    assert rows["text_handlers"][1] == "loaded"


def test_help_with_a_broken_plugin_shows_the_commands_that_loaded(tmp_path: Path) -> None:
    _broken_distribution(tmp_path)
    _command_distribution(tmp_path, "hello")
    env = {"PYTHONPATH": str(tmp_path)}
    for flag in ("--help", "-h"):
        result = run_aviso(flag, env=env)
        assert result.returncode == 0, result.stderr
        commands = _help_commands(result.stdout)
        assert {"serve", "plugins", "config", "hello", "spark", "load"} <= commands
        [warning] = result.stderr.splitlines()
        assert warning.startswith("Warning: 1 plugin did not load")
    assert run_aviso("hello", "you", env=env).stdout == "hello you\n"
    unknown = run_aviso("nosuch", env=env)
    assert unknown.returncode != 0 and "plugin 'broken'" in unknown.stderr


def test_version_and_short_help() -> None:
    version = run_aviso("--version")
    assert version.returncode == 0
    assert version.stdout == f"aviso-server, version {importlib.metadata.version('aviso-py')}\n"
    assert run_aviso("-h").stdout == run_aviso("--help").stdout
    assert run_aviso("plugins", "-h").stdout.startswith("Usage: ")


def _rows(listing: str) -> dict[str, list[str]]:
    lines = listing.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "DISTRIBUTION", "VERSION", "PROVIDES"]
    return {line.split()[0]: line.split() for line in lines[1:]}


def _help_commands(text: str) -> set[str]:
    section = text.split("Commands:", 1)[1]
    return {line.split()[0] for line in section.splitlines() if line.strip()}


def _distribution(
    root: Path, project: str, version: str, entry_points: str, suffix: str = "dist-info"
) -> None:
    """Installed metadata (``dist-info`` or a development checkout's ``egg-info``)."""
    info = root / f"{project.replace('-', '_')}-{version}.{suffix}"
    info.mkdir(parents=True)
    metadata = "PKG-INFO" if suffix == "egg-info" else "METADATA"
    (info / metadata).write_text(f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[aviso]\n{entry_points}\n")


def _handler_module(root: Path, module: str, type_name: str) -> None:
    (root / f"{module}.py").write_text(
        "from aviso_plugins import hookimpl\n"
        "from aviso_plugins.types import FieldHandler\n"
        f"class Handler(FieldHandler):\n"
        f"    type_name = {type_name!r}\n"
        "    def canonicalise(self, text):\n"
        "        return text\n"
        "@hookimpl\n"
        "def aviso_field_handlers():\n"
        "    return [Handler]\n"
    )


def test_two_distributions_registering_one_name_are_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _handler_module(tmp_path, "paint_colour", "PaintColour")
    _handler_module(tmp_path, "ink_colour", "InkColour")
    _distribution(tmp_path, "aviso-paint", "1.0.0", "colour = paint_colour")
    _distribution(tmp_path, "aviso-ink", "2.1.0", "colour = ink_colour")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as failure:
        discover()
    message = str(failure.value)
    assert "plugin 'colour' is registered by two distributions" in message
    assert "aviso-paint 1.0.0" in message and "aviso-ink 2.1.0" in message
    env = {"PYTHONPATH": str(tmp_path)}
    listing = run_aviso("plugins", env=env)
    assert listing.returncode == 1
    assert sorted(row[:4] for row in _listed(listing.stdout, "colour")) == [
        ["colour", "conflicting", "aviso-ink", "2.1.0"],
        ["colour", "conflicting", "aviso-paint", "1.0.0"],
    ]
    [error] = listing.stderr.splitlines()
    assert "aviso-paint 1.0.0" in error and "aviso-ink 2.1.0" in error
    config = tmp_path / "config.yaml"
    config.write_text("application: {host: 127.0.0.1, port: 0}\n")
    for command in (("config", "check", str(config)), ("serve", "--config", str(config))):
        refused = run_aviso(*command, env=env)
        assert refused.returncode == 1
        [error] = refused.stderr.splitlines()
        assert error.startswith("Error: plugin 'colour' is registered by two distributions")


def _listed(listing: str, name: str) -> list[list[str]]:
    return [line.split() for line in listing.splitlines() if line.split()[0] == name]


def test_the_same_distribution_seen_twice_is_not_a_clash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A development checkout: its egg-info on the path, beside the installed dist-info.
    checkout, site = tmp_path / "checkout", tmp_path / "site"
    checkout.mkdir()
    _handler_module(checkout, "paint_colour", "PaintColour")
    _distribution(checkout, "aviso-paint", "1.0.0", "colour = paint_colour", "egg-info")
    _distribution(site, "aviso_paint", "1.0.0", "colour = paint_colour")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(checkout))
    registry = discover()
    assert "PaintColour" in registry.field_handlers
    [info] = [plugin for plugin in registry.plugins if plugin.name == "colour"]
    assert (info.distribution, info.version, info.state) == ("aviso-paint", "1.0.0", "loaded")
    # Left behind under an older project name, pointing at the same module: the same plugin.
    _distribution(site, "aviso-paint-old", "0.9.0", "colour = paint_colour")
    assert "PaintColour" in discover().field_handlers


class _MisspelledHook:
    @hookimpl
    def aviso_field_handler(self) -> list[type[FieldHandler]]:
        return [_Clash]


def test_a_misspelled_hook_names_the_plugin_the_hook_and_the_nearest_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(PluginError) as failure:
        discover(load_entry_points=False, extra=[_MisspelledHook()])
    assert "implements 'aviso_field_handler' (did you mean 'aviso_field_handlers'?)" in str(
        failure.value
    )
    (tmp_path / "typo_plugin.py").write_text(
        "from aviso_plugins import hookimpl\n@hookimpl\ndef aviso_sink():\n    return []\n"
    )
    _distribution(tmp_path, "aviso-typo", "0.3.0", "typo = typo_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as failure:
        discover()
    assert str(failure.value) == (
        "plugin 'typo' (aviso-typo 0.3.0) implements 'aviso_sink' "
        "(did you mean 'aviso_sinks'?), which is no aviso hook"
    )
    registry = discover(tolerant=True)
    [typo] = [plugin for plugin in registry.unloaded if plugin.name == "typo"]
    assert typo.state == "failed" and registry.problems == (typo.reason,)


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
    assert _rows(listing.stdout)["hello_cmd"] == [
        "hello_cmd",
        "loaded",
        "aviso-hello",
        "0.2.0",
        "commands:",
        "hello",
    ]
    assert "hello" in run_aviso("--help", env=env).stdout


def test_the_reserved_names_are_the_host_commands() -> None:
    from aviso_host.cli import main

    assert set(main.commands) - set(discover().commands) == HOST_COMMANDS


def test_a_plugin_cannot_take_a_host_command(tmp_path: Path) -> None:
    _command_distribution(tmp_path, "serve")
    result = run_aviso("plugins", env={"PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1
    assert "plugin 'serve_cmd' provides command 'serve'" in result.stderr
    assert _rows(result.stdout)["serve_cmd"][1] == "conflicting"


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
        "loaded",
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
