"""``aviso-server plugin new``: a plugin package that installs and passes its tests as written.

The templates ship inside this package (``templates/plugin/<kind>/``, plus ``common/`` for
every kind); ``$``-placeholders (:class:`string.Template`) are filled in from the package
name. Every package gets a ``pyproject.toml`` registering the plugin in the ``aviso``
entry-point group, the plugin module (typed, with ``py.typed``), tests written with the
testing kit, and a README.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from importlib.metadata import version
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aviso_host.embedding import PluginRegistry

DISTRIBUTION = "aviso-py"
"""The distribution this plugin ships in: what a generated package requires."""

# kind -> (what the README calls it, registry attribute whose names it must not take)
KINDS: dict[str, tuple[str, str]] = {
    "field-handler": ("field handler", "field_handlers"),
    "auth": ("auth provider", "auth_providers"),
    "authoriser": ("stream authoriser", "authorisers"),
    "backend": ("storage backend", "backends"),
    "sink": ("sink", "sinks"),
    "delivery": ("delivery kind", "delivery_kinds"),
    "command": ("command", "commands"),
}
# Keeps every generated line within the line length, whatever the name.
MAX_PROJECT_LENGTH = 30
_PROJECT = re.compile(r"[A-Za-z][A-Za-z0-9]*([-_.][A-Za-z0-9]+)*")
_USAGE = {
    "field-handler": "In a schema: `identifier: {code: {type: $name, required: true}}`.",
    "auth": "In the configuration: `auth: {enabled: true, mode: $name, $name: {keys: [...]}}`.",
    "authoriser": "A stream opts in with `auth: {plugins: [$name]}`; the top-level section "
    "`$name: {realms: {...}}` lists who may read.",
    "backend": "In the configuration: `notification_backend: {kind: $name}`.",
    "sink": 'Spark: `.option("sink", "$name").option("sink.path", "out.jsonl")`.',
    "delivery": "In the configuration: `subscriptions: {$name: {directory: /var/spool/aviso}}`; "
    'a subscription asks for it with `"delivery": {"kind": "$name", "file": "ops"}`.',
    "command": "Run it: `aviso-server $name world`.",
}


class StarterError(ValueError):
    """The package cannot be written as asked (bad name, taken name, existing folder)."""


@dataclass(frozen=True)
class Names:
    """Every name a generated package uses, derived from the distribution name."""

    project: str
    """The distribution name, as given (``aviso-colour``)."""
    module: str
    """The import name (``aviso_colour``)."""
    name: str
    """What configuration selects: handler type, backend kind, auth mode, authoriser, sink,
    delivery kind or command name (``ColourHandler``, ``colour``)."""
    cls: str
    """The plugin class (``ColourHandler``, ``ColourBackend``...)."""

    @property
    def entry_point(self) -> str:
        return self.module.removeprefix("aviso_")


def names_for(project: str, kind: str) -> Names:
    """The names for ``project`` (a distribution name) and ``kind`` (one of :data:`KINDS`)."""
    if kind not in KINDS:
        raise StarterError(f"unknown kind '{kind}' (one of: {', '.join(KINDS)})")
    if len(project) > MAX_PROJECT_LENGTH:
        raise StarterError(f"'{project}' is longer than {MAX_PROJECT_LENGTH} characters")
    if not _PROJECT.fullmatch(project):
        raise StarterError(
            f"'{project}' is not a package name: letters and digits, "
            "separated by single '-', '_' or '.'"
        )
    module = re.sub(r"[-.]", "_", project).lower()
    short = module.removeprefix("aviso_") or module
    if not short.isidentifier():
        raise StarterError(f"'{project}' must not start with a digit (after 'aviso-')")
    camel = "".join(part.capitalize() for part in short.split("_"))
    suffix = {
        "field-handler": "Handler",
        "auth": "Provider",
        "authoriser": "Authoriser",
        "backend": "Backend",
        "sink": "Sink",
        "delivery": "Delivery",
        "command": "",
    }[kind]
    # aviso-colour-handler: ColourHandler, not ColourHandlerHandler
    camel = (camel.removesuffix(suffix) or camel) if suffix else camel
    name = {"field-handler": f"{camel}Handler", "command": short.replace("_", "-")}.get(kind, short)
    return Names(project, module, name, f"{camel}{suffix}" if suffix else short)


def create_package(
    project: str, kind: str, parent: Path, registry: PluginRegistry | None = None
) -> Path:
    """Write the package for ``project`` as ``parent/<project>``; return that folder.

    ``registry`` (the installed plugins) lets a name another plugin already provides be
    refused now rather than at the first start.
    """
    # Imported here: adding the command to ``aviso-server`` (every start) imports this module.
    from aviso_builtins.subscriptions.settings import SubscriptionSettings
    from aviso_host.embedding import HOST_COMMANDS

    names = names_for(project, kind)
    noun, attribute = KINDS[kind]
    taken = set(getattr(registry, attribute)) if registry is not None else set()
    if kind == "command":
        taken |= HOST_COMMANDS
    if kind == "delivery":
        # ``subscriptions.<kind>`` is the kind's section: the host's own keys are not kinds.
        taken |= {setting.name for setting in fields(SubscriptionSettings)}
    if names.name in taken:
        raise StarterError(f"{noun} '{names.name}' already exists: choose another package name")
    if registry is not None and names.entry_point in {p.name for p in registry.plugins}:
        raise StarterError(
            f"plugin '{names.entry_point}' already exists: choose another package name"
        )
    target = parent / project
    if target.exists():
        raise StarterError(f"{target} already exists")
    values = {
        "project": names.project,
        "module": names.module,
        "entry_point": names.entry_point,
        "name": names.name,
        "cls": names.cls,
        "function": names.cls,
        "kind": kind,
        "noun": noun,
        "summary": f"An aviso {noun}",
        "requirement": _requirement(),
    }
    values["usage"] = Template(_USAGE[kind]).substitute(values)
    templates = files("aviso_builtins.starter") / "templates" / "plugin"
    outputs = {
        "pyproject.toml": templates / "common" / "pyproject.toml.tmpl",
        "README.md": templates / "common" / "README.md.tmpl",
        f"{names.module}/__init__.py": templates / kind / "plugin.py.tmpl",
        f"tests/test_{names.module}.py": templates / kind / "test_plugin.py.tmpl",
    }
    for relative, template in outputs.items():
        _write(target / relative, _fill(template, values))
    _write(target / names.module / "py.typed", "")
    return target


def _requirement() -> str:
    """aviso-py from this version up to the next major one."""
    current = version(DISTRIBUTION)
    major = int(current.split(".")[0])
    return f"{DISTRIBUTION}>={current},<{major + 1}"


def _fill(template: Traversable, values: dict[str, str]) -> str:
    return Template(template.read_text(encoding="utf-8")).substitute(values)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
