"""Plugin discovery: one pluggy manager fed from the ``aviso`` entry-point group.

Built-in plugins are listed in ``setup.cfg`` under the same group as third-party ones, so
the host never imports a plugin module by name. What a plugin package gets wrong is reported
by name (docs/plugins.md, "The shape of a plugin"): ``serve`` and ``config check`` refuse it
(:class:`PluginError`); ``aviso-server plugins`` and ``--help`` use ``tolerant=True`` to keep
what did load and list the rest with their state.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import inspect
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import click
import pluggy

from aviso_host import BUILTIN_DISTRIBUTION
from aviso_plugins import ENTRY_POINT_GROUP, PROJECT_NAME, hookspecs
from aviso_plugins.schema_keys import RESERVED_SCHEMA_KEYS, SchemaKey
from aviso_plugins.types import (
    AuthProvider,
    DeliveryKind,
    FieldHandler,
    NotificationConsumer,
    Sink,
    StorageBackend,
    StreamAuthoriser,
)

BLOCK_ENV = "AVISO_BLOCK_PLUGINS"
# Names of the host's own subcommands: a plugin command may not take them.
HOST_COMMANDS = frozenset({"serve", "plugins", "config"})


class PluginError(RuntimeError):
    """A plugin could not be loaded or contradicts another one; fails startup."""


LOADED = "loaded"
FAILED = "failed"
CONFLICTING = "conflicting"
BLOCKED = "blocked"
IN_CODE = "(registered in code)"


@dataclass(frozen=True, slots=True)
class PluginInfo:
    name: str
    kinds: tuple[str, ...]
    distribution: str
    version: str
    # kind -> the names it provides under that kind (handler types, backend kinds, ...)
    provides: tuple[tuple[str, tuple[str, ...]], ...] = ()
    state: str = LOADED
    """``loaded``, ``failed`` (see ``reason``), ``conflicting`` (see ``reason``) or ``blocked``."""
    reason: str = ""


@dataclass(frozen=True)
class PluginRegistry:
    """What the loaded plugins provide, keyed by the name configuration uses."""

    field_handlers: dict[str, type[FieldHandler]] = field(default_factory=dict)
    backends: dict[str, type[StorageBackend]] = field(default_factory=dict)
    auth_providers: dict[str, type[AuthProvider]] = field(default_factory=dict)
    authorisers: dict[str, type[StreamAuthoriser]] = field(default_factory=dict)
    sinks: dict[str, type[Sink]] = field(default_factory=dict)
    consumers: dict[str, type[NotificationConsumer]] = field(default_factory=dict)
    delivery_kinds: dict[str, type[DeliveryKind]] = field(default_factory=dict)
    schema_keys: dict[str, type[SchemaKey]] = field(default_factory=dict)
    commands: dict[str, click.Command] = field(default_factory=dict)
    plugins: tuple[PluginInfo, ...] = ()
    manager: pluggy.PluginManager | None = None
    owners: dict[tuple[str, str], str] = field(default_factory=dict)
    """(registry attribute, name) -> the entry-point name of the plugin providing it."""
    unloaded: tuple[PluginInfo, ...] = ()
    """Plugins not in use: blocked, or (with ``tolerant=True``) failed or conflicting."""
    warnings: tuple[str, ...] = ()
    """Worth telling the operator, not worth refusing (a blocked name matching no plugin)."""

    @property
    def problems(self) -> tuple[str, ...]:
        """One line per plugin that failed or conflicts (empty unless ``tolerant=True``)."""
        # dict.fromkeys: both sides of one clash carry the same line
        return tuple(dict.fromkeys(i.reason for i in self.unloaded if i.state != BLOCKED))

    def describe(self, attribute: str, name: str) -> str:
        """Who provides ``name``, for error messages: kind, name, entry point, distribution."""
        noun = _NOUNS[attribute]
        owner = self.owners.get((attribute, name))
        info = next((plugin for plugin in self.plugins if plugin.name == owner), None)
        if owner is None or info is None or not info.version:
            return f"{noun} {name!r} (registered in code)"
        return f"{noun} {name!r} (entry point {owner!r} of {info.distribution} {info.version})"


# hook name -> (kind shown by `aviso-server plugins`, registry attribute, class attribute naming
# it, noun in error messages)
_PROVIDES = {
    "aviso_field_handlers": ("field-handlers", "field_handlers", "type_name", "field handler"),
    "aviso_storage_backends": ("storage-backend", "backends", "kind", "storage backend"),
    "aviso_auth_providers": ("auth-provider", "auth_providers", "mode", "auth provider"),
    "aviso_stream_authorisers": ("stream-authoriser", "authorisers", "name", "stream authoriser"),
    "aviso_sinks": ("sink", "sinks", "name", "sink"),
    "aviso_notification_consumers": (
        "notification-consumer",
        "consumers",
        "name",
        "notification consumer",
    ),
    "aviso_delivery_kinds": ("delivery-kind", "delivery_kinds", "kind", "delivery kind"),
    "aviso_schema_keys": ("schema-key", "schema_keys", "key", "schema key"),
    "aviso_commands": ("commands", "commands", "name", "command"),
}
_NOUNS = {attribute: noun for _, attribute, _, noun in _PROVIDES.values()}


# hook name -> kind shown by `aviso-server plugins`, for hooks that name nothing
_PROCESS_KINDS = {
    "aviso_settings_sections": "settings",
    "aviso_log_handlers": "log-handlers",
    "aviso_metrics": "metrics",
}


def blocked_plugins() -> set[str]:
    return {name.strip() for name in os.environ.get(BLOCK_ENV, "").split(",") if name.strip()}


def discover(
    load_entry_points: bool = True,
    extra: Iterable[Any] = (),
    builtins: bool = True,
    tolerant: bool = False,
) -> PluginRegistry:
    """Load the entry-point plugins, then register ``extra`` plugin objects.

    ``load_entry_points=False`` skips every other distribution's plugins (tests of a plugin
    that is not installed); the built-ins are still loaded unless ``builtins=False``.
    A plugin that fails to load, implements a hook that does not exist or claims a name
    another plugin has raises :class:`PluginError`; with ``tolerant=True`` it is left out
    instead and listed in ``unloaded`` with its state and reason.
    """
    manager = pluggy.PluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    blocked = blocked_plugins()
    for name in blocked:
        manager.set_blocked(name)
    survey = _Survey(manager, tolerant)
    if load_entry_points or builtins:
        survey.load_entry_points(builtins_only=not load_entry_points)
        if load_entry_points:  # only a full scan can tell that a blocked name matches nothing
            survey.warn_unknown_blocked(blocked)
    for plugin in extra:
        survey.register(plugin, None, IN_CODE, "")
    survey.check_hook_names()
    return survey.registry()


def _project(name: str) -> str:
    """A distribution name as packaging compares them (``Aviso_Py`` is ``aviso-py``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _label(distribution: str, version: str) -> str:
    return f"{distribution} {version}".strip()


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


class _Conflict(PluginError):
    """A plugin claims a name another plugin (or the host) already has."""


class _Survey:
    """One discovery: what was registered, where it came from, and what was left out."""

    def __init__(self, manager: pluggy.PluginManager, tolerant: bool) -> None:
        self.manager = manager
        self.tolerant = tolerant
        self.origins: dict[str, tuple[str, str]] = {}
        self.unloaded: list[PluginInfo] = []
        self.warnings: list[str] = []
        self.entry_point_names: set[str] = set()

    def fail(self, name: str, distribution: str, version: str, state: str, reason: str) -> None:
        if not self.tolerant:
            raise (_Conflict if state == CONFLICTING else PluginError)(reason)
        info = PluginInfo(name, (), distribution, version, state=state, reason=reason)
        self.unloaded.append(info)

    def load_entry_points(self, builtins_only: bool) -> None:
        claims: dict[str, list[tuple[str, str, importlib.metadata.EntryPoint]]] = {}
        projects: set[str] = set()
        for dist in importlib.metadata.distributions():
            name = dist.metadata["Name"] or ""
            # The same project found again further along the path (a development checkout's
            # egg-info beside its installed metadata) is one distribution: the first found
            # wins, as it does for imports.
            if _project(name) in projects:
                continue
            projects.add(_project(name))
            if builtins_only and _project(name) != BUILTIN_DISTRIBUTION:
                continue
            for entry_point in dist.entry_points.select(group=ENTRY_POINT_GROUP):
                claims.setdefault(entry_point.name, []).append((name, dist.version, entry_point))
        self.entry_point_names = set(claims)
        for plugin_name, claimants in claims.items():
            # Metadata left behind under another project name that points at the very same
            # module loads the same plugin: only different code under one name is a clash.
            if len({entry_point.value for _, _, entry_point in claimants}) > 1:
                both = " and ".join(_label(dist, version) for dist, version, _ in claimants)
                reason = (
                    f"plugin '{plugin_name}' is registered by two distributions, {both}: "
                    "uninstall one of them"
                )
                for project, version, _ in claimants:
                    self.fail(plugin_name, project, version, CONFLICTING, reason)
                continue
            project, version, entry_point = claimants[0]
            self.origins[plugin_name] = (project, version)
            if self.manager.is_blocked(plugin_name):
                self.unloaded.append(PluginInfo(plugin_name, (), project, version, state=BLOCKED))
                continue
            try:
                plugin = entry_point.load()
            except Exception as exc:
                self.fail(
                    plugin_name,
                    project,
                    version,
                    FAILED,
                    f"plugin '{plugin_name}' ({entry_point.value}) from {_label(project, version)} "
                    f"failed to load: {type(exc).__name__}: {exc}",
                )
                continue
            self.register(plugin, plugin_name, project, version)

    def warn_unknown_blocked(self, blocked: Iterable[str]) -> None:
        for name in sorted(set(blocked) - self.entry_point_names):
            self.warnings.append(
                f"{BLOCK_ENV} names '{name}', which is no installed plugin"
                + _did_you_mean(name, self.entry_point_names)
            )

    def register(self, plugin: Any, name: str | None, distribution: str, version: str) -> None:
        try:
            registered = self.manager.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            shown = name or repr(plugin)
            self.fail(
                shown,
                distribution,
                version,
                FAILED,
                f"plugin '{shown}' ({_label(distribution, version)}): {exc}",
            )
            return
        if registered is not None:
            self.warn_unmarked(plugin, registered)

    def warn_unmarked(self, plugin: Any, name: str) -> None:
        """pluggy registers only the functions marked ``@hookimpl``: one named like a hook
        but not marked would never be called, in silence."""
        marked = {caller.name for caller in self.manager.get_hookcallers(plugin) or ()}
        specs = [spec for spec in dir(hookspecs) if spec.startswith("aviso_")]
        for attribute in sorted(dir(plugin)):
            if not attribute.startswith("aviso_") or attribute in marked:
                continue
            # Looked up without running anything (a property named aviso_... stays unread).
            value = inspect.getattr_static(plugin, attribute, None)
            if inspect.isroutine(value) or isinstance(value, (staticmethod, classmethod)):
                hint = "" if attribute in specs else _did_you_mean(attribute, specs)
                self.warnings.append(
                    f"plugin '{name}' defines {attribute}(){hint} without @hookimpl, so it is "
                    "never called: mark it with aviso_plugins.hookimpl"
                )

    def check_hook_names(self) -> None:
        """pluggy's ``check_pending``: a hook implementation whose name matches no hook (a
        typo such as ``aviso_field_handler``) would otherwise never be called."""
        specs = [name for name in dir(hookspecs) if name.startswith("aviso_")]
        while True:
            try:
                self.manager.check_pending()
                return
            except pluggy.PluginValidationError as exc:
                plugin = exc.plugin
            name = self.manager.get_name(plugin) or repr(plugin)
            unknown = sorted(
                caller.name
                for caller in self.manager.get_hookcallers(plugin) or ()
                if not caller.has_spec()
            )
            distribution, version = self.origins.get(name, (IN_CODE, ""))
            self.manager.unregister(plugin)
            self.fail(
                name,
                distribution,
                version,
                FAILED,
                f"plugin '{name}' ({_label(distribution, version)}) implements "
                + ", ".join(f"'{hook}'{_did_you_mean(hook, specs)}" for hook in unknown)
                + ", which is no aviso hook",
            )

    def registry(self) -> PluginRegistry:
        """Collect every plugin's hook results, refusing a name claimed twice."""
        provided: dict[str, dict[str, Any]] = {attr: {} for _, attr, _, _ in _PROVIDES.values()}
        owners: dict[tuple[str, str], str] = {}
        plugins: list[PluginInfo] = []
        for name, plugin in sorted(self.manager.list_name_plugin(), key=self._precedence):
            if plugin is None:  # blocked
                continue
            distribution, version = self.origins.get(name, (IN_CODE, ""))
            try:
                kinds, claims = self._claims(name, plugin, owners)
            except PluginError as exc:
                self.manager.unregister(plugin)
                state = CONFLICTING if isinstance(exc, _Conflict) else FAILED
                self.fail(name, distribution, version, state, str(exc))
                continue
            for attribute, claimed, provided_object in claims:
                owners[(attribute, claimed)] = name
                provided[attribute][claimed] = provided_object
            plugins.append(
                PluginInfo(
                    name,
                    tuple(kinds),
                    distribution,
                    version,
                    provides=tuple((kind, tuple(names)) for kind, names in kinds.items()),
                )
            )
        return PluginRegistry(
            **provided,
            plugins=tuple(sorted(plugins, key=lambda info: info.name)),
            manager=self.manager,
            owners=owners,
            unloaded=tuple(self.unloaded),
            warnings=tuple(self.warnings),
        )

    def _precedence(self, item: tuple[str, Any]) -> tuple[bool, bool, str]:
        """The built-ins claim their names first, then installed plugins, then code."""
        distribution = self.origins.get(item[0], (IN_CODE, ""))[0]
        return (_project(distribution) != BUILTIN_DISTRIBUTION, distribution == IN_CODE, item[0])

    def _claims(
        self, name: str, plugin: Any, owners: dict[tuple[str, str], str]
    ) -> tuple[dict[str, list[str]], list[tuple[str, str, Any]]]:
        """What one plugin provides: kind -> names, and (attribute, name, object) claims."""
        kinds: dict[str, list[str]] = {}
        claims: list[tuple[str, str, Any]] = []
        for hook_name, (kind, attribute, key, _) in _PROVIDES.items():
            for impl in getattr(self.manager.hook, hook_name).get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                names = kinds.setdefault(kind, [])
                try:
                    results = list(impl.function() or ())
                except Exception as exc:
                    raise PluginError(
                        f"plugin '{name}': {hook_name}() raised {type(exc).__name__}: {exc}"
                    ) from exc
                for provided_object in results:
                    claimed = getattr(provided_object, key, None)
                    if not isinstance(claimed, str) or not claimed:
                        raise PluginError(
                            f"plugin '{name}': {hook_name}() returned {provided_object!r}, "
                            f"which has no '{key}' (the name configuration selects it by): "
                            f"set the class attribute {key}"
                        )
                    if attribute == "commands" and claimed in HOST_COMMANDS:
                        raise _Conflict(
                            f"plugin '{name}' provides command '{claimed}', "
                            "which is one of aviso-server's own"
                        )
                    if attribute == "schema_keys" and claimed in RESERVED_SCHEMA_KEYS:
                        raise _Conflict(
                            f"plugin '{name}' provides schema key '{claimed}', "
                            "which aviso-server reads itself"
                        )
                    previous = owners.get((attribute, claimed))
                    if previous is not None:
                        raise _Conflict(
                            f"plugins '{previous}' and '{name}' both provide {key} '{claimed}'"
                        )
                    claims.append((attribute, claimed, provided_object))
                    names.append(claimed)
        for hook in (self.manager.hook.aviso_extra_routes, self.manager.hook.aviso_api_routes):
            # Not called here: routes are built once, by create_app.
            if any(impl.plugin is plugin for impl in hook.get_hookimpls()):
                kinds["routes"] = []
        for hook_name, kind in _PROCESS_KINDS.items():
            # Not called here: their results depend on the configuration read later.
            if any(
                impl.plugin is plugin
                for impl in getattr(self.manager.hook, hook_name).get_hookimpls()
            ):
                kinds[kind] = []
        return kinds, claims
