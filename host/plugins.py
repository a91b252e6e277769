"""Plugin discovery: one pluggy manager fed from the ``aviso`` entry-point group.

Built-in plugins are listed in ``setup.cfg`` under the same group as third-party ones, so
the host never imports a plugin module by name. ``AVISO_BLOCK_PLUGINS`` (comma-separated
entry-point names) lets an operator switch named plugins off.

Tests and the testing kit (:mod:`aviso_plugins.testing`) can leave out third-party
distributions (``load_entry_points=False``) while keeping the built-ins, which are this
distribution's own entry points.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import click
import pluggy

from aviso_plugins import ENTRY_POINT_GROUP, PROJECT_NAME, hookspecs
from aviso_plugins.types import AuthProvider, FieldHandler, Sink, StorageBackend, StreamAuthoriser

BLOCK_ENV = "AVISO_BLOCK_PLUGINS"
BUILTIN_DISTRIBUTION = "aviso-py"
# Names of the host's own subcommands: a plugin command may not take them.
HOST_COMMANDS = frozenset({"serve", "plugins", "config"})


class PluginError(RuntimeError):
    """A plugin could not be loaded or contradicts another one; fails startup."""


@dataclass(frozen=True, slots=True)
class PluginInfo:
    name: str
    kinds: tuple[str, ...]
    distribution: str
    version: str
    # kind -> the names it provides under that kind (handler types, backend kinds, ...)
    provides: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class PluginRegistry:
    """What the loaded plugins provide, keyed by the name configuration uses."""

    field_handlers: dict[str, type[FieldHandler]] = field(default_factory=dict)
    backends: dict[str, type[StorageBackend]] = field(default_factory=dict)
    auth_providers: dict[str, type[AuthProvider]] = field(default_factory=dict)
    authorisers: dict[str, type[StreamAuthoriser]] = field(default_factory=dict)
    sinks: dict[str, type[Sink]] = field(default_factory=dict)
    commands: dict[str, click.Command] = field(default_factory=dict)
    plugins: tuple[PluginInfo, ...] = ()
    manager: pluggy.PluginManager | None = None
    owners: dict[tuple[str, str], str] = field(default_factory=dict)
    """(registry attribute, name) -> the entry-point name of the plugin providing it."""

    def describe(self, attribute: str, name: str) -> str:
        """Who provides ``name``, for error messages: kind, name, entry point, distribution."""
        noun = _NOUNS[attribute]
        owner = self.owners.get((attribute, name))
        info = next((plugin for plugin in self.plugins if plugin.name == owner), None)
        if owner is None or info is None or not info.version:
            return f"{noun} {name!r} (registered in code)"
        return f"{noun} {name!r} (entry point {owner!r} of {info.distribution} {info.version})"


# hook name -> (kind shown by `aviso-server plugins`, registry attribute, class attribute naming it)
_PROVIDES = {
    "aviso_field_handlers": ("field-handlers", "field_handlers", "type_name"),
    "aviso_storage_backends": ("storage-backend", "backends", "kind"),
    "aviso_auth_providers": ("auth-provider", "auth_providers", "mode"),
    "aviso_stream_authorisers": ("stream-authoriser", "authorisers", "name"),
    "aviso_sinks": ("sink", "sinks", "name"),
    "aviso_commands": ("commands", "commands", "name"),
}


_NOUNS = {
    "field_handlers": "field handler",
    "backends": "storage backend",
    "auth_providers": "auth provider",
    "authorisers": "stream authoriser",
    "sinks": "sink",
}


def blocked_plugins() -> set[str]:
    return {name.strip() for name in os.environ.get(BLOCK_ENV, "").split(",") if name.strip()}


def discover(
    load_entry_points: bool = True, extra: Iterable[Any] = (), builtins: bool = True
) -> PluginRegistry:
    """Load the entry-point plugins, then register ``extra`` plugin objects.

    ``load_entry_points=False`` skips every other distribution's plugins (tests of a plugin
    that is not installed); the built-ins are still loaded unless ``builtins=False``.
    """
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    for name in blocked_plugins():
        manager.set_blocked(name)
    origins = (
        _load_entry_points(manager, builtins_only=not load_entry_points)
        if load_entry_points or builtins
        else {}
    )
    for plugin in extra:
        manager.register(plugin)
    return _build_registry(manager, origins)


def _load_entry_points(
    manager: pluggy.PluginManager, builtins_only: bool = False
) -> dict[str, tuple[str, str]]:
    """Register every entry point of the group; return name -> (distribution, version)."""
    origins: dict[str, tuple[str, str]] = {}
    for dist in importlib.metadata.distributions():
        if builtins_only and dist.metadata["Name"] != BUILTIN_DISTRIBUTION:
            continue
        for entry_point in dist.entry_points:
            if entry_point.group != ENTRY_POINT_GROUP or entry_point.name in origins:
                continue
            origins[entry_point.name] = (dist.metadata["Name"], dist.version)
            if manager.is_blocked(entry_point.name):
                continue
            try:
                plugin = entry_point.load()
            except Exception as exc:
                raise PluginError(
                    f"plugin '{entry_point.name}' ({entry_point.value}) from "
                    f"{dist.metadata['Name']} {dist.version} failed to load: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            manager.register(plugin, name=entry_point.name)
    return origins


def _build_registry(
    manager: pluggy.PluginManager, origins: dict[str, tuple[str, str]]
) -> PluginRegistry:
    """Collect every hook's results, refusing two plugins that claim the same name."""
    provided: dict[str, dict[str, Any]] = {attribute: {} for _, attribute, _ in _PROVIDES.values()}
    owners: dict[tuple[str, str], str] = {}
    kinds: dict[str, dict[str, list[str]]] = {}
    for hook_name, (kind, attribute, key) in _PROVIDES.items():
        for impl in getattr(manager.hook, hook_name).get_hookimpls():
            plugin_name = manager.get_name(impl.plugin) or repr(impl.plugin)
            names = kinds.setdefault(plugin_name, {}).setdefault(kind, [])
            for provided_object in impl.function() or ():
                name = getattr(provided_object, key)
                if attribute == "commands" and name in HOST_COMMANDS:
                    raise PluginError(
                        f"plugin '{plugin_name}' provides command '{name}', "
                        "which is one of aviso-server's own"
                    )
                previous = owners.setdefault((attribute, name), plugin_name)
                if previous != plugin_name:
                    raise PluginError(
                        f"plugins '{previous}' and '{plugin_name}' both provide {key} '{name}'"
                    )
                provided[attribute][name] = provided_object
                names.append(name)
    for impl in manager.hook.aviso_extra_routes.get_hookimpls():
        # Not called here: routes are built once, by create_app.
        plugin_name = manager.get_name(impl.plugin) or repr(impl.plugin)
        kinds.setdefault(plugin_name, {})["routes"] = []
    plugins = tuple(
        PluginInfo(
            name,
            tuple(kinds.get(name, {})),
            *origins.get(name, ("(registered in code)", "")),
            provides=tuple((kind, tuple(names)) for kind, names in kinds.get(name, {}).items()),
        )
        for name, plugin in sorted(manager.list_name_plugin(), key=lambda item: item[0])
        if plugin is not None
    )
    return PluginRegistry(
        **provided,
        plugins=plugins,
        manager=manager,
        owners=owners,
    )
